"""The fault-injection benchmark (``benchmarks/fault_injection_bench.py``, issue #38) at a small size: every
injected fault is classified right, no episode is lost, no container or temp file is left. ``slow``: it runs
real episodes in several child processes (the issue's size is ``--episodes 420``; see the benchmark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fault_injection_bench.py"), *args,
                           "--json-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    print(f"\nfault injection: {summary}")
    assert proc.returncode == 0, summary
    return summary


@pytest.mark.slow
def test_fault_injection_local(tmp_path: Path) -> None:
    s = _bench(tmp_path, "--episodes", "24", "--sandbox", "local", "--rate", "0.4", "--runner-faults", "4")
    assert s["lost"] == s["doubled"] == s["infra_scored"] == s["agent_as_infra"] == s["tmp_files"] == 0
    assert s["faults"] >= 8 and s["fault_kinds"] >= 5


@pytest.mark.slow
@pytest.mark.docker
def test_fault_injection_docker(tmp_path: Path) -> None:
    s = _bench(tmp_path, "--episodes", "30", "--sandbox", "docker", "--rate", "0.5", "--runner-faults", "3")
    assert s["lost"] == s["doubled"] == s["infra_scored"] == s["agent_as_infra"] == s["containers_left"] == 0
    assert s["faults"] >= 10 and s["fault_kinds"] >= 6
