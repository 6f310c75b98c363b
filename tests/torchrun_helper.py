"""Run a worker script under ``torchrun --standalone`` on CPU (gloo) for the multi-rank tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent


def run_workers(script: str, tmp_path: Path, env: dict[str, str], nproc: int = 2) -> None:
    """Write ``script`` to ``tmp_path/worker.py`` and run it on ``nproc`` ranks with ``env`` added (``TESTS_DIR``
    and one OpenMP thread per rank are set); skip when torchrun is missing, fail with its stderr when it fails."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found next to the interpreter")
    worker = tmp_path / "worker.py"
    worker.write_text(script)
    full = {**os.environ, "TESTS_DIR": str(TESTS_DIR), "OMP_NUM_THREADS": "1", **env}
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", str(nproc), str(worker)], env=full,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
