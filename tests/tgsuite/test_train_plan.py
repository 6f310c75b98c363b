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
    assert "30.53 B total" in out and "61.1 GB/GPU" in out and "96 KiB/token" in out and "not implemented" in out
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
