"""A full run directory stops the run at once with a message naming the folder and its free space; nothing
half-written stays behind and the resume completes the run (issue #38 item 6).

Measured on a real, small tmpfs (needs root to mount it; skipped otherwise): a filler file leaves a few hundred
KiB, the run fills the rest, then the filler is removed and the same run resumes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.infra import atomic_write_text, sweep_tmp
from harness.runner import RunDiskFull, run_eval
from harness.schema import TaskSet
from tests.harness_fakes import FakeFactory, FixPolicy, make_calc_task


def test_atomic_write_leaves_no_temp_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(src, dst):  # noqa: ANN001
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        atomic_write_text(tmp_path / "result.json", "{}")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "episodes").mkdir()
    (tmp_path / "episodes" / ".result.json.1.2.tmp").write_text("half")
    assert sweep_tmp(tmp_path) == 1 and not list(tmp_path.rglob("*.tmp"))


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_run_directory_stops_at_once_and_resumes(tmp_path: Path, small_disk: Path) -> None:
    insts, repos = [], {}
    for k in range(16):
        inst, repo = make_calc_task(tmp_path / "repos", f"calc-{k}")
        insts.append(inst)
        repos[inst.instance_id] = repo
    ts = TaskSet(name="calc", path=str(tmp_path / "repos"), sha256="f" * 64, instances=insts)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * ((4 << 20) - (160 << 10)))  # about 160 KiB left: a few episodes fit
    out = small_disk / "run"
    fac = FakeFactory(repos)
    with pytest.raises(RunDiskFull) as err:
        run_eval(ts, {"fix": FixPolicy()}, [0], out, sandbox_factory=fac, workers=2)
    msg = str(err.value)
    done = len(list(out.glob("episodes/*/*/s*/a*/result.json")))
    started = sum(role == "agent" for _, role, _ in fac.opened)
    print(f"\ndisk full: {done} results, {started} agent sandboxes started of 16; message: {msg[:160]}")
    assert str(out) in msg and "MiB free" in msg and "run the same command again" in msg
    assert started <= done + 2 + 2, "no queued episode may start once the disk is full (2 workers)"
    assert not list(out.rglob("*.tmp")), "no half-written temp file"
    filler.unlink()
    res = run_eval(ts, {"fix": FixPolicy()}, [0], out, sandbox_factory=FakeFactory(repos), workers=2)
    lost = 16 - len(res)
    scored_unresolved = sum(r.scored and not r.resolved for r in res)
    print(f"after resume: {len(res)} results, lost {lost}, infra scored {scored_unresolved}, "
          f"tmp files {len(list(out.rglob('*.tmp')))}")
    assert lost == 0 and scored_unresolved == 0 and not list(out.rglob("*.tmp"))
