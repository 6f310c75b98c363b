"""``tgsuite doctor`` and ``tgsuite images``: one line per problem with cause and fix; exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tgsuite.commands import doctor, images

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="tgsuite")
    sub = parser.add_subparsers(dest="command")
    doctor.register(sub)
    images.register(sub)
    args = parser.parse_args(list(argv))
    rc = args.func(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_dead_engine_fails_with_cause_and_fix(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    rc, out, err = _run(capsys, "doctor", "--min-free-gb", "0")
    assert rc == 1
    line = next(ln for ln in out.splitlines() if ln.startswith("fail docker"))
    assert "no-daemon.sock" in line and "fix:" in line and "setup.sh" in line
    assert "required check(s) failed: docker" in err
    assert all(ln.split()[0] in ("ok", "warn", "fail") for ln in out.splitlines())


def test_no_docker_makes_engine_advisory(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    rc, out, _ = _run(capsys, "doctor", "--no-docker", "--min-free-gb", "0", "--json")
    checks = {c["name"]: c for c in json.loads(out)}
    assert checks["docker"]["status"] == "warn" and checks["docker"]["fix"]
    assert checks["python"]["status"] == "ok" and "torch" in checks and "cpus" in checks and "gpu" in checks
    assert rc == (1 if any(c["status"] == "fail" for c in checks.values()) else 0)


def test_not_enough_disk_fails(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "doctor", "--no-docker", "--min-free-gb", "1e9")
    assert rc == 1
    assert any(ln.startswith("fail disk") and "fix:" in ln for ln in out.splitlines())


def test_bad_argument_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from tgsuite.commands.common import CLIError

    with pytest.raises(CLIError, match="--min-free-gb"):
        _run(capsys, "doctor", "--min-free-gb", "-1")
    with pytest.raises(SystemExit):
        _run(capsys, "doctor", "--min-free-gb", "lots")


def test_images_build_with_dead_engine_is_a_cli_error(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tgsuite.commands.common import CLIError

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(CLIError, match="Fix: start the engine"):
        _run(capsys, "images", "build")


@pytest.mark.docker
def test_healthy_machine_passes(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "doctor", "--min-free-gb", "0")
    assert rc == 0, out
    assert any(ln.startswith("ok   docker") and "API 1.4" in ln for ln in out.splitlines())
    assert any(ln.startswith("ok   base image") for ln in out.splitlines())


@pytest.mark.docker
def test_images_build_and_show_when_present(capsys: pytest.CaptureFixture[str], base_image: str) -> None:
    rc, out, _ = _run(capsys, "images", "build")
    assert rc == 0 and out.startswith(base_image)
    rc, out, _ = _run(capsys, "images", "show", "--json")
    assert rc == 0 and json.loads(out)["tag"] == base_image


def test_console_script_doctor_and_help() -> None:
    """The installed `tgsuite` entry point (needs every command module of tgsuite.cli to import)."""
    help_text = subprocess.run([sys.executable, "-m", "tgsuite.cli", "doctor", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert help_text.returncode == 0, help_text.stderr
    assert "example" in help_text.stdout and "--no-docker" in help_text.stdout


@pytest.mark.gpu
def test_doctor_names_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs only where CUDA is available (conftest skips `gpu` tests otherwise)."""
    import torch

    rc, out, _ = _run(capsys, "doctor", "--no-docker", "--min-free-gb", "0")
    assert any(ln.startswith("ok   gpu") and torch.cuda.get_device_name(0) in ln for ln in out.splitlines())


def test_doctor_says_which_torch_build_and_flags_a_cpu_build_beside_a_gpu() -> None:
    import torch

    from tgsuite.commands.doctor import torch_checks

    build = f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu"
    plain = torch_checks(gpus=[])[0]
    assert plain.detail == f"{torch.__version__} ({build} build)"
    if not torch.version.cuda:
        flagged = torch_checks(gpus=["GPU 0: NVIDIA H200 (UUID: GPU-x)"])[0]
        assert flagged.status == "warn" and "cpu build" in flagged.detail and "TGSUITE_TORCH=cuda" in flagged.fix
