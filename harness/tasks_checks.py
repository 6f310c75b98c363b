"""Task-set faults found before any episode runs (issue #38 item 9): a fault of the task set must be named as one,
with the file, the field and the fix, instead of becoming infrastructure retries or every episode's agent failure.

- ``record_problems`` (pure, run by ``harness.tasks.parse_record`` for every record loaded): a ``test_cmd`` that does
  not parse as shell words (it was retried as infrastructure), the same test in ``FAIL_TO_PASS`` and
  ``PASS_TO_PASS`` (it cannot both fail and pass before the fix), an empty gold ``patch`` (nothing to validate);
- ``tree_problems`` (run by ``harness.runner_sandbox.TaskSandboxFactory.preflight`` on each materialised
  repository): a symbolic link that is absolute or leaves the repository (the work tree then cannot be copied out
  safely: every episode was the agent's ``patch_apply_failed``), and a repository larger than the sandbox's disk
  limit (every attempt was a ``DISK_FULL`` infrastructure error with advice to fix the environment).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.grading_paths import split_env_assignments
from harness.schema import TaskInstance


def record_problems(inst: TaskInstance) -> list[str]:
    """``field 'X': problem; fix: ...`` for each fault of one record (module docstring)."""
    problems = []
    try:
        split_env_assignments(inst.test_cmd)
    except ValueError as exc:
        problems.append(f"field 'test_cmd': {exc}")
    both = sorted(set(inst.FAIL_TO_PASS) & set(inst.PASS_TO_PASS))
    if both:
        problems.append(f"fields 'FAIL_TO_PASS' and 'PASS_TO_PASS' both list {len(both)} test(s) (first: {both[0]!r}); "
                        "fix: a test fails before the fix (FAIL_TO_PASS) or passes before and after it "
                        "(PASS_TO_PASS): keep it in one list")
    if not inst.patch.strip():
        problems.append("field 'patch': the gold patch is empty; fix: give the reference fix as a unified diff "
                        "(validation grades it, and invalid grades are settled by it)")
    return problems


def tree_problems(root: Path, *, disk_bytes: int | None = None) -> list[str]:
    """Faults of a materialised repository at ``root`` (module docstring); paths are relative to ``root``."""
    problems: list[str] = []
    total = 0
    real_root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                target = os.readlink(full)
                resolved = os.path.realpath(os.path.join(dirpath, target))
                if os.path.isabs(target) or os.path.commonpath([real_root, resolved]) != real_root:
                    problems.append(f"{rel}: a symbolic link to {target!r} leaves the repository; fix: make it a "
                                    "relative link to a path inside the repository, or replace it with the file")
            elif name in filenames:
                total += os.lstat(full).st_size
    if disk_bytes is not None and total > disk_bytes:
        problems.append(f"the repository holds {total / 2**20:.2f} MiB of files (its .git included), more than the "
                        f"sandbox disk limit of {disk_bytes / 2**20:.2f} MiB; fix: raise the limit (`tgsuite eval "
                        "--disk-mib`, SandboxSpec.disk_bytes) or make the snapshot smaller")
    return problems
