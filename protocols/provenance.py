"""Provenance of every artifact the project writes: one timestamp format, one git state, one package list.

- :func:`utc_now`: UTC time to the second as ``YYYY-MM-DDTHH:MM:SSZ`` (the ``Z`` form everywhere: manifests,
  checkpoints, stage records, frozen protocols, analyses, reports); ``datetime.fromisoformat`` reads it.
- :func:`git_state`: ``(commit, dirty)`` of the checkout at ``cwd`` (default: the one holding this package);
  ``dirty`` is True when a tracked file is modified OR an untracked file that ``.gitignore`` does not ignore exists
  (an untracked module can change what runs); ``(None, None)`` outside git or without a git binary.
- :func:`package_versions`: Python's version and the installed version of each of :data:`PACKAGES` (absent ones
  are left out).

It lives in ``protocols``, the package every other package may import (tests/test_import_rules.py). Not covered:
the host (CPU, GPU, driver) — the training manifests record what they need of it themselves.
"""

from __future__ import annotations

import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

PACKAGES: tuple[str, ...] = ("tgsuite", "torch", "transformers", "tokenizers", "safetensors", "pydantic", "docker",
                             "numpy", "scipy", "statsmodels", "pandas", "pytest", "vllm", "trl")
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_REPO = Path(__file__).resolve().parent.parent


def utc_now() -> str:
    """Now, in UTC, as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.now(UTC).strftime(TIMESTAMP_FORMAT)


def git_state(cwd: str | Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout at ``cwd`` (rules in the module docstring)."""
    where = Path(cwd) if cwd is not None else _REPO
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=normal"], cwd=where,
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """``{"python": <version>, <package>: <version>, ...}`` for the installed ones of ``names``."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out
