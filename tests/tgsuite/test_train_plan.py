"""`tgsuite train` CLI: --dry-run plan numbers (SCALE.md §2.1), arms listing, user errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.compute import plan, plan_shape
from repro.config import load_config
from tgsuite.cli import main

PAPER = Path(__file__).resolve().parents[2] / "configs" / "paper" / "qwen3_coder_30b_a3b_tg.toml"


def test_plan_numbers_match_scale_doc() -> None:
    cfg = load_config(path=PAPER)
    shape, _ = plan_shape(cfg)
    p = plan(shape, trainer_gpus=8, trajectories_per_step=1024, tokens_per_trajectory=16384)
    assert p["params_total"] / 1e9 == pytest.approx(30.53, abs=0.01)
    assert p["params_per_layer"] / 1e6 == pytest.approx(623.1, abs=0.1)
    assert p["train_state_bytes_per_gpu"] / 1e9 == pytest.approx(61.1, abs=0.1)
    assert p["kv_bytes_per_token"] == 96 * 1024
    # 6·N_active·T at 16k tokens per trajectory ≈ 3.0e17 FLOP (SCALE §2.1; excludes the teacher pass)
    assert 6 * p["params_active_flop"] * p["tokens_per_step"] == pytest.approx(3.0e17, rel=0.05)


def test_dry_run_prints_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "rl", "--config", str(PAPER), "--out", str(tmp_path / "x"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "30.53 B total" in out and "61.1 GB/GPU" in out and "96 KiB/token" in out
    # the paper config cannot train yet, and the plan says why (the launch check of repro.distributed)
    assert "NOTE: `train rl` would refuse this config as it is: cluster.fsdp = true with async.enabled = true" in out
    assert "needs vllm_http.weights_dir" in out
    assert not (tmp_path / "x").exists()


def test_dry_run_nano_and_arms(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "rl", "--arm", "tg", "--out", str(tmp_path / "y"), "--dry-run"]) == 0
    assert "preset nano" in capsys.readouterr().out
    assert main(["train", "arms"]) == 0
    out = capsys.readouterr().out
    assert "tg_all_turns" in out and 'guidance.gating="all_turns"' in out


def test_cli_config_error_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["train", "rl", "--arm", "tg", "--set", "guidance.lamda=1", "--out", str(tmp_path / "z")])
    err = capsys.readouterr().err
    assert rc == 2 and "guidance.lamda" in err and "error" in err


def test_cli_rl_without_tasks_says_how_to_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["train", "rl", "--arm", "grpo", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and ("model.init" in err or "tasks.path" in err)


def test_cli_sft_bad_set_lists_valid_keys(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["train", "sft", "--train-tasks", str(tmp_path), "--out", str(tmp_path / "o"), "--set", "epoks=2"])
    err = capsys.readouterr().err
    assert rc == 2 and "epoks" in err and "episodes" in err


def test_cli_sft_dotted_set_reaches_the_lora_section(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["train", "sft", "--train-tasks", str(tmp_path), "--out", str(tmp_path / "o"), "--set", "lora.r=0"])
    err = capsys.readouterr().err
    assert rc == 2 and "'lora', 'r'" in err and "greater than or equal to 1" in err


def test_cli_distill_from_missing_best(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["train", "distill", "--arm", "tg", "--from-best", str(tmp_path / "nope.jsonl"),
               "--out", str(tmp_path / "d")])
    assert rc == 2 and "best.jsonl" in capsys.readouterr().err


def test_dry_run_counts_an_ema_teacher_copy_and_arms_lists_the_teacher_arms(capsys: pytest.CaptureFixture[str],
                                                                           tmp_path: Path) -> None:
    assert main(["train", "rl", "--config", str(PAPER), "--set", "guidance.teacher=ema", "--out",
                 str(tmp_path / "x"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 61.06 GB/GPU of training state + 4 B/param × 30.53 B / 8 GPUs = 15.26 GB/GPU for the frozen teacher copy
    assert "ema teacher copy" in out and "76.3 GB/GPU" in out
    assert main(["train", "arms"]) == 0
    out = capsys.readouterr().out
    assert 'guidance.teacher="ema"' in out and 'guidance.teacher="fixed"' in out


TINY = dict(layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, vocab=10, intermediate=16)


def test_activation_plan_matches_a_hand_computed_case() -> None:
    from repro.compute import ModelShape, activation_elements_per_token_layer, activation_plan

    shape = ModelShape(**TINY)
    # q = 2·4 = 8, kv = 1·4 = 4; attention 2·8 + 2·8 + 2·4 + 4 + 8 = 52; MLP 2·8 + 4·16 = 80  → 132 elements
    assert activation_elements_per_token_layer(shape) == 132
    a = activation_plan(shape, micro_batch_tokens=10, chunk_rows=3, dtype_bytes=2)
    assert a["activation_bytes_per_token_layer"] == 264
    assert a["activations_bytes"] == 10 * 2 * 264  # every layer keeps its tensors: 5,280 B
    assert a["activations_checkpointed_bytes"] == 10 * 2 * 8 * 2 + 10 * 264  # layer inputs + one layer: 2,960 B
    assert a["loss_chunk_bytes"] == 2 * 3 * 10 * 4  # one 3-row chunk of fp32 student + teacher log-probs
    moe = ModelShape(**{**TINY, "intermediate": 0, "experts": 4, "experts_per_token": 2, "moe_intermediate": 6})
    assert activation_elements_per_token_layer(moe) == 52 + 2 * 8 + 2 * 4 * 6 + 4  # two active experts + router


def test_engine_plan_matches_a_hand_computed_case() -> None:
    from repro.compute import ModelShape, engine_plan

    p = plan(ModelShape(**TINY), trainer_gpus=1, trajectories_per_step=1, tokens_per_trajectory=1)
    # per layer: attention 8·8 + 2·8·4 + 8·8 = 192, MLP 3·8·16 = 384; 2 layers + embedding 80 + head 80 = 1,312
    assert p["params_total"] == 1312 and p["bf16_weights_bytes"] == 2624
    assert p["kv_bytes_per_token"] == 2 * 2 * 1 * 4 * 2  # layers · (k, v) · kv heads · head_dim · bf16 = 32 B
    e = engine_plan(weights_bytes=2624, kv_bytes_per_token=32, gpus=4, tp=2, concurrency=5, tokens_per_sequence=100)
    # 2 replicas of TP 2; ceil(5 / 2) = 3 sequences each; KV 3 · 100 · 32 / 2 = 4,800 B and weights 1,312 B per GPU
    assert (e["engine_replicas"], e["engine_sequences_per_replica"]) == (2, 3)
    assert (e["engine_weights_bytes_per_gpu"], e["engine_kv_bytes_per_gpu"], e["engine_bytes_per_gpu"]) == (
        1312, 4800, 6112)
    with pytest.raises(ValueError, match="inference_tp"):
        engine_plan(weights_bytes=1, kv_bytes_per_token=1, gpus=1, tp=2, concurrency=1, tokens_per_sequence=1)


def test_dry_run_prints_activations_and_the_engine_on_inference_gpus_or_colocated(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "rl", "--config", str(PAPER), "--out", str(tmp_path / "x"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 30B-A3B, one 16,384-token micro-batch: 91.2 KiB per token per layer x 48 layers = 73.5 GB, 4.8 GB checkpointed
    assert "91.2 KiB per token per layer" in out and "73.5 GB without" in out and "4.8 GB with it" in out
    # 1,024 sequences x 16,384 tokens x 96 KiB over 8 replicas = 206.2 GB of KV per inference GPU: does not fit
    assert "on 8 inference GPU(s)" in out and "206.2 GB/GPU (128 per replica)" in out and "does not fit" in out
    assert main(["train", "rl", "--config", str(PAPER), "--set", "cluster.inference_gpus=0", "--set",
                 "rollout.engine=vllm", "--set", "cluster.rollout_concurrency=64", "--out", str(tmp_path / "y"),
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    # colocated: 64 sequences over 8 replicas = 8 each, 8 x 16,384 x 96 KiB = 12.9 GB of KV + 61.1 GB of weights
    assert "colocated on the 8 trainer GPU(s)" in out and "12.9 GB/GPU (8 per replica)" in out
    # beside 61.1 GB of training state, 4.8 + 1.24 GB of activations: 141.0 GB of 141 GB, over the 0.9 margin
    assert "+ colocated engine): 141.0 GB of 141 GB  <-- does not fit" in out and "vllm_http.weights_dir" not in out
    assert "beside the trainer a replica holds ~0 such sequences" in out


def test_the_trainer_total_counts_activations_as_the_trainer_keeps_them(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    """model.activation_checkpointing chooses which activation figure enters the trainer total (issue 40: the plan
    used to assume checkpointing that the trainer did not do)."""
    totals = {}
    for value in ("true", "false"):
        assert main(["train", "rl", "--config", str(PAPER), "--set", f"model.activation_checkpointing={value}",
                     "--out", str(tmp_path / value), "--dry-run"]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("trainer GPU total"))
        totals[value] = line
    # 61.1 GB of state + 1.24 GB loss chunk + 4.8 GB checkpointed / 73.5 GB kept activations
    assert "checkpointed activations (model.activation_checkpointing = true)" in totals["true"]
    assert ": 67.1 GB of 141 GB" in totals["true"] and "does not fit" not in totals["true"]
    assert "without checkpointing (model.activation_checkpointing = false)" in totals["false"]
    assert ": 135.8 GB of 141 GB  <-- does not fit" in totals["false"]
