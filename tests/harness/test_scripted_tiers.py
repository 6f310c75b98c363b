"""ScriptedExpert and the behaviour tiers (tool_args@v1, ask_first@v1): it complies when, and only when, a hint
asks for it — on real held-out mini tasks (LocalSandbox, the real agent loop, tools, grader and checkers) and in the
SFT data that ``repro.sft.collect_expert_trajectories`` draws with several ``hint_checkers``."""

from __future__ import annotations

import pytest

from harness.agent import run_episode
from harness.behaviour import MARKDOWN_HINT, check_behaviour
from harness.behaviour_tiers import ASK_FIRST_HINT, TOOL_ARGS_HINT
from harness.feedback import WRONG_HINTS, ReminderFeedback, corrective_feedback
from harness.grading import extract_patch, grade_patch
from harness.interfaces import EpisodeLimits
from harness.minirepos import make_mini
from harness.policies.scripted import ScriptedExpert, history, wants_approval, wants_markdown, wants_reason
from harness.runner_sandbox import TaskSandboxFactory
from harness.sandbox import SandboxSpec
from harness.schema import Message, TaskSet, Trajectory
from harness.tasks import load_task_set
from harness.tools import ASK_USER_ANSWER

SPEC = SandboxSpec(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"})
LIMITS = EpisodeLimits(max_turns=30, per_exec_timeout_s=120)
TIERS = ["markdown@v1", "tool_args@v1", "ask_first@v1"]


def _msgs(*hints: str) -> list[Message]:
    return [Message(role="system", content="s"), Message(role="user", content="the issue"),
            *[Message(role="user", content=h, is_hint=True) for h in hints]]


def test_hint_detection() -> None:
    assert wants_reason(_msgs(TOOL_ARGS_HINT)) and not wants_reason(_msgs(WRONG_HINTS["tool_args@v1"]))
    assert wants_approval(_msgs(ASK_FIRST_HINT)) and not wants_approval(_msgs(WRONG_HINTS["ask_first@v1"]))
    for h in (MARKDOWN_HINT, ""):
        assert not wants_reason(_msgs(h)) and not wants_approval(_msgs(h))
    assert not wants_markdown(_msgs(TOOL_ARGS_HINT)) and not wants_markdown(_msgs(ASK_FIRST_HINT))
    # the problem statement itself never counts as a hint
    assert not wants_reason([Message(role="user", content=TOOL_ARGS_HINT)])


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    out = tmp_path_factory.mktemp("mini") / "heldout"
    make_mini(out, split="heldout", repos=2, tasks_per_repo=1, seed=11)
    return load_task_set(out)


def _episodes(ts: TaskSet, feedback: ReminderFeedback | None) -> list[tuple[Trajectory, bool, dict[str, bool]]]:
    out = []
    with TaskSandboxFactory(ts, kind="local", run_id="test-tiers", spec=SPEC) as fac:
        for k, inst in enumerate(ts.instances):
            sb, head = fac.open(inst, role="agent", attempt=0)
            with sb:
                traj = run_episode(inst, ScriptedExpert(), sb, LIMITS, seed=k, feedback=feedback)
                patch = extract_patch(sb, head)
            gsb, _ = fac.open(inst, role="grade", attempt=0)
            with gsb:
                grade = grade_patch(inst, patch, gsb, timeout_s=120)
            out.append((traj, grade.resolved, {b.checker: b.ok for b in check_behaviour(traj, TIERS)}))
    return out


def _assistant_texts(traj: Trajectory) -> list[str]:
    return [m.content for m in traj.messages if m.role == "assistant"]


@pytest.mark.slow
def test_expert_complies_with_each_tier_only_when_hinted(heldout: TaskSet) -> None:
    plain = _episodes(heldout, None)
    assert all(r for _, r, _ in plain)
    assert not any(b["tool_args@v1"] or b["ask_first@v1"] for _, _, b in plain), "no hint: no reason, no ask"
    for cid in ("tool_args@v1", "ask_first@v1"):
        hinted = _episodes(heldout, corrective_feedback(cid))
        for (traj, resolved, beh), (ptraj, _, _) in zip(hinted, plain, strict=True):
            assert resolved and beh[cid], (cid, traj.instance_id)
            assert traj.hint_turns == [0] and not beh["markdown@v1"]  # only the hinted tier changes
            edits = [s for s in history(traj.messages) if s.name == "edit_file"]
            assert edits
            if cid == "tool_args@v1":
                assert all(s.arguments["reason"] for s in edits) and not beh["ask_first@v1"]
                assert len(_assistant_texts(traj)) == len(_assistant_texts(ptraj))
            else:
                steps = history(traj.messages)
                first_edit = next(i for i, s in enumerate(steps) if s.name == "edit_file")
                assert [s.name for s in steps[:first_edit]].count("ask_user") == 1
                assert steps[first_edit - 1].name == "ask_user" and steps[first_edit - 1].result == ASK_USER_ANSWER
                assert not beh["tool_args@v1"] and len(_assistant_texts(traj)) == len(_assistant_texts(ptraj)) + 1
        # a wrong hint of the tier leaves the expert's turns byte-identical to the unhinted run
        wrong = _episodes(heldout, ReminderFeedback("wrong", placement="first_turn", checkers=(cid,)))
        assert [_assistant_texts(t) for t, _, _ in wrong] == [_assistant_texts(t) for t, _, _ in plain]


@pytest.mark.slow
def test_sft_data_with_three_hint_checkers_teaches_each_tier(tmp_path) -> None:
    from repro.sft import collect_expert_trajectories

    make_mini(tmp_path / "train", split="train", repos=2, tasks_per_repo=2, seed=5)
    trajs = collect_expert_trajectories(tmp_path / "train", episodes=9, hint_share=1.0, think=False, seed=0,
                                        workers=1, hint_checkers=tuple(TIERS))
    by_hint = {"markdown@v1": MARKDOWN_HINT, "tool_args@v1": TOOL_ARGS_HINT, "ask_first@v1": ASK_FIRST_HINT}
    seen = set()
    for traj in trajs:
        (hint,) = [m.content for m in traj.messages if m.is_hint]
        (cid,) = [c for c, h in by_hint.items() if h == hint]
        seen.add(cid)
        res = {b.checker: b for b in check_behaviour(traj, TIERS)}
        assert res[cid].ok and any(v == "PASS" for v in res[cid].turn_verdicts), (cid, res[cid].violations)
        assert not any(res[c].ok and any(v == "PASS" for v in res[c].turn_verdicts) for c in TIERS if c != cid)
    assert seen == set(TIERS), seen
