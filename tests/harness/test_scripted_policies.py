"""Scripted policies on real held-out mini tasks, end to end on the host: LocalSandbox + run_episode + the real
grader (fresh sandbox) + the real behaviour checkers.

Claims checked: the expert resolves >= 95% of held-out instances (seen and unseen templates) with Markdown
compliance 0 when no hint is given, and >= 95% compliance (and resolution) when the Markdown hint is given; the
oracle resolves every instance; null resolves none; the expert never touches hidden tests or the gold patch.
"""

from __future__ import annotations

import random

import pytest

from harness.agent import run_episode
from harness.behaviour import MARKDOWN_HINT, check_behaviour, markdown_violations
from harness.feedback import ReminderFeedback
from harness.grading import extract_patch, grade_patch
from harness.interfaces import EpisodeLimits
from harness.minirepos import make_mini
from harness.policies.patches import parse_patch
from harness.policies.scripted import NullPolicy, OraclePolicy, ScriptedExpert, history, wants_markdown
from harness.runner_sandbox import TaskSandboxFactory
from harness.sandbox import SandboxSpec
from harness.schema import Message, TaskSet, Trajectory
from harness.tasks import load_task_set

SPEC = SandboxSpec(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"})
LIMITS = EpisodeLimits(max_turns=30, per_exec_timeout_s=120)


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    out = tmp_path_factory.mktemp("mini") / "heldout"
    make_mini(out, split="heldout", repos=10, tasks_per_repo=2, seed=7)
    return load_task_set(out)


def _episodes(ts: TaskSet, policy, n: int, feedback=None) -> list[tuple[Trajectory, bool, dict[str, bool]]]:
    out = []
    with TaskSandboxFactory(ts, kind="local", run_id="test-scripted", spec=SPEC) as fac:
        for k, inst in enumerate(ts.instances[:n]):
            sb, head = fac.open(inst, role="agent", attempt=0)
            with sb:
                traj = run_episode(inst, policy, sb, LIMITS, seed=k, feedback=feedback)
                patch = extract_patch(sb, head)
            gsb, _ = fac.open(inst, role="grade", attempt=0)
            with gsb:
                grade = grade_patch(inst, patch, gsb, timeout_s=120)
            assert grade.valid, (inst.instance_id, grade.reason)
            out.append((traj, grade.resolved, {b.checker: b.ok for b in check_behaviour(traj, inst.behaviour)}))
    return out


@pytest.mark.slow
def test_expert_resolves_heldout_without_markdown(heldout: TaskSet) -> None:
    tiers = {i.template_tier for i in heldout.instances}
    assert tiers == {"seen_templates", "unseen_templates"}
    res = _episodes(heldout, ScriptedExpert(think=True), len(heldout.instances))
    resolved = sum(r for _, r, _ in res)
    assert resolved >= 0.95 * len(res), [(t.instance_id, t.final_message) for t, r, _ in res if not r]
    assert sum(b["markdown@v3"] for _, _, b in res) == 0, "no hint: the expert's summaries must not be Markdown"
    assert all(b["tool_protocol@v1"] for _, _, b in res)
    for traj, _, _ in res:
        for step in history(traj.messages):
            assert "hidden" not in str(step.arguments), "the expert must never ask for hidden tests"
        assert traj.finished and "<think>" in traj.messages[2].content


@pytest.mark.slow
def test_expert_writes_markdown_when_the_hint_asks(heldout: TaskSet) -> None:
    fb = ReminderFeedback("correct", placement="before_finish")
    res = _episodes(heldout, ScriptedExpert(), 6, feedback=fb)
    assert all(r for _, r, _ in res)
    assert sum(b["markdown@v3"] for _, _, b in res) >= 0.95 * len(res), [t.final_message for t, _, _ in res]
    assert all(t.hint_turns for t, _, _ in res)


@pytest.mark.slow
def test_oracle_resolves_every_instance_and_null_none(heldout: TaskSet) -> None:
    oracle = _episodes(heldout, OraclePolicy(heldout), 10)
    assert {i.template_tier for i in heldout.instances[:10]} == {"seen_templates", "unseen_templates"}
    assert all(r for _, r, _ in oracle)
    assert all(b["markdown@v3"] and b["tool_protocol@v1"] for _, _, b in oracle)
    null = _episodes(heldout, NullPolicy(), 2)
    assert not any(r for _, r, _ in null)
    assert all(len([m for m in t.messages if m.role == "assistant"]) == 1 for t, _, _ in null)


# ------------------------------------------------------------------------------------------------------ unit level


def test_oracle_needs_the_task_set() -> None:
    msgs = [Message(role="system", content="s"), Message(role="user", content="unknown issue")]
    with pytest.raises(LookupError, match="tasks=task_set"):
        OraclePolicy().act(msgs, tools=[], rng=random.Random(0))


def test_parse_patch_uses_hunk_counts() -> None:
    patch = ("diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a = 1\n--- b = 2\n+b = 2\n c = 3\n"
             "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+z = 1\n")
    hunks = parse_patch(patch)
    assert [(h.path, h.old, h.new) for h in hunks] == [
        ("x.py", "a = 1\n-- b = 2\nc = 3\n", "a = 1\nb = 2\nc = 3\n"), ("n.py", "", "z = 1\n")]


def test_hint_detection_and_summary_formats() -> None:
    base = [Message(role="system", content="s"), Message(role="user", content="Fix the Markdown renderer")]
    assert not wants_markdown(base)
    assert wants_markdown([*base, Message(role="user", content=MARKDOWN_HINT, is_hint=True)])
    wrong = "Reminder: write your reply to the user as plain text only — no Markdown: no headings."
    assert not wants_markdown([*base, Message(role="user", content=wrong, is_hint=True)])
    assert markdown_violations("## Summary\n\n- Changed `a/b.py`, line 3\n- **Check:** `5 passed`") == []


def test_expert_is_stateless_and_deterministic(heldout: TaskSet) -> None:
    inst = heldout.instances[0]
    msgs = [Message(role="system", content="s"), Message(role="user", content=inst.problem_statement)]
    a = ScriptedExpert(think=True).act(msgs, tools=[], rng=random.Random(3))
    b = ScriptedExpert(think=True).act(list(msgs), tools=[], rng=random.Random(3))
    assert a.text == b.text and '"list_files"' in a.text


def test_repair_reasoning_on_observed_code() -> None:
    from harness.minirepos import repair
    from harness.policies.scripted import _ranked_fixes, _Target

    module = 'def mean(values):\n    """Average."""\n    return sum(values) / len(values)\n'
    tests = ("from pkg.stats import mean\n\n\ndef test_mean_case1():\n    assert mean([2, 4]) == 3.0\n\n\n"
             "def test_mean_case2():\n    assert mean([]) == 0.0\n")
    cases = repair.failing_asserts(tests, ["test_mean_case2"])
    assert cases == [repair.AssertCase("test_mean_case2", "mean", ("[]",), "0.0")]
    target = _Target("pkg/stats.py", "pkg.stats", "mean", "tests/test_stats.py", ("test_mean_case2",), (3,))
    best = _ranked_fixes(module, tests, target)[0]
    assert best.family == "missing_edge_case" and best.new.startswith("    if not values:\n        return 0.0\n")
    text = "x = 1\ny = 2\nx = 1\nz = 3\n"
    edit = repair.Edit("wrong_constant", None, 3, 3, "x = 1\n", "x = 2\n", "")
    old, new = repair.unique_replacement(text, edit)
    assert text.count(old) == 1 and text.replace(old, new) == "x = 1\ny = 2\nx = 2\nz = 3\n"
