"""harness.behaviour_tiers: tool_args@v1 and ask_first@v1 on hand-written trajectories (PASS / FAIL / NA per turn),
their registration, hints, wrong hints and the context-aware verdicts used by training and feedback."""

from __future__ import annotations

import random

import pytest

from harness.behaviour import CHECKERS, get_checker, turn_verdicts
from harness.behaviour_tiers import ASK_FIRST_HINT, MAX_REASON_CHARS, TOOL_ARGS_HINT
from harness.feedback import WRONG_HINTS, ReminderFeedback, corrective_feedback
from harness.schema import Message, Trajectory
from harness.tools import format_tool_call as fc
from harness.tools import parse_tool_calls

EDIT = {"path": "calc.py", "old": "a - b", "new": "a + b"}
FIN = fc("finish", {"message": "done"})
ASK = fc("ask_user", {"question": "May I change calc.py?"})


def _turn(text: str) -> Message:
    return Message(role="assistant", content=text, tool_calls=parse_tool_calls(text))


def _traj(*texts: str) -> Trajectory:
    msgs: list[Message] = [Message(role="system", content="s"), Message(role="user", content="fix it")]
    for t in texts:
        msgs += [_turn(t), Message(role="tool", content="ok")]
    return Trajectory(instance_id="i", policy="p", seed=0, messages=msgs)


def _edit(**extra: object) -> str:
    return fc("edit_file", {**EDIT, **extra})


# --- tool_args@v1 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("texts", "verdicts", "needle"),
    [
        ((fc("read_file", {"path": "calc.py"}), FIN), ["NA", "NA"], None),
        ((_edit(reason="add used minus instead of plus"), FIN), ["PASS", "NA"], None),
        ((_edit(reason="x" * MAX_REASON_CHARS), _edit(reason="  fix the sign  ")), ["PASS", "PASS"], None),
        ((_edit(), FIN), ["FAIL", "NA"], "no 'reason' argument"),
        ((_edit(reason=""),), ["FAIL"], "'reason' is empty"),
        ((_edit(reason="   "),), ["FAIL"], "'reason' is empty"),
        ((_edit(reason="first line\nsecond line"),), ["FAIL"], "more than one line"),
        ((_edit(reason="x" * (MAX_REASON_CHARS + 1)),), ["FAIL"], "121 characters"),
        ((_edit(reason=7),), ["FAIL"], "is a int, not a string"),  # invalid call, still judged by name
        ((_edit(reason="ok") + _edit(), FIN), ["FAIL", "NA"], "call 1 (edit_file)"),  # every call of the turn
        ((_edit(reason="ok"), fc("read_file", {"path": "a.py"}), _edit()), ["PASS", "NA", "FAIL"], "turn 2"),
        (("<tool_call>{bad json, edit_file}</tool_call>", FIN), ["NA", "NA"], None),  # unparsed: tool_protocol's
    ],
)
def test_tool_args(texts: tuple[str, ...], verdicts: list[str], needle: str | None) -> None:
    c = get_checker("tool_args@v1")
    res = c.check(_traj(*texts))
    assert res.turn_verdicts == verdicts and res.ok is ("FAIL" not in verdicts)
    assert [c.verify_turn(_turn(t)) for t in texts] == verdicts  # context-free: the same alone
    if needle:
        assert any(needle in v for v in res.violations), res.violations
    else:
        assert res.violations == []


# --- ask_first@v1 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("texts", "verdicts", "needle"),
    [
        ((fc("list_files", {}), FIN), ["NA", "NA"], None),  # no edit: nothing to judge
        ((ASK, _edit(), fc("run_tests", {}), _edit(), FIN), ["NA", "PASS", "NA", "PASS", "NA"], None),
        ((fc("read_file", {"path": "calc.py"}), ASK, _edit()), ["NA", "NA", "PASS"], None),
        ((_edit(), FIN), ["FAIL", "NA"], "without asking"),
        ((_edit(), ASK, _edit()), ["FAIL", "NA", "PASS"], "turn 0"),  # asking late does not mend the first edit
        ((ASK + _edit(),), ["FAIL"], "same turn"),  # the answer comes after the turn
        ((fc("ask_user", {"question": "  "}), _edit()), ["NA", "FAIL"], "without asking"),  # empty question
        (('<tool_call>{"name": "ask_user", "arguments": {}}</tool_call>', _edit()), ["NA", "FAIL"], "without"),
        (('<tool_call>{"name": "edit_file", "arguments": {"path": "a.py"}}</tool_call>', FIN), ["NA", "NA"], None),
    ],
)
def test_ask_first(texts: tuple[str, ...], verdicts: list[str], needle: str | None) -> None:
    res = get_checker("ask_first@v1").check(_traj(*texts))
    assert res.turn_verdicts == verdicts and res.ok is ("FAIL" not in verdicts)
    if needle:
        assert any(needle in v for v in res.violations), res.violations
    else:
        assert res.violations == []


def test_ask_first_verify_turn_alone_and_in_context() -> None:
    c = get_checker("ask_first@v1")
    assert c.verify_turn(_turn(_edit())) == "FAIL"  # alone: no earlier ask
    assert c.verify_turn(_turn(ASK)) == "NA" == c.verify_turn(_turn(FIN))
    msgs = _traj(ASK, _edit()).messages
    assert turn_verdicts(c, msgs) == ["NA", "PASS"]  # in context (what training and feedback use)
    for cid in ("markdown@v1", "tool_protocol@v1", "tool_args@v1"):  # the others: the same as verify_turn
        ck = get_checker(cid)
        assert turn_verdicts(ck, msgs) == [ck.verify_turn(m) for m in msgs if m.role == "assistant"]


def test_registration_hints_and_wrong_hints() -> None:
    assert {"tool_args@v1", "ask_first@v1"} <= set(CHECKERS)
    for cid, text in (("tool_args@v1", TOOL_ARGS_HINT), ("ask_first@v1", ASK_FIRST_HINT)):
        c = get_checker(cid)
        assert c.hint_text == text and c.hint_placement == "first_turn"
        fb = corrective_feedback(cid)
        assert fb.placement == "first_turn" and fb.text(random.Random(0)) == text
        assert ReminderFeedback("wrong", checkers=(cid,)).text(random.Random(0)) == WRONG_HINTS[cid]
    # the wrong hints do not ask for the behaviour (the scripted expert keys on these phrases)
    assert '"reason" argument' in TOOL_ARGS_HINT and '"reason" argument' not in WRONG_HINTS["tool_args@v1"]
    assert "ask the user for approval" in ASK_FIRST_HINT and "ask the user for approval" not in WRONG_HINTS["ask_first@v1"]


def test_before_failing_turn_judges_in_context() -> None:
    fb = ReminderFeedback("correct", placement="before_failing_turn", checkers=("ask_first@v1",))
    rng = random.Random(0)
    inst = None  # review_draft does not read the instance
    before = _traj(ASK).messages
    assert fb.review_draft(inst, before, _turn(_edit()), 1, rng) is None  # asked earlier: the edit passes
    hint = fb.review_draft(inst, _traj(fc("list_files", {})).messages, _turn(_edit()), 1, rng)
    assert hint is not None and hint.text == ASK_FIRST_HINT
