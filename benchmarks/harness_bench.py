"""Harness throughput: episodes/minute for scripted policies at 1 and N workers, and where the time goes.

Runs ``harness.runner.run_eval`` (the same code path as ``tgsuite eval``) on the held-out split of the mini task
family, for each policy and each worker count, in a fresh run directory each time. Prints:

- episodes/minute per (policy, workers) and the speed-up against 1 worker measured in the same invocation;
- the split of summed per-episode time between agent sandbox start (container create + repo copy), agent
  (policy + tool execution), patch extraction, grading sandbox start, hidden-test run (grade minus its sandbox
  start) and control runs, from each attempt's ``timing.json``;
- peak resident memory of this process and of its reaped children (``getrusage``; container memory is not
  included: it lives in the Docker daemon's cgroups).

Usage::

    .venv/bin/python benchmarks/harness_bench.py --sandbox docker --workers 1,2 --policies oracle,expert
    .venv/bin/python benchmarks/harness_bench.py --sandbox local --repos 2 --tasks-per-repo 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.minirepos import make_mini  # noqa: E402
from harness.runner import run_eval  # noqa: E402
from harness.runner_sandbox import TaskSandboxFactory  # noqa: E402
from harness.sandbox import SANDBOX_KINDS  # noqa: E402
from harness.tasks import load_task_set  # noqa: E402

PHASES = ("sandbox_start", "agent", "extract", "grade_sandbox_start", "grade_tests", "control")


def _phase_totals(run_dir: Path) -> dict[str, float]:
    tot = dict.fromkeys(PHASES, 0.0)
    for f in run_dir.glob("episodes/*/*/s*/a*/timing.json"):
        t = json.loads(f.read_text())
        for k in ("sandbox_start", "agent", "extract", "grade_sandbox_start", "control"):
            tot[k] += t.get(k, 0.0)
        tot["grade_tests"] += t.get("grade", 0.0) - t.get("grade_sandbox_start", 0.0)
    return tot


def bench_one(ts, policy: str, workers: int, kind: str, root: Path) -> dict:
    out = root / f"run-{policy}-w{workers}"
    shutil.rmtree(out, ignore_errors=True)
    with TaskSandboxFactory(ts, kind=kind, run_id=f"bench-{policy}-w{workers}") as factory:
        factory.preflight()
        t0 = time.perf_counter()
        res = run_eval(ts, {policy: policy}, [0], out, sandbox_factory=factory, workers=workers)
        wall = time.perf_counter() - t0
    phases = _phase_totals(out)
    busy = sum(phases.values()) or 1.0
    return {
        "policy": policy, "workers": workers, "episodes": len(res), "wall_s": wall,
        "episodes_per_min": 60.0 * len(res) / wall, "resolved": sum(r.resolved for r in res),
        "infra": sum(r.failure_class == "infra" for r in res),
        "phase_s": phases, "phase_frac": {k: v / busy for k, v in phases.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sandbox", choices=SANDBOX_KINDS, default="docker")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--policies", default="oracle,expert")
    ap.add_argument("--tasks", default=None, help="task set dir (default: generate the mini held-out split)")
    ap.add_argument("--repos", type=int, default=3)
    ap.add_argument("--tasks-per-repo", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="tgsuite-harness-bench-"))
    try:
        if args.tasks is None:
            make_mini(root / "tasks", split="heldout", repos=args.repos, tasks_per_repo=args.tasks_per_repo,
                      seed=args.seed)
        ts = load_task_set(args.tasks or root / "tasks")
        workers = [int(w) for w in args.workers.split(",")]
        rows = [bench_one(ts, p, w, args.sandbox, root) for p in args.policies.split(",") for w in workers]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _print(rows, args.sandbox, len(ts.instances))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _print(rows: list[dict], kind: str, n: int) -> None:
    print(f"harness bench: sandbox={kind}, {n} held-out instances, 1 seed")
    print(f"{'policy':<8} {'workers':>7} {'eps':>4} {'wall_s':>7} {'eps/min':>8} {'speedup':>8} {'resolved':>8} "
          + " ".join(f"{p:>12}" for p in PHASES))
    base = {r["policy"]: r["episodes_per_min"] for r in rows if r["workers"] == 1}
    for r in rows:
        speed = r["episodes_per_min"] / base[r["policy"]] if r["policy"] in base else float("nan")
        fr = " ".join(f"{100 * r['phase_frac'][p]:>11.1f}%" for p in PHASES)
        print(f"{r['policy']:<8} {r['workers']:>7} {r['episodes']:>4} {r['wall_s']:>7.1f} "
              f"{r['episodes_per_min']:>8.2f} {speed:>7.2f}x {r['resolved']:>8} {fr}")
    self_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: harness process {self_mb:.0f} MiB, largest reaped child {child_mb:.0f} MiB "
          "(container memory not included)")


if __name__ == "__main__":
    sys.exit(main())
