"""Reports that fit the run: n/a (not 0) where nothing was judged, tests touched shown, each model arm's endpoint,
model and settings in the header."""

from __future__ import annotations

from evalsuite.run_summary import aggregate_run
from harness.schema import BehaviourResult, EpisodeMetrics, EpisodeResult, Grade
from reports.descriptive import descriptive_view, generation_facts
from reports.judged import unjudged_arms
from reports.pages import episode_rows


def _ep(arm: str, iid: str, *, resolved: bool, judged: bool, touched: bool = False) -> EpisodeResult:
    behaviour = [BehaviourResult(checker="tool_protocol@v1", ok=True, turn_verdicts=["PASS"])] if judged else []
    return EpisodeResult(
        run_id="r", instance_id=iid, repo="org/a", cluster="org/a", arm=arm, policy=arm, seed=0,
        status="ok" if resolved else "tests_failed", failure_class="none" if resolved else "agent",
        resolved=resolved, behaviour_ok=judged, joint_ok=judged and resolved,
        grade=Grade(valid=True, resolved=resolved, tests_touched=touched), behaviour=behaviour,
        metrics=EpisodeMetrics(steps=3 if judged else 0, tool_calls=3 if judged else 0))


EPS = [_ep("graded", "t1", resolved=True, judged=False, touched=True), _ep("graded", "t2", resolved=False, judged=False),
       _ep("agent", "t1", resolved=True, judged=True), _ep("agent", "t2", resolved=False, judged=True)]


def _cells(view, table_id: str) -> list[list[str]]:  # noqa: ANN001
    table = next(t for s in view.sections for t in s.tables if t.id == table_id)
    return [[c.text for c in row] for row in table.rows]


def test_graded_patches_show_na_where_nothing_was_judged() -> None:
    assert unjudged_arms(EPS) == {"graded"}
    config = {"generation.agent.endpoint": "http://127.0.0.1:8000/v1/chat/completions", "generation.agent.model": "m",
              "generation.agent.temperature": 0.2, "generation.agent.max_tokens": 64}
    agg = aggregate_run(EPS, config=config, run_id="r")
    view = descriptive_view(agg, EPS, paged=set(), max_pages=10, now="2026-01-01T00:00:00Z")
    rates = {row[0]: row for row in _cells(view, "arm-rates")}
    assert rates["graded"][4:7] == ["n/a", "n/a", "1 of 2"]  # behaviour, joint, tests touched
    assert rates["agent"][4].startswith("100.0%") and rates["agent"][6] == "0 of 2"
    assert rates["graded"][3].startswith("50.0%")  # the coding endpoint is measured
    tables = {t.id for s in view.sections for t in s.tables}
    assert "joint-agent" in tables and "joint-graded" not in tables  # no 2x2 of zeros for graded patches
    secondary = {row[0]: row[1:] for row in _cells(view, "secondary-table")}
    assert set(secondary["graded"]) == {"n/a"} and "n/a" not in secondary["agent"]
    assert all(r[3:] == ["n/a", "n/a"] for r in _cells(view, "per-repo-table") if r[1] == "graded")
    rows = {(r.arm, r.instance): r for r in episode_rows(EPS, set())}
    assert rows[("graded", "t1")].behaviour is None and rows[("agent", "t1")].behaviour is True
    facts = {f.key: f.value for f in view.facts}
    assert facts["model arm agent"] == ("http://127.0.0.1:8000/v1/chat/completions · m; temperature 0.2, "
                                        "max_tokens 64")
    reach = next(s for s in view.sections if s.id == "reach")
    assert any("graded: not listed" in n for n in reach.notes)
    assert not any("paper's question" in n for n in reach.notes)
    text = " ".join(n for s in view.sections for n in s.notes)
    assert text.count("no behaviour checker ran") == 1  # the reason is said once


def test_generation_facts_read_old_and_new_keys() -> None:
    assert generation_facts({"generation.temperature": 0.7, "generation.top_p": None}) == [
        ("model arm every model arm", "temperature 0.7")]
    assert generation_facts({"max_turns": 30.0}) == [("generation", "no model arm (scripted or graded patches only)")]
