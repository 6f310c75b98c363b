"""The finish notice (``EpisodeLimits.finish_notice_turns``): the agent loop tells the agent once, when only n turns
are left, to finish with a report; the scripted expert then reports what it changed and what still fails."""

from __future__ import annotations

import pytest

from harness.agent import NUDGE_TEXT, run_episode
from harness.behaviour import check_behaviour
from harness.feedback import ReminderFeedback
from harness.interfaces import EpisodeLimits, finish_notice, is_finish_notice
from harness.minirepos import make_mini
from harness.policies.scripted import ScriptedExpert, Step, net_change, notice_given
from harness.runner_sandbox import TaskSandboxFactory
from harness.schema import Message, TaskSet
from harness.tasks import load_task_set
from harness.tools import format_tool_call as fc
from tests.harness import test_agent
from tests.harness.test_agent import Script

READ = fc("read_file", {"path": "calc.py"})
calc = test_agent.calc  # the fixture: a one-bug repository in a DirSandbox


def _notices(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.role == "user" and is_finish_notice(m.content)]


def test_the_notice_comes_once_when_n_turns_are_left(calc) -> None:
    inst, sbx = calc
    traj = run_episode(inst, Script([READ]), sbx, EpisodeLimits(max_turns=5, finish_notice_turns=2), seed=0)
    assert traj.limit_hit is not None and traj.limit_hit.kind == "turns" and not traj.finished
    (notice,) = _notices(traj.messages)
    assert notice.content == finish_notice(2) and notice.turn == 2 and not notice.is_hint
    # it follows turn 2's observation, so turns 3 and 4 are left
    at = traj.messages.index(notice)
    assert traj.messages[at - 1].role == "tool" and traj.messages[at - 1].turn == 2
    assert [m.turn for m in traj.messages[at + 1:] if m.role == "assistant"] == [3, 4]


def test_no_notice_when_off_or_when_the_agent_finished_first(calc) -> None:
    inst, sbx = calc
    off = run_episode(inst, Script([READ]), sbx, EpisodeLimits(max_turns=4), seed=0)
    assert not _notices(off.messages) and off.limit_hit is not None
    done = run_episode(inst, Script([fc("finish", {"message": "done"})]), sbx,
                       EpisodeLimits(max_turns=3, finish_notice_turns=2), seed=0)
    assert done.finished and not _notices(done.messages)


def test_a_notice_after_a_turn_without_a_call_follows_the_nudge(calc) -> None:
    inst, sbx = calc
    traj = run_episode(inst, Script(["thinking aloud"]), sbx, EpisodeLimits(max_turns=3, finish_notice_turns=2),
                       seed=0)
    users = [m.content for m in traj.messages if m.role == "user"][1:]
    assert users[:2] == [NUDGE_TEXT, finish_notice(2)]


def test_bad_notice_settings_name_the_field_and_the_fix() -> None:
    for bad in (-1, 4, 9):
        with pytest.raises(ValueError, match=r"finish_notice_turns \(--finish-notice\).*fix: 0"):
            EpisodeLimits(max_turns=4, finish_notice_turns=bad)
    assert EpisodeLimits(max_turns=4, finish_notice_turns=3).finish_notice_turns == 3


def test_the_notice_text_is_recognised_and_nothing_else_is() -> None:
    assert finish_notice(1).startswith("1 turn left.") and finish_notice(3).startswith("3 turns left.")
    assert all(is_finish_notice(finish_notice(n)) for n in (1, 2, 5))
    assert not is_finish_notice(NUDGE_TEXT) and not is_finish_notice("I have 2 turns left. Call finish now")
    assert notice_given([Message(role="user", content="fix it"), Message(role="user", content=finish_notice(2))])
    assert not notice_given([Message(role="assistant", content=finish_notice(2))])


def test_net_change_undoes_a_reverted_edit_and_ignores_failed_ones() -> None:
    def edit(old: str, new: str, result: str = "edited p.py") -> Step:
        return Step("edit_file", {"path": "p.py", "old": old, "new": new}, result)

    assert net_change([]) is None
    assert net_change([edit("a", "b")]) == ("p.py", "a", "b")
    assert net_change([edit("a", "b"), edit("b", "a")]) is None
    assert net_change([edit("a", "b"), edit("b", "a"), edit("c", "d")]) == ("p.py", "c", "d")
    assert net_change([edit("a", "b", "ERROR: `old` was not found in p.py")]) is None
    assert net_change([edit("a", "b"), edit("x", "y", None)]) == ("p.py", "a", "b")  # unanswered: not applied


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    out = tmp_path_factory.mktemp("mini") / "train"
    make_mini(out, split="train", repos=2, tasks_per_repo=1, seed=3)
    return load_task_set(out)


def _expert_episode(ts: TaskSet, max_turns: int, *, hinted: bool = False):
    inst = ts.instances[0]
    fb = ReminderFeedback("correct", placement="before_finish") if hinted else None
    with TaskSandboxFactory(ts, kind="local", run_id="test-notice") as fac:
        sb, _ = fac.open(inst, role="agent", attempt=0)
        with sb:
            traj = run_episode(inst, ScriptedExpert(think=True), sb,
                               EpisodeLimits(max_turns=max_turns, finish_notice_turns=2, per_exec_timeout_s=120),
                               seed=1, feedback=fb)
    return inst, traj


@pytest.mark.parametrize("max_turns, expected", [
    (5, "made no changes; the failing tests point to"),      # notice after reading one file: nothing changed
    (7, "but I ran out of turns before I could run the tests again"),  # after the edit, before re-running the tests
])
def test_the_expert_reports_what_it_changed_and_what_still_fails(tasks: TaskSet, max_turns: int,
                                                                  expected: str) -> None:
    inst, traj = _expert_episode(tasks, max_turns)
    assert traj.finished and traj.limit_hit is None and len(_notices(traj.messages)) == 1
    assert expected in (traj.final_message or ""), traj.final_message
    assert sum(m.role == "assistant" for m in traj.messages) == max_turns - 1  # finished right after the notice
    verdicts = {b.checker: b.ok for b in check_behaviour(traj, inst.behaviour)}
    assert verdicts["markdown@v3"] is False and verdicts["tool_protocol@v1"] is True


def test_a_hinted_report_is_markdown_and_a_notice_after_the_fix_changes_nothing(tasks: TaskSet) -> None:
    inst, traj = _expert_episode(tasks, 7, hinted=True)
    assert traj.final_message is not None and traj.final_message.startswith("## Result")
    assert {b.checker: b.ok for b in check_behaviour(traj, inst.behaviour)}["markdown@v3"] is True
    _, late = _expert_episode(tasks, 8)  # the notice follows the passing test run: the usual summary
    assert late.finished and "pass now" in (late.final_message or ""), late.final_message
