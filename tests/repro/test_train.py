"""The RL loop end to end on CPU with a nano model and a pure-Python environment (tests/_rl_fixtures.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from safetensors.torch import load_file

from repro.checkpoint import read_info, read_manifest
from repro.config import ConfigError
from repro.train import train_rl

FAST = ["rollout.max_new_tokens=8"]


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step}" / "model.safetensors"))


def test_nano_tg_run_end_to_end(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    info = train_rl(F.config("tg", *FAST), tmp_path / "run", setup=F.setup())
    assert time.perf_counter() - t0 < 60
    run = tmp_path / "run"
    assert {"config.toml", "manifest.json", "metrics.jsonl", "checkpoints"} <= {p.name for p in run.iterdir()}
    assert info.step == 2 and Path(info.path) == run / "checkpoints" / "step_2"
    assert read_info(Path(info.path)).sha256 == info.sha256
    rows = F.metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("loss/policy", "loss/kl", "guidance/failing_turn_frac", "guidance/guided_turn_frac", "reward/task",
                "behaviour/compliance",
                "task/pass_rate", "pg/clip_frac", "kl/mean", "kl/p99", "kl/clamp_frac", "entropy/all",
                "grad/norm", "async/dropped_groups", "reward/fmt", "rollout/turns"):
        assert key in rows[0], key
    # the toy checker fails every applicable turn of a random model, so KL tokens exist and the KL term is live
    assert rows[0]["guidance/kl_tokens"] > 0 and rows[0]["loss/kl"] > 0
    man = read_manifest(run)
    assert man.status == "done" and man.steps_done == 2 and man.config["guidance"]["lam"] == 0.3
    assert man.compute["wall_s"]["rollout"] > 0 and man.compute["tokens"]["teacher"] > 0
    assert man.compute["flops_total"] > 0 and man.compute["peak_rss_bytes"] > 0
    # the checkpoint is a plain HF directory with its tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = AutoModelForCausalLM.from_pretrained(info.path)
    tok = AutoTokenizer.from_pretrained(info.path)
    assert len(tok) == len(F.tokenizer()) and m.config.vocab_size == len(tok)


@pytest.mark.parametrize("extra", [[], ["model.lora.enabled=true", "model.lora.r=4"]], ids=["full", "lora"])
def test_lambda_zero_reproduces_grpo_step_for_step(tmp_path: Path, extra: list[str]) -> None:
    """λ = 0 is GRPO step for step, with full fine-tuning and with LoRA adapters (the weights compared are the
    checkpoint's model.safetensors: the merged weights under LoRA)."""
    seed = ["run.seed=1"]  # rollouts with reward variance in both steps (seed 0: none, so no policy gradient at all)
    train_rl(F.config("grpo", *FAST, *seed, *extra), tmp_path / "grpo", setup=F.setup())
    train_rl(F.config("tg", *FAST, *seed, "guidance.lam=0.0", *extra), tmp_path / "tg0", setup=F.setup())
    train_rl(F.config("tg", *FAST, *seed, *extra), tmp_path / "tg", setup=F.setup())
    a, b, c = (F.metrics(tmp_path / n) for n in ("grpo", "tg0", "tg"))
    assert all(r["grad/norm"] > 0 for r in a)  # GRPO itself updates: the equivalence below is not vacuous
    for ra, rb in zip(a, b, strict=True):
        assert ra["loss/total"] == rb["loss/total"] and ra["reward/total"] == rb["reward/total"]
        assert rb["loss/kl"] is None
    wa, wb, wc = (_weights(tmp_path / n, 2) for n in ("grpo", "tg0", "tg"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    if extra:  # LoRA: the base outside the adapted projections never moves; the adapters did
        base = F.setup().model.state_dict()
        assert all(torch.equal(w[k], base[k]) for w in (wa, wc) for k in w if "_proj." not in k)
        assert any(not torch.equal(wa[k], base[k]) for k in wa)
    # and the test can fail: λ > 0 changes the update
    assert c[0]["loss/kl"] is not None
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)


@pytest.mark.parametrize("arm", ["opd_only", "tg_sampled_token", "tg_per_turn_ctx", "tg_jsd", "hint_in_rollout"])
def test_arms_run_one_step(tmp_path: Path, arm: str) -> None:
    cfg = F.config(arm, *FAST, "run.steps=1", "rollout.groups=1")
    train_rl(cfg, tmp_path / arm, setup=F.setup())
    row = F.metrics(tmp_path / arm)[0]
    assert row["loss/total"] == row["loss/total"]  # finite
    if arm == "opd_only":
        assert row["loss/policy"] is None and row["loss/kl"] is not None
    if arm == "tg_sampled_token":
        assert row["loss/kl"] is None and row["kl/sampled_gap_mean"] is not None
    if arm == "hint_in_rollout":
        assert row["loss/kl"] is None


def test_refuses_to_overwrite_and_unimplemented_engine(tmp_path: Path) -> None:
    cfg = F.config("grpo", *FAST, "run.steps=1", "rollout.groups=1")
    train_rl(cfg, tmp_path / "r", setup=F.setup())
    with pytest.raises(ConfigError, match="--resume"):
        train_rl(cfg, tmp_path / "r", setup=F.setup())
    with pytest.raises(ConfigError, match="vllm_http.weights_dir"):
        train_rl(F.config("grpo", "rollout.engine=vllm_http"), tmp_path / "v", setup=F.setup())


def test_metrics_lines_are_json_with_nulls_not_nan(tmp_path: Path) -> None:
    train_rl(F.config("grpo", *FAST, "run.steps=1", "rollout.groups=1"), tmp_path / "r", setup=F.setup())
    text = (tmp_path / "r" / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    row = json.loads(text.splitlines()[0])
    assert row["kl/mean"] is None  # no KL in the grpo arm: undefined, not 0


def test_grad_norm_split_by_term_leaves_the_update_unchanged(tmp_path: Path) -> None:
    cfg = ["rollout.max_new_tokens=8", "run.steps=1", "rollout.groups=1"]
    train_rl(F.config("tg", *cfg), tmp_path / "a", setup=F.setup())
    train_rl(F.config("tg", *cfg, "run.log_grad_split=true"), tmp_path / "b", setup=F.setup())
    row = F.metrics(tmp_path / "b")[0]
    assert row["grad/norm_pg"] >= 0 and row["grad/norm_kl"] > 0  # PG grad is 0 when the group has no reward variance
    assert row["grad/norm"] <= row["grad/norm_pg"] + row["grad/norm_kl"] + 1e-6  # triangle inequality
    wa, wb = _weights(tmp_path / "a", 1), _weights(tmp_path / "b", 1)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-6


def test_bf16_mixed_rl_step_keeps_float32_masters(tmp_path: Path) -> None:
    """Under model.precision = bf16-mixed the RL step runs its forwards in bf16 autocast while the parameters (and
    the saved checkpoint) stay float32 and every parameter moves."""
    setup = F.setup()
    before = {k: v.detach().clone() for k, v in setup.model.state_dict().items()}
    train_rl(F.config("tg", *FAST, "model.precision=bf16-mixed", "run.steps=1"), tmp_path / "run", setup=setup)
    after = _weights(tmp_path / "run", 1)
    assert all(v.dtype == torch.float32 for v in after.values())
    moved = sum(int((after[k] != before[k]).sum()) for k in after if k in before)
    assert moved / sum(v.numel() for k, v in after.items() if k in before) > 0.9


def test_gate_summary_says_when_the_gate_or_the_hint_does_nothing() -> None:
    from repro.rl_metrics import gate_summary

    assert "inactive" in gate_summary({"guidance/guided_turn_frac": 0.0})
    base = {"guidance/guided_turn_frac": 0.25, "guidance/anchor_tokens": 2}
    moved = gate_summary({**base, "guidance/anchor_kl": 3.1, "guidance/anchor_p_teacher": 0.99,
                          "guidance/anchor_p_student": 1e-5})
    assert "gate on 25% of turns" in moved and "P_T 0.99 vs P_S 1e-05" in moved and "does not move" not in moved
    flat = gate_summary({**base, "guidance/anchor_kl": 1e-6, "guidance/anchor_p_teacher": 0.5,
                         "guidance/anchor_p_student": 0.5})
    assert "the hint does not move the teacher" in flat
    assert "no guided turn reached" in gate_summary({**base, "guidance/anchor_tokens": 0})


def test_sampler_threads_are_set_for_sampling_and_restored() -> None:
    import torch

    from repro.train import sampler_threads

    before = torch.get_num_threads()
    with sampler_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with sampler_threads(0):
        assert torch.get_num_threads() == before
