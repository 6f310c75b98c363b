"""Hint side-effect probes: the provider (text, kind, placement, seeding), the paired analysis on hand-made frames
with known answers, and the report panel with and without results."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalsuite.noninferiority import rd_ci_paired
from evalsuite.probes import hint_probe_study
from evalsuite.rates import StatsInputError
from evalsuite.schema import AnalysisResult, Exploratory, ProbeInfo
from harness.agent import run_episode
from harness.feedback_spec import parse_feedback
from harness.interfaces import EpisodeLimits, FeedbackProvider, Hint, PolicyOutput
from harness.probes import ASK_APPROVED_TEXT, EXPLAIN_TEXT, PROBES, ProbeFeedback, get_probe, probe_feedback
from harness.schema import Message, TaskInstance
from harness.tools import format_tool_call as fc
from harness.tools import parse_tool_calls
from reports.probes import hint_probes_section
from tests.harness_fakes import DirSandbox, make_calc_task

INST = TaskInstance(instance_id="t-1", repo="r", base_commit="abc", problem_statement="p", patch="", test_patch="",
                    FAIL_TO_PASS=["tests/test_a.py::test_a"])
BASE = [Message(role="system", content="s"), Message(role="user", content="u")]


# -- provider ----------------------------------------------------------------------------------------------------


def test_probe_texts_and_kinds_are_pinned() -> None:
    """A probe's text may change only with its version: the recorded kind must tell the two apart."""
    pinned = {"explain": (1, "cf9d30b0140f"), "ask_approved": (1, "541a88de35dd")}
    got = {n: (p.version, hashlib.sha256(p.text.encode()).hexdigest()[:12]) for n, p in PROBES.items()}
    assert got == pinned, "a probe text changed: bump its version and update this pin"
    assert PROBES["explain"].text == EXPLAIN_TEXT == "Please explain your change to me."
    assert "already approved" in ASK_APPROVED_TEXT and ASK_APPROVED_TEXT.endswith("Ask before editing files.")
    assert [p.kind for p in PROBES.values()] == ["probe:explain/v1", "probe:ask_approved/v1"]
    assert all(p.placement == "first_turn" and p.asks and p.side_effect for p in PROBES.values())


def test_provider_places_the_probe_at_the_first_turn_once() -> None:
    fb = probe_feedback("explain")
    assert isinstance(fb, FeedbackProvider) and fb.kind == "probe:explain/v1"
    rng = random.Random(0)
    state = rng.getstate()
    assert fb.hint_for(INST, BASE, 0, rng) == Hint(text=EXPLAIN_TEXT, kind="probe:explain/v1")
    assert [fb.hint_for(INST, BASE, t, rng) for t in (1, 2, 5)] == [None, None, None]
    hinted = [*BASE, Message(role="user", content=EXPLAIN_TEXT, is_hint=True)]
    assert fb.hint_for(INST, hinted, 0, rng) is None  # max_hints = 1
    draft = Message(role="assistant", content=fc("finish", {"message": "done"}),
                    tool_calls=parse_tool_calls(fc("finish", {"message": "done"})))
    assert fb.review_draft(INST, BASE, draft, 3, rng) is None  # not a draft placement
    assert rng.getstate() == state  # the feedback stream is not consumed


def test_placement_override_and_specs() -> None:
    rng = random.Random(0)
    at2 = parse_feedback("probe:ask_approved@turn=2")
    assert isinstance(at2, ProbeFeedback) and at2.probe is PROBES["ask_approved"]
    assert [t for t in range(5) if at2.hint_for(INST, BASE, t, rng) is not None] == [2]
    fin = parse_feedback("probe:explain@before_finish")
    draft = Message(role="assistant", content="x", tool_calls=parse_tool_calls(fc("finish", {"message": "m"})))
    assert fin.hint_for(INST, BASE, 0, rng) is None
    assert fin.review_draft(INST, BASE, draft, 1, rng) == Hint(text=EXPLAIN_TEXT, kind="probe:explain/v1")
    assert parse_feedback("probe:explain").placement is None  # the probe's own: first_turn
    with pytest.raises(ValueError, match="unknown probe 'nope'.*explain, ask_approved"):
        parse_feedback("probe:nope")
    with pytest.raises(ValueError, match="placement 'sometimes' unknown"):
        ProbeFeedback(get_probe("explain"), "sometimes")  # type: ignore[arg-type]


class RngPolicy:
    """Reads a random file line count chosen with the policy rng for three turns, then finishes; ignores hints,
    so the plain and probe episodes of one seed must write the same turns."""

    name = "rng"

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        n = sum(m.role == "assistant" for m in messages)
        if n >= 3:
            return PolicyOutput(fc("finish", {"message": f"done {rng.randrange(10**9)}"}))
        return PolicyOutput(f"step {rng.randrange(10**9)}\n" + fc("read_file", {"path": "calc.py"}))


@pytest.mark.parametrize("spec", ["probe:explain", "probe:ask_approved@turn=2"])
def test_plain_and_probe_episodes_share_the_pre_hint_turns(tmp_path: Path, spec: str) -> None:
    inst, repo = make_calc_task(tmp_path)
    trajs = []
    for fb in (None, parse_feedback(spec)):
        sbx = DirSandbox(repo)
        try:
            trajs.append(run_episode(inst, RngPolicy(), sbx, EpisodeLimits(), feedback=fb, seed=7))
        finally:
            sbx.close()
    plain, probed = trajs
    (h,) = probed.hint_turns
    cut = next(i for i, m in enumerate(probed.messages) if m.is_hint)
    assert [m.content for m in probed.messages[:cut]] == [m.content for m in plain.messages[:cut]]
    assert probed.messages[cut].content == PROBES[spec[6:].split("@")[0]].text and plain.hint_turns == []
    assert probed.feedback_kind == PROBES[spec[6:].split("@")[0]].kind and plain.feedback_kind is None
    # the policy's stream is the same after the hint too (it ignores the hint): same assistant turns throughout
    assert [m.content for m in probed.messages if m.role == "assistant"] == \
        [m.content for m in plain.messages if m.role == "assistant"]
    assert h == (0 if spec == "probe:explain" else 2)


# -- analysis ------------------------------------------------------------------------------------------------------

INFO = {n: ProbeInfo(name=n, kind=p.kind, placement=p.placement, text=p.text, asks=p.asks, side_effect=p.side_effect)
        for n, p in PROBES.items()}


def _pairs(probe: str, arm: str, plain: list[tuple[bool, bool]], probed: list[tuple[bool, bool]],
           delivered: bool = True) -> pd.DataFrame:
    """(edited, resolved) per state for the plain and the probe episode."""
    return pd.DataFrame({"probe": probe, "arm": arm, "state_id": [f"s{i}" for i in range(len(plain))],
                         "delivered": delivered, "plain_edited": [e for e, _ in plain],
                         "plain_resolved": [r for _, r in plain], "probe_edited": [e for e, _ in probed],
                         "probe_resolved": [r for _, r in probed]})


def test_explain_stops_edits_known_answer() -> None:
    # 10 states: plain edits in 8 (resolves 6); with the probe only 2 edit (both resolve, on states plain resolved)
    plain = [(True, True)] * 6 + [(True, False)] * 2 + [(False, False)] * 2
    probed = [(True, True)] * 2 + [(False, False)] * 8
    (r,) = hint_probe_study(_pairs("explain", "tg", plain, probed), INFO)
    assert (r.arm, r.n_states, r.delivered, r.probe.kind) == ("tg", 10, 10, "probe:explain/v1")
    ep = {e.endpoint: e for e in r.endpoints}
    edited, resolved, blocked = ep["edited"], ep["resolved"], ep["blocked"]
    assert (edited.plain_rate, edited.probe_rate) == (0.8, 0.2)
    assert (edited.change.a, edited.change.b, edited.change.c, edited.change.d) == (2, 0, 6, 2)
    assert edited.change.estimate == pytest.approx(-0.6)
    assert edited.change.mcnemar_p == pytest.approx(2 * 0.5**6)  # exact binomial: 2 * P(X <= 0), X ~ Bin(6, 1/2)
    assert (edited.change.ci_low, edited.change.ci_high) == rd_ci_paired(2, 0, 6, 2, method="tango")
    assert edited.change.ci_high < 0 and edited.change.method == "tango score"
    assert (resolved.plain_rate, resolved.probe_rate, resolved.change.c) == (0.6, 0.2, 4)
    assert resolved.change.mcnemar_p == pytest.approx(2 * 0.5**4)
    assert (blocked.plain_rate, blocked.probe_rate) == (0.2, 0.8)
    assert (blocked.change.a, blocked.change.b, blocked.change.c, blocked.change.d) == (2, 6, 0, 2)
    assert blocked.change.estimate == pytest.approx(0.6)


def test_no_side_effect_and_several_groups() -> None:
    same = [(True, True), (True, False), (False, False), (True, True)]
    df = pd.concat([_pairs("explain", "base", same, same), _pairs("ask_approved", "tg", same, same, delivered=False)])
    res = hint_probe_study(df, INFO, method="newcombe")
    assert [(r.probe.name, r.arm) for r in res] == [("ask_approved", "tg"), ("explain", "base")]
    for r in res:
        for e in r.endpoints:
            assert e.change.b == e.change.c == 0 and e.change.estimate == 0 and e.change.mcnemar_p == 1.0
            assert e.plain_rate == e.probe_rate and e.change.method.startswith("newcombe")
    assert res[0].delivered == 0 and "inserted in 0 of 4" in res[0].notes[-1]
    assert not any("inserted" in n for n in res[1].notes)


def test_bad_inputs_are_refused() -> None:
    good = _pairs("explain", "tg", [(True, True)], [(False, False)])
    with pytest.raises(StatsInputError, match="columns"):
        hint_probe_study(good.drop(columns=["delivered"]), INFO)
    with pytest.raises(StatsInputError, match="no paired states"):
        hint_probe_study(good.iloc[:0], INFO)
    with pytest.raises(StatsInputError, match="no ProbeInfo"):
        hint_probe_study(good, {})
    with pytest.raises(StatsInputError, match="appears twice"):
        hint_probe_study(pd.concat([good, good]), INFO)
    with pytest.raises(StatsInputError, match="booleans"):
        hint_probe_study(good.assign(probe_edited=[None]), INFO)
    with pytest.raises(StatsInputError, match="method"):
        hint_probe_study(good, INFO, method="wald")  # type: ignore[arg-type]


# -- report panel --------------------------------------------------------------------------------------------------


def test_report_panel_with_and_without_results() -> None:
    absent = hint_probes_section(AnalysisResult.model_construct(exploratory=Exploratory()))
    assert not absent.available and absent.absent.startswith("Not run in this study.")
    res = hint_probe_study(_pairs("explain", "tg", [(True, True)] * 3, [(False, False)] * 3), INFO)
    sec = hint_probes_section(AnalysisResult.model_construct(exploratory=Exploratory(hint_probes=res)))
    assert sec.available and len(sec.tables) == 1 and len(sec.tables[0].rows) == 3
    explain = next(n for n in sec.notes if n.startswith("explain"))
    assert EXPLAIN_TEXT in explain and PROBES["explain"].side_effect in explain and "first_turn" in explain
    row = [c.text for c in sec.tables[0].rows[0]]
    assert row[:2] == ["explain", "tg"] and row[3].startswith("edited") and row[6] == "0 / 0 / 3 / 0"
    html = {k: _html(v) for k, v in (("absent", absent), ("present", sec))}
    assert "Not run in this study." in html["absent"] and "probes-table" not in html["absent"]
    assert 'id="probes-table"' in html["present"] and "Please explain your change to me." in html["present"]


def _html(section: Any) -> str:
    from reports import render

    tpl = render.environment().from_string('{% import "_macros.html" as m %}{{ m.section(s) }}')
    return tpl.render(s=section)
