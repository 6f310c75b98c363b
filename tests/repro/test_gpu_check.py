"""repro.gpu_check (run by scripts/gpu_check.sh on a GPU machine): its CPU parts. The help, the clear refusal
without vLLM / CUDA (exit 2 and a JSON summary saying why), and the whole check end to end on CPU over the fake of
vLLM's objects (tests/vllm_fakes.py): two RL steps, tokens counted, log-probs compared with the trainer's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_fakes import FakeVLLM

from repro.gpu_check import main, parser, run_check

ROOT = Path(__file__).resolve().parents[2]


def test_help_runs_without_vllm_or_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "vLLM rollouts" in out and "--out" in out and "gpu_check.sh" in out


def test_without_vllm_it_exits_2_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert main(["--out", str(tmp_path)]) == 2
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["status"] == "unavailable" and "gpu" in summary["reason"]
    assert "cannot run" in capsys.readouterr().err


def test_two_rl_steps_over_the_fake_measure_tokens_and_logprob_differences(tmp_path: Path) -> None:
    import torch

    torch.set_num_threads(1)
    args = parser().parse_args(["--out", str(tmp_path), "--preset", "nano", "--groups", "1", "--group-size", "2",
                                "--max-new-tokens", "6", "--precision", "fp32"])
    s = run_check(args, api=FakeVLLM().api(), device="cpu")
    assert s["status"] == "ok" and s["weight_syncs"] == 2 and s["final_version"] == 1
    assert s["staleness_max"] == [0, 0]
    assert 2 * 2 <= s["tokens"] <= 2 * 2 * 2 * 6  # 2 steps x 2 rollouts x 1-2 turns x ≤ 6 tokens
    assert s["tokens_per_s"] > 0
    # the fake samples in fp32 from the trainer's weights of that version: the sampler and trainer agree
    assert s["max_abs_logprob_diff"] < 1e-4


def test_the_script_stops_clearly_without_a_gpu(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with bash tools but no nvidia-smi
    bin_dir.mkdir()
    for tool in ("dirname", "mkdir", "grep", "printf"):
        found = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if found.startswith("/"):
            (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "OUT": str(tmp_path / "out")}
    res = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "gpu_check.sh")], env=env, capture_output=True,
                         text=True)
    assert res.returncode == 2 and "no NVIDIA GPU" in res.stderr
    assert json.loads((tmp_path / "out" / "gpu_check.json").read_text())["status"] == "unavailable"
