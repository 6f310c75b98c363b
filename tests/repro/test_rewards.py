"""The reward that uses every signal: signal extraction (harness.signals) and the weighted terms (repro.rewards)."""

from __future__ import annotations

import pytest

from harness.schema import Grade, Message, ToolCall
from harness.signals import (
    count_invalid_calls,
    count_repeated_tool_errors,
    count_rework,
    episode_signals,
    grade_code_runs,
    user_feedback,
)
from repro.config import load_config
from repro.rewards import TERMS, contributions, edits_shape, format_reward, reward_components, total_reward


def _edit(path: str, old: str, new: str) -> ToolCall:
    return ToolCall(name="edit_file", arguments={"path": path, "old": old, "new": new})


def _turn(calls: list[ToolCall], observations: list[str]) -> list[Message]:
    return [Message(role="assistant", content="x", tool_calls=calls),
            *[Message(role="tool", content=o) for o in observations]]


def test_rework_counts_edits_of_the_agents_own_lines_only() -> None:
    msgs = [
        *_turn([_edit("a.py", "return x - 1", "return x + 1")], ["edited a.py"]),        # original code: not rework
        *_turn([_edit("a.py", "def g():", "def g():\n    y = 2")], ["edited a.py"]),     # original code again
        *_turn([_edit("a.py", "return x + 1", "return x - 1")], ["edited a.py"]),        # undoes its own edit: 1
        *_turn([_edit("a.py", "    y = 2", "    y = 3")], ["edited a.py"]),              # rewrites its own line: 2
        *_turn([_edit("b.py", "return x + 1", "return 0")], ["ERROR: old text not found"]),  # failed: not counted
        *_turn([_edit("c.py", "", "A = 1\n")], ["created c.py"]),
        *_turn([_edit("c.py", "A = 1", "A = 2")], ["edited c.py"]),                       # edits its new file: 3
    ]
    assert count_rework(msgs) == 3


def test_repeated_errors_and_invalid_calls() -> None:
    bad = ToolCall(name="", valid=False, error="invalid JSON")
    fin = ToolCall(name="finish", arguments={"message": "done"})
    read = ToolCall(name="read_file", arguments={"path": "nope.py"})
    msgs = [
        *_turn([read, read], ["ERROR: nope.py: no such file", "ERROR: nope.py: no such file"]),  # repeat 1
        *_turn([read], ["ERROR: nope.py: no such file\nmore"]),                                  # repeat 2
        *_turn([ToolCall(name="read_file", arguments={"path": "x.py"})], ["ERROR: x.py: no such file"]),  # new
        *_turn([bad], ["ERROR: invalid JSON"]),                                                  # invalid, not a repeat
        *_turn([fin, read, bad], ["Task finished."]),                                            # 2 after finish
    ]
    assert count_repeated_tool_errors(msgs) == 2
    assert count_invalid_calls(msgs) == 3


def test_code_runs_from_the_grade() -> None:
    ok = Grade(resolved=False, valid=True, f2p={"t::a": "failed"}, p2p={"t::b": "passed"})
    assert grade_code_runs(ok) is True  # a failing assertion still ran
    assert grade_code_runs(ok.model_copy(update={"f2p": {"t::a": "error"}})) is False  # import/collection error
    assert grade_code_runs(ok.model_copy(update={"f2p": {"t::a": "missing"}})) is False
    assert grade_code_runs(Grade(resolved=False, valid=False, reason="NO_JUNIT: pytest wrote no JUnit")) is False
    assert grade_code_runs(Grade(resolved=False, valid=True, patch_applied=False)) is False
    assert grade_code_runs(Grade(resolved=False, valid=False, reason="GRADE_TIMEOUT: test command timed out")) is None
    assert grade_code_runs(None) is None


def test_user_feedback_scale() -> None:
    assert user_feedback() is None
    assert user_feedback(corrections=1) == -0.5 and user_feedback(corrections=2) == -0.75
    assert user_feedback(rating=0.5, corrections=3) == 0.5  # an explicit rating wins
    with pytest.raises(ValueError, match=r"outside \[-1, 1\]"):
        user_feedback(rating=4.0)


def test_edits_shape() -> None:
    assert [edits_shape(n, 2) for n in (0, 1, 2, 3, 4, 6, 9)] == [0.0, 1.0, 1.0, 0.5, 0.0, -1.0, -1.0]
    with pytest.raises(ValueError, match="edits_target"):
        edits_shape(1, 0)


def test_components_terms_and_the_multi_reward_arm() -> None:
    assert format_reward(["NA", "NA"]) == 1.0 and format_reward(["PASS", "FAIL", "NA"]) == 0.5
    msgs = [
        *_turn([_edit("a.py", "x = 1", "x = 2")], ["edited a.py"]),
        *_turn([_edit("a.py", "x = 2", "x = 3"), ToolCall(name="run_tests")], ["edited a.py", "1 passed"]),
        *_turn([ToolCall(name="read_file", arguments={"path": "q"})] * 2, ["ERROR: q: missing", "ERROR: q: missing"]),
        *_turn([ToolCall(name="", valid=False, error="bad")], ["ERROR: bad"]),
    ]
    sig = episode_signals(msgs, resolved=True, code_runs=False, corrections=1)
    assert (sig.edits, sig.rework, sig.repeated_tool_errors, sig.invalid_tool_calls, sig.tests_run) == (2, 1, 1, 1, 1)
    w = load_config(arm="multi_reward").reward
    comps = reward_components(sig, ["PASS", "FAIL"], w)
    assert comps == {"task": 1.0, "fmt": 0.5, "code_runs": -1.0, "tests_run": 1.0, "edits": 1.0, "rework": 1.0,
                     "tool_errors": 1.0, "protocol": 1.0, "feedback": -0.5}
    terms = contributions(comps, w)
    assert set(terms) == set(TERMS)
    assert all(getattr(w, field) > 0 for _, field in TERMS.values())  # the arm weights every signal
    expected = (w.w_task + 0.5 * w.w_fmt - w.w_code_runs + w.w_tests_run + w.w_edits - w.w_rework - w.w_tool_errors
                - w.w_protocol - 0.5 * w.w_feedback)
    assert total_reward(comps, w) == pytest.approx(expected)
    base = load_config().reward  # the default weights: task and format only
    assert total_reward(comps, base) == pytest.approx(1.0 + 0.25)


def test_multi_reward_arm_logs_the_breakdown_per_term(tmp_path) -> None:
    import _rl_fixtures as F

    from repro.train import train_rl

    train_rl(F.config("multi_reward", "rollout.max_new_tokens=8", "run.steps=1"), tmp_path / "run", setup=F.setup())
    (row,) = F.metrics(tmp_path / "run")
    assert all(f"reward/{t}" in row and f"reward/contrib/{t}" in row for t in TERMS)
    assert sum(row[f"reward/contrib/{t}"] for t in TERMS) == pytest.approx(row["reward/total"])
