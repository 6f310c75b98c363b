"""Rollouts: rewards, token-in/token-out ids, behaviour log-probs, hints in the rollout, the harness adapter."""

from __future__ import annotations

from pathlib import Path

import _rl_fixtures as F
import pytest
import torch

from harness.schema import Message
from repro.config import load_config
from repro.rollout import RolloutSettings, run_groups
from repro.sampler import KVSampler
from repro.tokenizer import ChatEncoder


def _group(settings: RolloutSettings, *, hint: bool = False):
    s = F.setup()
    s.model.eval()
    torch.set_num_threads(1)
    enc = ChatEncoder(s.tokenizer)
    return s, run_groups(instances=F.tasks(1)[:1], items=[0], make_env=F.ToyEnv,
                         engine=KVSampler(s.model, version=3, prefix_cache=64), encoder=enc, tokenizer=s.tokenizer,
                         tools=[], checker=F.toy_checker, settings=settings, run_seed=0,
                         reward_weights=load_config().reward, hint_source=F.hint_text if hint else None)[0]


def test_token_in_token_out_and_behaviour_logprobs() -> None:
    s, samples = _group(RolloutSettings(group_size=3, max_turns=2, max_new_tokens=10, max_context_tokens=4096))
    assert len(samples) == 3 and all(x.version == 3 and x.turn_versions == [3, 3] for x in samples)
    for x in samples:
        sampled = [t for m in x.messages if m.role == "assistant" for t in m.token_ids]
        e = x.encoded
        assert [e.ids[t] for t, a in enumerate(e.act) if a] == sampled  # sampled ids appended verbatim
        assert x.n_turns == 2 and len(x.verdicts) == 2 and len(e.header_starts) == 2
        # behaviour log-probs == the trainer's log-probs of the same ids (ratio 1 up to float noise)
        with torch.no_grad():
            logits = s.model(input_ids=torch.tensor([e.ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        pos = [t for t, a in enumerate(e.act) if a]
        recomputed = torch.stack([lp[t - 1, e.ids[t]] for t in pos])
        recorded = torch.tensor([e.logprobs[t] for t in pos])
        assert torch.allclose(recomputed, recorded, atol=1e-4)


def test_truncated_turn_end_token_is_not_generated() -> None:
    _, samples = _group(RolloutSettings(group_size=2, max_turns=1, max_new_tokens=3, max_context_tokens=4096))
    x = samples[0]
    assert x.truncated_turns == [True] and x.finish_reasons == ["length"]
    assert [(m.finish_reason, m.policy_version) for m in x.messages if m.role == "assistant"] == [("length", 3)]
    end = max(t for t, k in enumerate(x.encoded.turn) if k == 0)  # the newline after <|im_end|>
    assert x.encoded.act[end - 1] == 0 and sum(x.encoded.act) == 3


def test_hint_in_rollout_marks_hint_tokens() -> None:
    _, samples = _group(RolloutSettings(group_size=2, max_turns=2, max_new_tokens=4, max_context_tokens=4096,
                                        hint_in_rollout=True), hint=True)
    x = samples[0]
    assert x.hint_turns == [0, 1]
    assert sum(x.encoded.hint) > 0 and all(a == 0 for a, h in zip(x.encoded.act, x.encoded.hint, strict=True) if h)
    assert sum(m.is_hint for m in x.messages) == 2


def test_context_budget_stops_sampling(caplog: pytest.LogCaptureFixture) -> None:
    _, samples = _group(RolloutSettings(group_size=2, max_turns=3, max_new_tokens=8, max_context_tokens=20))
    assert all(x.n_turns == 0 for x in samples)
    assert "fills rollout.max_context_tokens" in caplog.text


def test_rollout_reward_is_the_sum_of_its_terms() -> None:
    _, samples = _group(RolloutSettings(group_size=2, max_turns=2, max_new_tokens=6, max_context_tokens=4096))
    for x in samples:
        assert set(x.reward_terms) == set(x.rewards) and "feedback" in x.rewards
        assert x.reward == pytest.approx(sum(x.reward_terms.values()))


def test_real_harness_rl_step(tmp_path: Path) -> None:
    """One RL step wired to the real harness: mini task set, AgentEnv, LocalSandbox, hidden-test grading path."""
    from harness.minirepos import make_mini
    from repro.train import train_rl

    make_mini(tmp_path / "tasks", split="train", repos=1, tasks_per_repo=1, seed=0)
    F.tokenizer().save_pretrained(tmp_path / "tok")
    cfg = load_config(arm="tg", sets=[
        "run.steps=1", "run.progress=false", "rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=2",
        "rollout.max_new_tokens=6", "rollout.max_context_tokens=16000", "model.threads=1",
        f"model.tokenizer=\"{tmp_path / 'tok'}\"", f"tasks.path=\"{tmp_path / 'tasks'}\""])
    info = train_rl(cfg, tmp_path / "run")
    row = F.metrics(tmp_path / "run")[0]
    assert info.step == 1 and row["rollout/turns"] == 2 and row["rollout/infra_dropped_groups"] == 0
    assert row["task/pass_rate"] == 0.0  # a random nano model fixes nothing


@pytest.mark.docker
def test_real_harness_rl_step_in_docker(tmp_path: Path, base_image: str) -> None:
    """The same RL step with rollout.sandbox = "docker" (network none, non-root; HARNESS §6)."""
    from harness.minirepos import make_mini
    from repro.train import train_rl

    make_mini(tmp_path / "tasks", split="train", repos=1, tasks_per_repo=1, seed=0)
    F.tokenizer().save_pretrained(tmp_path / "tok")
    cfg = load_config(arm="grpo", sets=[
        "run.steps=1", "run.progress=false", "rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=1",
        "rollout.max_new_tokens=4", "rollout.max_context_tokens=16000", "model.threads=1", "rollout.sandbox=docker",
        f"model.tokenizer=\"{tmp_path / 'tok'}\"", f"tasks.path=\"{tmp_path / 'tasks'}\""])
    train_rl(cfg, tmp_path / "run")
    row = F.metrics(tmp_path / "run")[0]
    assert row["rollout/infra_dropped_groups"] == 0 and row["rollout/turns"] == 1


def test_ratio_is_one_on_policy_at_any_temperature() -> None:
    """Behaviour log-probs are those of the sampled (tempered) distribution; the trainer divides logits by T too,
    so on-policy ρ = π/μ = 1 (TRL does the same); the KL term stays at T = 1."""
    from repro.trainer_step import LossRoot, build_batch, collate

    s, samples = _group(RolloutSettings(group_size=3, max_turns=2, max_new_tokens=8, max_context_tokens=4096,
                                        temperature=0.7))
    cfg = F.config("grpo", "rollout.temperature=0.7")
    for i, x in enumerate(samples):
        x.reward = float(i)
    plan = build_batch([samples], cfg, lambda smp, k: [])
    stats = LossRoot(s.model, cfg)(collate(plan.trajs, 0), plan.n_pg, plan.n_kl)[1].stats
    assert stats["ratio_max"] == pytest.approx(1.0, abs=1e-3)
    assert stats["ratio_sum"] / stats["pg_n"] == pytest.approx(1.0, abs=1e-4)


def test_hint_source_kinds_and_mixture() -> None:
    import random as _random

    from harness.behaviour import hint_text
    from harness.feedback import IRRELEVANT_HINTS, WRONG_HINTS
    from repro.rl_setup import hint_source

    inst = F.tasks(1)[0]
    rng = _random.Random(0)
    assert hint_source(load_config())(inst, 0, rng) == hint_text("markdown@v1")
    assert hint_source(load_config(sets=["guidance.feedback=wrong"]))(inst, 0, rng) == WRONG_HINTS["markdown@v1"]
    assert hint_source(load_config(sets=["guidance.feedback=irrelevant"]))(inst, 0, rng) in IRRELEVANT_HINTS
    mix = hint_source(load_config(sets=["guidance.feedback=mixture",
                                        "guidance.feedback_mix={correct = 0.5, wrong = 0.5}"]))
    draws = [mix(inst, k, _random.Random(k)) for k in range(40)]
    assert {hint_text("markdown@v1"), WRONG_HINTS["markdown@v1"]} == set(draws)
    assert draws == [mix(inst, k, _random.Random(k)) for k in range(40)]  # seeded


def test_harness_env_rewards_a_real_fix(tmp_path: Path) -> None:
    """HarnessEnv end to end with the oracle's turns: the gold fix is graded resolved by the hidden tests."""
    import random as _random

    from harness.interfaces import EpisodeLimits
    from harness.minirepos import make_mini
    from harness.policies.scripted import OraclePolicy
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set
    from harness.tools import tool_schemas
    from repro.rl_setup import HarnessEnv

    make_mini(tmp_path / "tasks", split="train", repos=1, tasks_per_repo=1, seed=0)
    ts = load_task_set(tmp_path / "tasks")
    with TaskSandboxFactory(ts, kind="local", run_id="pytest-train") as factory:
        env = HarnessEnv(factory, ts.instances[0], EpisodeLimits(max_turns=12), seed=0)
        msgs = env.reset()
        oracle, done, rng = OraclePolicy(ts), False, _random.Random(0)
        while not done:
            text = oracle.act(msgs, tools=tool_schemas(), rng=rng).text
            out = env.step(text)
            msgs = msgs + [Message(role="assistant", content=text)] + out.observations
            done = out.done
        outcome = env.outcome()
        env.close()
    assert outcome.resolved and outcome.infra_error is None and outcome.code_runs is True


def test_the_finish_notice_of_the_rollout_config_reaches_the_agent_loop(tmp_path: Path) -> None:
    """rollout.finish_notice_turns -> EpisodeLimits -> HarnessEnv: the notice comes back as an observation."""
    from harness.interfaces import is_finish_notice
    from harness.minirepos import make_mini
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set
    from harness.tools import format_tool_call
    from repro.config import load_config
    from repro.rl_setup import HarnessEnv, episode_limits

    cfg = load_config(arm="grpo", sets=["rollout.max_turns=4", "rollout.finish_notice_turns=2"])
    limits = episode_limits(cfg.rollout)
    assert (limits.max_turns, limits.finish_notice_turns) == (4, 2)
    assert episode_limits(load_config(arm="grpo").rollout).finish_notice_turns == 0  # off unless asked for
    make_mini(tmp_path / "tasks", split="train", repos=1, tasks_per_repo=1, seed=0)
    ts = load_task_set(tmp_path / "tasks")
    with TaskSandboxFactory(ts, kind="local", run_id="pytest-notice") as factory:
        env = HarnessEnv(factory, ts.instances[0], limits, seed=0)
        env.reset()
        outs = [env.step(format_tool_call("list_files", {"path": "."})) for _ in range(2)]
        env.close()
    assert not any(is_finish_notice(m.content) for m in outs[0].observations)
    assert [m.role for m in outs[1].observations] == ["tool", "user"] and is_finish_notice(outs[1].observations[1].content)


def test_two_rollout_environments_of_one_task_show_the_same_observations(tmp_path: Path) -> None:
    """The same actions give the same observation text in two HarnessEnvs (local sandbox), also where pytest names
    a file by its absolute path: it reads /work/repo, not the sandbox's random temp dir. Two RL runs of one seed
    diverged from their second step when it did (docs/RESULTS.md, "Replication at bfc3df9")."""
    import re

    from harness.interfaces import EpisodeLimits
    from harness.minirepos import make_mini
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set
    from harness.tools import format_tool_call
    from repro.rl_setup import HarnessEnv

    make_mini(tmp_path / "tasks", split="train", repos=1, tasks_per_repo=1, seed=0)
    ts = load_task_set(tmp_path / "tasks")
    inst = ts.instances[0]
    path = re.search(r"^\+\+\+ b/(\S+)$", inst.patch, re.M).group(1)  # type: ignore[union-attr]
    removed = next(ln[1:] for ln in inst.patch.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    actions = [format_tool_call("edit_file", {"path": path, "old": removed, "new": "def broken(:"}),
               format_tool_call("run_tests", {})]
    seen = []
    with TaskSandboxFactory(ts, kind="local", run_id="pytest-same-obs") as factory:
        for _ in range(2):
            env = HarnessEnv(factory, inst, EpisodeLimits(max_turns=4), seed=0)
            env.reset()
            seen.append([m.content for a in actions for m in env.step(a).observations])
            env.close()
    assert seen[0] == seen[1]
    assert f'"/work/repo/{path}"' in seen[0][1] and "tgsuite-local" not in seen[0][1]


class _SlowEnv(F.ToyEnv):
    """ToyEnv whose tool calls and grading take a seed-dependent time, so concurrent episodes finish out of order;
    its observation echoes the episode's own last text, so a mixed-up answer would change the trajectory."""

    running = 0
    peak = 0

    def __init__(self, instance, seed: int) -> None:  # noqa: ANN001
        super().__init__(instance, seed)
        self.delay = 0.002 + (seed % 7) * 0.004

    def _busy(self) -> None:
        import time

        type(self).running += 1
        type(self).peak = max(type(self).peak, type(self).running)
        time.sleep(self.delay)
        type(self).running -= 1

    def step(self, text: str):  # noqa: ANN201
        self._busy()
        out = super().step(text)
        if out.done:
            return out
        return type(out)([Message(role="tool", content=f"ok {len(text)} {text[:5]!r}", tool_name="run_tests")], False)

    def outcome(self):  # noqa: ANN201
        self._busy()
        return super().outcome()


@pytest.mark.parametrize("workers", [2, 4])
def test_concurrent_environment_gives_the_same_trajectories(workers: int) -> None:
    """rollout.env_workers > 1 runs the episodes' tool calls and grading at once (and grading while others still
    sample): the trajectories, rewards and log-probs equal the one-after-another order's exactly."""
    s = F.setup()
    s.model.eval()
    enc = ChatEncoder(s.tokenizer)

    def run(w: int):
        _SlowEnv.peak = 0
        settings = RolloutSettings(group_size=4, max_turns=3, max_new_tokens=12, max_context_tokens=4096,
                                   env_workers=w)
        return run_groups(instances=F.tasks(2), items=[0, 1], make_env=_SlowEnv,
                          engine=KVSampler(s.model, prefix_cache=64), encoder=enc, tokenizer=s.tokenizer, tools=[],
                          checker=F.toy_checker, settings=settings, run_seed=5,
                          reward_weights=load_config().reward), _SlowEnv.peak

    (serial, peak1), (conc, peak_w) = run(1), run(workers)
    assert peak1 == 1 and peak_w > 1  # it really ran episodes at once
    for ga, gb in zip(serial, conc, strict=True):
        for a, b in zip(ga, gb, strict=True):
            assert (a.encoded, a.texts, a.verdicts, a.reward) == (b.encoded, b.texts, b.verdicts, b.reward)
            assert [m.content for m in a.messages] == [m.content for m in b.messages]


def test_env_pool_rejects_zero_workers() -> None:
    from repro.rollout import EnvPool

    with pytest.raises(ValueError, match="env_workers"):
        EnvPool(0)


def test_anchor_is_the_finish_messages_first_token() -> None:
    from repro.guidance import anchor_token, behaviour_anchor

    text = '<think>plan</think>\nDone.\n<tool_call>\n{"name": "finish", "arguments": {"message": "# Fixed"}}\n</tool_call>'
    assert text[behaviour_anchor(text):].startswith("# Fixed")
    assert behaviour_anchor("<think>x</think>\nhello") == len("<think>x</think>\n")
    assert behaviour_anchor("hello") == 0
    s = F.setup()
    ids = s.tokenizer.encode(text, add_special_tokens=False)
    i = anchor_token(ids, behaviour_anchor(text), lambda x: s.tokenizer.decode(list(x)))
    assert i is not None and "#" in s.tokenizer.decode(ids[:i + 1])[-3:]
    assert "#" not in s.tokenizer.decode(ids[:i])[-3:]
    assert anchor_token(ids, len(text), lambda x: s.tokenizer.decode(list(x))) is None


def test_rollouts_record_one_anchor_per_turn() -> None:
    _, samples = _group(RolloutSettings(group_size=2, max_turns=2, max_new_tokens=10, max_context_tokens=4096))
    for x in samples:
        assert len(x.anchors) == x.n_turns
        for k, p in enumerate(x.anchors):
            assert p == -1 or (x.encoded.act[p] == 1 and x.encoded.turn[p] == k)
