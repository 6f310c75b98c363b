"""The RL reward grades like evaluation (issue #14 item 8): ``repro.rl_setup.HarnessEnv`` uses
``harness.episode_grading`` — the patch diffed on the host against the pristine base (what the agent did to
``.git`` does not matter), a fresh sandbox, the validated exclusions, and invalid grades settled by gold."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.interfaces import EpisodeLimits
from harness.runner import run_eval
from harness.schema import Message
from tests.harness_fakes import CALC_FIXED, FakeFactory, _call, _git, make_calc_task

pytest.importorskip("torch")


def _play(env, texts: list[str], before=None):
    msgs = env.reset()
    if before is not None:
        before(env.sandbox)
    for text in texts:
        out = env.step(text)
        msgs = msgs + [Message(role="assistant", content=text)] + out.observations
        if out.done:
            break
    outcome = env.outcome()
    env.close()
    return outcome


FIX = _call("edit_file", path="calc.py", old="return a - b\n\n\ndef sub", new="return a + b\n\n\ndef sub")
ZAP = _call("edit_file", path="zap.py", old="", new="import shutil\nshutil.rmtree('.git')\n")
RUN_ZAP = _call("run_tests", tests=["zap.py"])
FINISH = _call("finish", message="Fixed `add`.")


def test_reward_ignores_what_the_agent_did_to_git(tmp_path: Path) -> None:
    from repro.rl_setup import HarnessEnv

    inst, repo = make_calc_task(tmp_path)
    env = HarnessEnv(FakeFactory({inst.instance_id: repo}), inst, EpisodeLimits(max_turns=6), seed=0)
    # the agent removed the repository's git data
    outcome = _play(env, [FIX, FINISH], before=lambda sb: sb.exec("rm -rf .git", timeout=10))
    assert outcome.infra_error is None and outcome.resolved


def test_reward_and_eval_leave_out_the_same_excluded_tests(tmp_path: Path) -> None:
    """An instance whose P2P test is flaky (excluded by validation) and broken by the gold fix's neighbour."""
    from repro.rl_setup import HarnessEnv

    inst, repo = make_calc_task(tmp_path)
    broken_sub = CALC_FIXED.replace("def sub(a, b):\n    return a - b", "def sub(a, b):\n    return 0")
    (repo / "calc.py").write_text(broken_sub.replace("return a + b", "return a - b"))
    _git(repo, "commit", "-qam", "sub broken at base")
    inst = inst.model_copy(update={"base_commit": _git(repo, "rev-parse", "HEAD").strip()})
    excluded = ["tests/test_calc.py::test_sub"]
    env = HarnessEnv(FakeFactory({inst.instance_id: repo}), inst, EpisodeLimits(max_turns=6), seed=0,
                     excluded_tests=excluded)
    outcome = _play(env, [FIX, FINISH])
    assert outcome.infra_error is None and outcome.resolved
    from harness.schema import TaskSet

    ts = TaskSet(name="t", path=str(tmp_path), sha256="0", instances=[inst])

    class Fix:
        name = "fix"

        def act(self, messages, *, tools, rng):
            from harness.interfaces import PolicyOutput

            n = sum(m.role == "assistant" for m in messages)
            return PolicyOutput([FIX, FINISH][min(n, 1)])

    res = run_eval(ts, {"fix": Fix()}, [0], tmp_path / "run", sandbox_factory=FakeFactory({inst.instance_id: repo}),
                   excluded_tests={inst.instance_id: excluded}, limits=EpisodeLimits(max_turns=6))
    assert res[0].resolved == outcome.resolved


def test_reward_drops_an_instance_whose_gold_fails(tmp_path: Path) -> None:
    from repro.rl_setup import HarnessEnv

    inst, repo = make_calc_task(tmp_path)
    hang = _call("edit_file", path="calc.py", old="def add(a, b):\n    return a - b",
                 new="def add(a, b):\n    import os\n    os._exit(0)")
    env = HarnessEnv(FakeFactory({inst.instance_id: repo}), inst.model_copy(update={"patch": ""}),
                     EpisodeLimits(max_turns=6), seed=0)
    outcome = _play(env, [hang, FINISH])
    assert outcome.infra_error is not None and not outcome.resolved  # never scored as the model's failure
    env = HarnessEnv(FakeFactory({inst.instance_id: repo}), inst, EpisodeLimits(max_turns=6), seed=1)
    outcome = _play(env, [hang, FINISH])
    assert outcome.infra_error is None and not outcome.resolved  # gold resolves: the agent's failure
