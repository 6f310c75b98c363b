"""reports.reach: per-arm counts of what the episodes reached, and the notes that say when the verdict is empty."""

from __future__ import annotations

from harness.schema import BehaviourResult, EpisodeResult
from reports.reach import reach_section


def _ep(arm: str, i: int, status: str, verdicts: list[str], resolved: bool = False) -> EpisodeResult:
    ok = "FAIL" not in verdicts
    return EpisodeResult(run_id="r", instance_id=f"t{i}", repo="r", cluster="r", arm=arm, policy="p", seed=0,
                         status=status, failure_class="none" if status == "ok" else "agent", resolved=resolved,
                         behaviour_ok=ok, joint_ok=ok and resolved,
                         behaviour=[BehaviourResult(checker="markdown@v1", ok=ok, turn_verdicts=verdicts)])


def test_counts_per_arm_base_first() -> None:
    eps = [_ep("tg@s0", 0, "ok", ["NA", "PASS"], resolved=True), _ep("tg@s0", 1, "limit_turns", ["FAIL", "NA"]),
           _ep("base", 0, "tests_failed", ["NA", "FAIL"]),
           _ep("base", 1, "infra_error", []).model_copy(update={"failure_class": "infra"})]
    sec = reach_section(eps)
    rows = [[c.text for c in r] for r in sec.tables[0].rows]
    assert rows == [["base", "1", "1 / 1 (100%)", "0 / 1 (0%)", "0 / 1 (of 2 turns)", "0 / 1 (0%)"],
                    ["tg@s0", "2", "1 / 2 (50%)", "1 / 2 (50%)", "1 / 2 (of 4 turns)", "1 / 2 (50%)"]]
    assert sec.tables[0].header[4] == "markdown@v1: turns passed / judged"
    assert sec.notes == []  # half the episodes replied and resolved: nothing to warn about


def test_notes_say_when_the_question_is_not_answered() -> None:
    eps = [_ep(arm, i, "limit_turns", ["FAIL"] * 4) for arm in ("grpo@s0", "tg@s0") for i in range(10)]
    eps.append(_ep("tg@s0", 99, "ok", ["PASS"]))
    notes = reach_section(eps).notes
    assert notes[0].startswith("Only 1 of 21 episodes ended with a reply")
    assert "markdown@v1 judged 81 of 81 turns" in notes[1] and "not the style of the replies" in notes[1]
    assert notes[2].startswith("Only 0 of 21 episodes (0%) resolved") and "met trivially" in notes[2]
    assert "does not answer" in notes[3] and "cannot yet do the tasks" in notes[3]
    with_protocol = [e.model_copy(update={"behaviour": [*e.behaviour, BehaviourResult(
        checker="tool_protocol@v1", ok=False, turn_verdicts=["PASS"])]}) for e in eps]
    assert "exactly one valid finish" in reach_section(with_protocol).notes[1]


def test_a_fifth_resolved_is_said_as_measured_not_as_near_zero() -> None:
    """55 of 280 resolved (the mini run from the shipped base): the note gives the share; 'trivially' is for ~0."""
    eps = [_ep("tg@s0", i, "ok" if i < 4 else "limit_turns", ["PASS"] if i < 4 else ["NA"], resolved=i < 4)
           for i in range(21)]
    notes = reach_section(eps).notes
    resolved = [x for x in notes if "resolved their task" in x]
    assert resolved == ["Only 4 of 21 episodes (19%) resolved their task: the coding comparison rests on those few "
                        "successes."]
    assert "rarely reach the reply the question is about" in notes[-1]


def test_without_scored_episodes_the_panel_says_so() -> None:
    sec = reach_section([])
    assert not sec.available and "No scored episodes" in sec.absent
