"""Host-side self-check of generated tasks: hidden tests on the base snapshot and after the gold patch.

This is the cheap, local check the generator's tests run (host Python, a temp folder, no isolation). The
Docker gate (gold x3 / empty x3 in the task's image) is ``harness.validate``; run it before an evaluation.

For one instance it materialises the snapshot, copies in the hidden tests and runs
``python -m pytest -rA -p no:cacheprovider tests`` twice, on the base and after ``git apply`` of the gold patch,
and checks: every FAIL_TO_PASS test fails on base and passes with gold; every PASS_TO_PASS test passes
on both; the visible suite fails on base (it reproduces the issue) and passes with gold; ``base_commit`` matches.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.schema import TaskInstance
from harness.tasks import apply_patch, materialize_snapshot

_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class CheckResult:
    instance_id: str
    ok: bool
    problems: list[str] = field(default_factory=list)


def pytest_statuses(repo: Path, tests: list[str], *, python: str = sys.executable,
                    timeout: float = 120.0) -> tuple[int, dict[str, str]]:
    """Run pytest on ``tests`` in ``repo``; returns (exit code, {node id: status word})."""
    cmd = [python, "-m", "pytest", "-rA", "-q", "-p", "no:cacheprovider", *tests]
    res = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout, check=False,
                         env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
                              "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    return res.returncode, {m.group(2): m.group(1) for m in _STATUS.finditer(res.stdout)}


def check_instance(root: str | Path, inst: TaskInstance, *, python: str = sys.executable) -> CheckResult:
    """Check one instance (see the module docstring); never raises for a failing check, only for I/O errors.

    Two pytest runs over the whole ``tests/`` folder (visible and hidden tests together): base, then gold.
    """
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tgsuite-selfcheck-") as tmp:
        repo = Path(tmp) / "repo"
        head = materialize_snapshot(root, inst, repo)
        if head != inst.base_commit:
            problems.append(f"base_commit {inst.base_commit} != materialised {head}")
        hidden = {ln[6:].strip() for ln in inst.test_patch.splitlines() if ln.startswith("+++ b/")}
        apply_patch(repo, inst.test_patch)
        _, base = pytest_statuses(repo, ["tests"], python=python)
        apply_patch(repo, inst.patch)
        gold_code, gold = pytest_statuses(repo, ["tests"], python=python)
    visible_base = [s for t, s in base.items() if t.split("::")[0] not in hidden]
    if "FAILED" not in visible_base:
        problems.append("no visible test fails on the base snapshot (the issue is not reproduced)")
    if gold_code != 0:
        problems.append(f"the test suite does not pass with the gold patch (pytest exit {gold_code})")
    for t in inst.FAIL_TO_PASS:
        if base.get(t) == "PASSED":
            problems.append(f"F2P {t} passes on base")
        if gold.get(t) != "PASSED":
            problems.append(f"F2P {t} is {gold.get(t, 'missing')} with gold")
    for t in inst.PASS_TO_PASS:
        if base.get(t) != "PASSED" or gold.get(t) != "PASSED":
            problems.append(f"P2P {t}: base {base.get(t, 'missing')}, gold {gold.get(t, 'missing')}")
    return CheckResult(inst.instance_id, not problems, problems)
