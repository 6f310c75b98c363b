"""The agent loop: AgentEnv step by step, run_episode with scripted policies, limits, feedback placement."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from harness.agent import NUDGE_TEXT, AgentEnv, estimate_tokens, run_episode, system_prompt
from harness.feedback import ReminderFeedback
from harness.interfaces import EpisodeLimits, Hint, PolicyOutput
from harness.sandbox import SandboxUnavailable
from harness.schema import Message, Trajectory
from harness.tools import format_tool_call as fc
from tests.harness_fakes import DirSandbox, make_calc_task

FIX_OLD = "    return a - b\n\n\ndef sub"
FIX_NEW = "    return a + b\n\n\ndef sub"
SUMMARY = "## Fix\n\n- `add()` in `calc.py` subtracted; it now adds.\n- The visible tests pass."


class Script:
    """A policy replaying fixed turns (then repeating the last one); records what it was shown."""

    def __init__(self, turns: list[str], name: str = "script", token_ids: bool = False) -> None:
        self.turns, self.name, self.token_ids = turns, name, token_ids
        self.seen: list[list[Message]] = []

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        assert [t["function"]["name"] for t in tools][-1] == "finish"
        self.seen.append(messages)
        text = self.turns[min(len(self.seen) - 1, len(self.turns) - 1)]
        if self.token_ids:
            ids = [rng.randrange(100) for _ in range(5)]
            return PolicyOutput(text=text, token_ids=ids, logprobs=[-0.5] * 5)
        return PolicyOutput(text=text)


@pytest.fixture()
def calc(tmp_path: Path):
    inst, repo = make_calc_task(tmp_path)
    sbx = DirSandbox(repo)
    yield inst, sbx
    sbx.close()


SOLVE = [
    "I'll read the code.\n" + fc("read_file", {"path": "calc.py"}),
    fc("edit_file", {"path": "calc.py", "old": FIX_OLD, "new": FIX_NEW}) + fc("run_tests", {}),
    fc("finish", {"message": SUMMARY}),
]


def test_episode_solves_calc(calc) -> None:
    inst, sbx = calc
    traj = run_episode(inst, Script(SOLVE), sbx, EpisodeLimits(), seed=0)
    assert traj.finished and traj.final_message == SUMMARY and traj.limit_hit is None
    assert traj.protocol_violations == 0 and traj.instance_id == inst.instance_id and traj.policy == "script"
    roles = [(m.role, m.turn, m.tool_name) for m in traj.messages]
    assert roles == [
        ("system", 0, None), ("user", 0, None),
        ("assistant", 0, None), ("tool", 0, "read_file"),
        ("assistant", 1, None), ("tool", 1, "edit_file"), ("tool", 1, "run_tests"),
        ("assistant", 2, None), ("tool", 2, "finish"),
    ]
    assert traj.messages[0].content == system_prompt() and traj.messages[1].content == inst.problem_statement
    assert traj.messages[3].content.startswith("def add(a, b):\n    return a - b")
    assert "[exit code 0]" in traj.messages[6].content and "2 passed" not in traj.messages[6].content
    assert (sbx.root / "calc.py").read_text().startswith("def add(a, b):\n    return a + b")
    assert traj.n_tokens == sum(estimate_tokens(t) for t in SOLVE)
    assert set(traj.timings) == {"wall_s", "policy_s", "tools_s"} and traj.timings["tools_s"] > 0
    assert Trajectory.model_validate_json(traj.model_dump_json()) == traj


def test_malformed_call_is_a_violation_and_episode_goes_on(calc) -> None:
    inst, sbx = calc
    turns = ['<tool_call>{"name": "read_file", "arguments": {"file": "calc.py"}}</tool_call>',
             "thinking aloud, no call", fc("finish", {"message": "done"})]
    traj = run_episode(inst, Script(turns), sbx, EpisodeLimits(), seed=0)
    assert traj.finished and traj.protocol_violations == 1
    assert traj.messages[3].role == "tool" and "missing required argument 'path'" in traj.messages[3].content
    assert "Usage: read_file(path: string)" in traj.messages[3].content
    assert traj.messages[5] == Message(role="user", content=NUDGE_TEXT, turn=1)


def test_calls_after_finish_are_not_run(calc) -> None:
    inst, sbx = calc
    text = fc("finish", {"message": "done"}) + fc("edit_file", {"path": "calc.py", "old": FIX_OLD, "new": FIX_NEW})
    traj = run_episode(inst, Script([text]), sbx, EpisodeLimits(), seed=0)
    assert traj.finished and traj.protocol_violations == 1
    assert [m.tool_name for m in traj.messages if m.role == "tool"] == ["finish"]
    assert "return a - b\n\n\ndef sub" in (sbx.root / "calc.py").read_text()


@pytest.mark.parametrize(
    ("limits", "policy", "kind", "steps"),
    [
        (EpisodeLimits(max_turns=3), Script([fc("list_files", {})]), "turns", 3),
        (EpisodeLimits(max_tokens=12), Script([fc("list_files", {})], token_ids=True), "tokens", 3),
    ],
)
def test_limits_end_the_episode(calc, limits, policy, kind: str, steps: int) -> None:
    inst, sbx = calc
    traj = run_episode(inst, policy, sbx, limits, seed=0)
    assert not traj.finished and traj.limit_hit is not None and traj.limit_hit.kind == kind
    assert sum(m.role == "assistant" for m in traj.messages) == steps


def test_wall_time_and_context_limits(calc) -> None:
    inst, sbx = calc
    now = [0.0]
    env = AgentEnv(inst, sbx, EpisodeLimits(wall_s=10), clock=lambda: now[0])
    env.reset()
    assert not env.step(fc("list_files", {})).done
    now[0] = 11.0
    res = env.step(fc("list_files", {}))
    assert res.done and res.limit_hit is not None and res.limit_hit.kind == "wall_time"
    env2 = AgentEnv(inst, sbx, EpisodeLimits())
    env2.reset()
    res2 = env2.step("", finish_reason="context")
    assert res2.done and res2.limit_hit is not None and res2.limit_hit.kind == "context" and res2.observations == []


def test_env_is_a_stepwise_environment(calc) -> None:
    inst, sbx = calc
    env = AgentEnv(inst, sbx, EpisodeLimits())
    with pytest.raises(RuntimeError, match="reset"):
        env.step("x")
    first = env.reset()
    assert [m.role for m in first] == ["system", "user"]
    res = env.step(fc("read_file", {"path": "calc.py"}), token_ids=[5, 6, 7], logprobs=[-1.0, -2.0, -0.1])
    assert not res.done and [o.role for o in res.observations] == ["tool"] and res.assistant.token_ids == [5, 6, 7]
    assert res.assistant.logprobs == [-1.0, -2.0, -0.1] and env.n_tokens == 3
    with pytest.raises(ValueError, match="equal lengths"):
        env.step("x", token_ids=[1, 2], logprobs=[0.0])
    env.add_hint(Hint(text="Reminder: use Markdown.", kind="correct"))
    fin = env.step(fc("finish", {"message": "ok"}))
    assert fin.done and fin.finished
    with pytest.raises(RuntimeError, match="over"):
        env.step("again")
    traj = env.trajectory(policy="trainer", seed=3)
    assert traj.hint_turns == [1] and traj.feedback_kind == "correct"
    hint = next(m for m in traj.messages if m.is_hint)
    assert hint.role == "user" and hint.turn == 1
    # reset starts a clean episode
    assert env.reset() == first and env.turn == 0 and not env.done and env.n_tokens == 0


def test_first_turn_feedback_and_draft_review(calc) -> None:
    inst, sbx = calc
    pol = Script([fc("finish", {"message": "done, fixed it"})] * 3)
    traj = run_episode(inst, pol, sbx, EpisodeLimits(), seed=0, feedback=ReminderFeedback("wrong", "first_turn"))
    assert traj.hint_turns == [0] and traj.feedback_kind == "wrong" and traj.messages[2].is_hint
    assert pol.seen[0][-1].is_hint  # the policy saw the hint before writing turn 0
    pol2 = Script([fc("list_files", {}), fc("finish", {"message": "plain"}), fc("finish", {"message": SUMMARY})])
    traj2 = run_episode(inst, pol2, sbx, EpisodeLimits(), seed=0, feedback=ReminderFeedback("correct", "before_finish"))
    assert traj2.hint_turns == [1] and traj2.final_message == SUMMARY
    assert [d.tool_calls[0].arguments["message"] for d in traj2.discarded_drafts] == ["plain"]
    assert [m.role for m in traj2.messages[-4:]] == ["tool", "user", "assistant", "tool"]
    assert traj2.n_tokens == sum(estimate_tokens(t) for t in pol2.turns)  # the discarded draft's tokens count


def test_same_seed_same_trajectory(calc) -> None:
    inst, sbx = calc
    pol = Script([fc("list_files", {})], token_ids=True)
    a = run_episode(inst, pol, sbx, EpisodeLimits(max_turns=2), seed=7)
    b = run_episode(inst, pol, sbx, EpisodeLimits(max_turns=2), seed=7)
    c = run_episode(inst, pol, sbx, EpisodeLimits(max_turns=2), seed=8)
    ids = [[m.token_ids for m in t.messages if m.role == "assistant"] for t in (a, b, c)]
    assert ids[0] == ids[1] != ids[2]


def test_sandbox_failure_propagates_as_infra(calc, tmp_path: Path) -> None:
    inst, _ = calc
    sbx = DirSandbox(tmp_path / inst.instance_id, fail_after=1)
    try:
        with pytest.raises(SandboxUnavailable):
            run_episode(inst, Script(SOLVE), sbx, EpisodeLimits(), seed=0)
    finally:
        sbx.close()


def test_system_prompt_with_schemas() -> None:
    assert "finish" in system_prompt() and '"edit_file"' not in system_prompt()
    assert '"name": "edit_file"' in system_prompt(include_schemas=True)


def test_expert_on_a_mini_task_with_a_correct_hint(tmp_path: Path) -> None:
    """Integration: the scripted expert on a generated mini task. Its plain summary (the draft the correct hint
    is placed before) fails markdown@v1; after the hint the re-sampled final turn passes (the gap Targeted
    Guidance targets). One episode: the rejected draft is kept in ``discarded_drafts``."""
    import shutil

    from harness.behaviour import check_behaviour, get_checker
    from harness.metrics import metrics_for
    from harness.minirepos import make_mini
    from harness.policies import make_policy
    from harness.tasks import load_task_set, materialize_snapshot

    make_mini(tmp_path / "ts", split="heldout", repos=1, tasks_per_repo=1, seed=0)
    ts = load_task_set(tmp_path / "ts")
    inst = ts.instances[0]
    with DirSandbox() as sbx:
        materialize_snapshot(ts.path, inst, tmp_path / "repo")
        shutil.copytree(tmp_path / "repo", sbx.root, dirs_exist_ok=True)
        fb = ReminderFeedback("correct", "before_failing_turn")
        traj = run_episode(inst, make_policy("expert"), sbx, EpisodeLimits(), feedback=fb, seed=1)
    md, proto = check_behaviour(traj, ["markdown@v1", "tool_protocol@v1"])
    assert traj.finished and proto.ok and traj.protocol_violations == 0
    m = metrics_for(ts)(traj, inst)
    assert m.edits >= 1 and m.test_runs >= 2 and m.hallucinations == 0 and m.tool_call_validity == 1.0
    (draft,) = traj.discarded_drafts
    assert get_checker("markdown@v1").verify_turn(draft) == "FAIL"
    assert any(c.name == "finish" for c in draft.tool_calls)
    last = sum(1 for msg in traj.messages if msg.role == "assistant") - 1
    assert md.ok and md.turn_verdicts[-1] == "PASS" and traj.hint_turns == [last]
