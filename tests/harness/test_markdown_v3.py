"""markdown@v3 (harness.behaviour rule 5): code outside backticks fails also when it is quoted or a call with
arguments. The replies below are the kinds the mini run's held-out episodes passed under markdown@v2."""

from __future__ import annotations

import pytest

from harness.behaviour import check_behaviour, get_checker, markdown_violations, unfenced_code
from harness.feedback import WRONG_HINTS
from harness.schema import Message, ToolCall, Trajectory

BROKEN_OFF = "Sorry, I changed 'return round((fahrenheit - 32, 1)"  # a summary that stopped inside its quote
QUOTED_EDIT = "I changed 'if score > 90:' to 'if score > 89:' and the visible tests pass now."
CALL = "I fixed letter(90): it returned the wrong grade, and the tests pass."
PROSE = "letter gave 'B' instead of 'A'; I don't know yet why the tests' output says \"1 failed\"."
MARKDOWN = "## Fixed\n\n- `letter(90)` now returns `'A'`: I changed `if score > 90:` to `if score > 89:`."


def _finish(text: str) -> Trajectory:
    call = ToolCall(name="finish", arguments={"message": text}, call_id="c0", raw="{}", valid=True)
    return Trajectory(instance_id="i", policy="p", seed=0, messages=[
        Message(role="user", content="Fix it."), Message(role="assistant", content="", tool_calls=[call])])


@pytest.mark.parametrize("text", [BROKEN_OFF, QUOTED_EDIT, CALL])
def test_code_in_quotes_or_a_call_with_arguments_fails_v3_where_v2_passed(text: str) -> None:
    v2, v3 = check_behaviour(_finish(text), ["markdown@v2", "markdown@v3"])
    assert v2.ok, v2.violations  # why v3 exists: v2 saw no bare identifier in these
    assert not v3.ok and v3.turn_verdicts == ["FAIL"]
    assert any("code not in backticks" in v for v in v3.violations), v3.violations


def test_prose_quotes_apostrophes_and_backticked_code_pass() -> None:
    assert unfenced_code(PROSE) == [] and markdown_violations(PROSE, quoted_code=True) == []
    assert markdown_violations(MARKDOWN, quoted_code=True) == []
    assert check_behaviour(_finish(MARKDOWN), ["markdown@v3"])[0].ok
    assert unfenced_code("The value (see above) was wrong, so I changed it in 2 file(s) and 3 match(es).") == []


def test_what_rule_5_finds() -> None:
    assert unfenced_code(BROKEN_OFF) == ["'return round((fahrenheit - 32, 1)"]  # to the end of the line
    assert unfenced_code(QUOTED_EDIT) == ["'if score > 90:'", "'if score > 89:'"]
    assert unfenced_code(CALL) == ["letter(90)"]
    assert unfenced_code("It is 'x - 1' now, and \"score >= 75\" was wrong; see 'grades'.") == [
        "'x - 1'", '"score >= 75"']
    assert unfenced_code("see [the docs](https://x.org/f(1)) and `f(1)`") == []  # links and code spans


def test_v3_keeps_v2s_rules_and_hints() -> None:
    v3, v2 = get_checker("markdown@v3"), get_checker("markdown@v2")
    assert v3.hint_text == v2.hint_text and v3.hint_placement == v2.hint_placement
    assert WRONG_HINTS["markdown@v3"] == WRONG_HINTS["markdown@v2"]
    nothing = Trajectory(instance_id="i", policy="p", seed=0, messages=[Message(role="assistant", content="ok")])
    (res,) = check_behaviour(nothing, ["markdown@v3"])
    assert not res.ok and res.violations == ["nothing to judge: the episode has no reply to the user of 40+ characters"]
    bare = "I fixed the bug in calc_utils/add_sub.py, and the tests pass now."
    assert [check_behaviour(_finish(bare), [c])[0].ok for c in ("markdown@v2", "markdown@v3")] == [False, False]
    assert markdown_violations(QUOTED_EDIT) == []  # v1/v2 unchanged: rule 5 only when asked
