"""``tgsuite report RUN_DIR``: a descriptive report of one run without a plan, marked "no preregistered decision"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.runner import run_eval
from harness.schema import TaskSet
from tests.harness_fakes import FakeFactory, FixPolicy, NullFinishPolicy, make_calc_task

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    insts, repos = [], {}
    for k in range(2):
        inst, repo = make_calc_task(tmp_path / "repos", f"calc-{k}")
        insts.append(inst.model_copy(update={"repo": f"org/r{k}"}))
        repos[inst.instance_id] = repo
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="c" * 64, instances=insts)
    out = tmp_path / "run"
    run_eval(ts, {"fix": FixPolicy(), "null": NullFinishPolicy()}, [0, 1], out, sandbox_factory=FakeFactory(repos))
    return out


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tgsuite.cli", "report", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_report_of_a_run_without_a_plan(run_dir: Path) -> None:
    proc = _report(str(run_dir))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "NO PREREGISTERED DECISION" in proc.stdout
    html = (run_dir / "report" / "index.html").read_text()
    assert html.count("NO PREREGISTERED DECISION") >= 2 and "SHIP" not in html.replace("no-ship", "")
    for section in ('id="arm-rates"', 'id="joint-fix"', 'id="joint-null"', 'id="per-repo-table"', 'id="reach"',
                    'id="secondary-table"', 'id="episode-table"'):
        assert section in html, section
    assert "org/r0" in html and "org/r1" in html and "100.0% [51.0%, 100.0%] (n = 4)" in html  # fix: 4/4 resolved
    assert len(list((run_dir / "report" / "trajectories").glob("*.html"))) == 8
    assert (run_dir / "aggregate.json").is_file() and (run_dir / "report" / "aggregate.json").is_file()


def test_report_arguments_are_checked(run_dir: Path, tmp_path: Path) -> None:
    neither = _report("--out", str(tmp_path / "r"))
    assert neither.returncode == 2 and "either RUN_DIR" in neither.stderr
    both = _report(str(run_dir), "--analysis", str(tmp_path / "a.json"))
    assert both.returncode == 2 and "either RUN_DIR" in both.stderr
    plan_only = _report(str(run_dir), "--protocol", str(tmp_path / "p.json"))
    assert plan_only.returncode == 2 and "need --analysis" in plan_only.stderr
    not_a_run = _report(str(tmp_path))
    assert not_a_run.returncode == 2 and "no manifest.json" in not_a_run.stderr
