"""No compliance by absence (issue #14 item 9): an episode that never produced the reply a requirement is about
does not comply with the requirement's v2 checker; v1 keeps its old verdict (recorded runs stay reproducible)."""

from __future__ import annotations

import random

import pytest

from harness.behaviour import check_behaviour, get_checker
from harness.policies.scripted import NullPolicy
from harness.schema import Message, Trajectory
from harness.tools import parse_tool_calls


def _traj(*texts: str) -> Trajectory:
    msgs = [Message(role="assistant", content=t, tool_calls=parse_tool_calls(t)) for t in texts]
    return Trajectory(instance_id="i", policy="p", seed=0, messages=msgs)


def test_null_policy_does_not_comply_with_markdown_v2() -> None:
    out = NullPolicy().act([], tools=[], rng=random.Random(0))
    traj = _traj(out.text)
    v1, v2 = check_behaviour(traj, ["markdown@v1", "markdown@v2"])
    assert v1.ok  # v1: nothing to judge passes (documented, kept for old runs)
    assert not v2.ok and v2.turn_verdicts == ["NA"] and v2.violations[-1].startswith("nothing to judge")


def test_v2_keeps_v1_turn_verdicts_and_passes_a_judged_reply() -> None:
    reply = '<tool_call>{"name": "finish", "arguments": {"message": "## Summary\\n\\n- Fixed `add` in `calc.py`: it subtracted."}}</tool_call>'
    traj = _traj(reply)
    v1, v2 = check_behaviour(traj, ["markdown@v1", "markdown@v2"])
    assert v1.ok and v2.ok and v1.turn_verdicts == v2.turn_verdicts == ["PASS"]
    assert get_checker("markdown@v2").hint_text == get_checker("markdown@v1").hint_text


@pytest.mark.parametrize("checker", ["tool_args@v2", "ask_first@v2"])
def test_tier_v2_without_a_judged_turn_does_not_comply(checker: str) -> None:
    traj = _traj('<tool_call>{"name": "finish", "arguments": {"message": "done"}}</tool_call>')
    old = get_checker(checker.replace("@v2", "@v1")).check(traj)
    new = get_checker(checker).check(traj)
    assert old.ok and not new.ok and new.turn_verdicts == old.turn_verdicts


def test_empty_trajectory_complies_with_nothing() -> None:
    assert not any(b.ok for b in check_behaviour(_traj(), ["markdown@v2", "tool_protocol@v1", "tool_args@v2"]))
