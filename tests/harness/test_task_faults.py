"""Task-set faults are named as task-set faults, with the file, the field and the fix, before any episode runs
(issue #38 item 9 and the silent cases of item 10). Before, an unparsable ``test_cmd`` and an oversized repository
became infrastructure retries ("fix the environment"), an absolute symbolic link made every episode the agent's
``patch_apply_failed``, and a test in both FAIL_TO_PASS and PASS_TO_PASS or an empty gold patch passed unseen."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.runner_sandbox import TaskSandboxFactory
from harness.sandbox import SandboxSpec
from harness.tasks import TaskSetError, load_task_set
from harness.tasks_checks import record_problems, tree_problems

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from harness.minirepos import make_mini

    out = tmp_path_factory.mktemp("faults") / "tasks"
    make_mini(out, split="heldout", repos=1, tasks_per_repo=1, seed=7)
    return out


def _copy(pristine: Path, dest: Path, **record: object) -> Path:
    shutil.copytree(pristine, dest)
    rec = json.loads((dest / "tasks.jsonl").read_text().splitlines()[0])
    rec.update(record)
    (dest / "tasks.jsonl").write_text(json.dumps(rec) + "\n")
    return dest


@pytest.mark.parametrize(("record", "field", "fix"), [
    ({"test_cmd": "python -m pytest -k 'unbalanced"}, "field 'test_cmd'", "balance its quotes"),
    ({"test_cmd": "PYTHONPATH=src"}, "field 'test_cmd'", "no command after"),
    ({"patch": "  \n"}, "field 'patch': the gold patch is empty", "unified diff"),
    ({"PASS_TO_PASS": "SAME"}, "fields 'FAIL_TO_PASS' and 'PASS_TO_PASS' both list 1", "keep it in one list"),
], ids=["unparsable_test_cmd", "assignments_only", "empty_gold_patch", "f2p_and_p2p"])
def test_record_faults_are_named_at_load(pristine: Path, tmp_path: Path, record: dict, field: str, fix: str) -> None:
    if record.get("PASS_TO_PASS") == "SAME":
        f2p = json.loads((pristine / "tasks.jsonl").read_text().splitlines()[0])["FAIL_TO_PASS"]
        record = {"PASS_TO_PASS": [f2p[0]]}
    tasks = _copy(pristine, tmp_path / "tasks", **record)
    with pytest.raises(TaskSetError) as err:
        load_task_set(tasks)
    msg = str(err.value)
    assert "tasks.jsonl:1" in msg and "task-set fault" in msg and field in msg and fix in msg, msg


def test_absolute_symlink_in_a_snapshot_is_refused_before_any_episode(pristine: Path, tmp_path: Path) -> None:
    tasks = _copy(pristine, tmp_path / "tasks")
    snap = next((tasks / "snapshots").iterdir())
    os.symlink("/etc/hostname", snap / "host_link")
    ts = load_task_set(tasks)
    with TaskSandboxFactory(ts, kind="local", run_id="t") as fac, pytest.raises(TaskSetError) as err:
        fac.preflight()
    assert "host_link: a symbolic link to '/etc/hostname' leaves the repository" in str(err.value)
    assert "fix: make it a relative link" in str(err.value) and "task-set fault" in str(err.value)
    proc = subprocess.run([sys.executable, "-m", "tgsuite", "tasks", "validate", str(tasks), "--sandbox", "local",
                           "--runs", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "leaves the repository" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tasks / "validation.json").exists()


def test_repository_over_the_disk_limit_is_a_task_set_fault(pristine: Path) -> None:
    ts = load_task_set(pristine)
    fac = TaskSandboxFactory(ts, kind="docker", run_id="t", spec=SandboxSpec(disk_bytes=1 << 10))
    try:
        with pytest.raises(TaskSetError, match=r"more than the sandbox disk limit of 0.00 MiB; fix: raise the limit"):
            fac.preflight()  # raised before the engine is asked anything
    finally:
        fac.close()


def test_pure_checks(tmp_path: Path) -> None:
    from tests.harness_fakes import make_calc_task

    inst, repo = make_calc_task(tmp_path)
    assert record_problems(inst) == [] and tree_problems(repo, disk_bytes=1 << 30) == []
    os.symlink("calc.py", repo / "ok_link")
    os.symlink("../../outside", repo / "up_link")
    assert [p.split(":")[0] for p in tree_problems(repo)] == ["up_link"]
