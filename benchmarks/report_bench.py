"""Report rendering at scale: time, peak memory and index.html size for N episodes.

Builds a synthetic (fixture) run with N episodes and full episode directories (trajectory, patch, grading log),
then times ``build_report`` end to end. The baseline measured in the same run is the same report over 80 episodes,
so the ratio shows how rendering grows with N (trajectory pages are capped, so it should grow far slower than N).
Wall time and process CPU time are both printed: on a shared machine wall time includes waiting for a CPU.
Peak memory is Python-heap peak (tracemalloc) in a second, separate pass so that tracing does not skew the timing.

    .venv/bin/python benchmarks/report_bench.py --episodes 10000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "reports"))
import report_factory as factory  # noqa: E402

from reports.build import build_report  # noqa: E402


def measure(n_episodes: int, root: Path, max_pages: int) -> dict[str, float]:
    """Time build_report (wall and process CPU) on a fresh fixture; then one more pass under tracemalloc for peak."""
    n_tasks = max(1, n_episodes // 4)  # 2 arms x 2 seeds per task
    kw = factory.full_fixture(root, n_tasks=n_tasks)
    kw.pop("episodes")
    analysis = kw.pop("analysis")
    t0, c0 = time.perf_counter(), time.process_time()
    summary = build_report(analysis, out_dir=root / "out", max_trajectory_pages=max_pages, **kw)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = (root / "out" / "index.html").stat().st_size
    tracemalloc.start()
    build_report(analysis, out_dir=root / "out-mem", max_trajectory_pages=max_pages, **kw)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"episodes": summary.n_episodes, "pages": summary.n_trajectory_pages, "wall_s": wall, "cpu_s": cpu,
            "peak_mib": peak / 2**20, "index_mib": size / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--max-pages", type=int, default=500)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="report-bench-"))
    try:
        base = measure(80, tmp / "base", args.max_pages)
        big = measure(args.episodes, tmp / "big", args.max_pages)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for name, r in (("baseline", base), ("large", big)):
        print(f"{name:8s} episodes={r['episodes']:>6,} pages={r['pages']:>4} wall={r['wall_s']:.2f}s cpu={r['cpu_s']:.2f}s "
              f"peak_python_mem={r['peak_mib']:.1f}MiB index.html={r['index_mib']:.2f}MiB")
    print(f"ratio large/baseline: episodes x{big['episodes'] / base['episodes']:.0f}, "
          f"wall x{big['wall_s'] / base['wall_s']:.2f}, index size x{big['index_mib'] / base['index_mib']:.2f}")
    print(f"load average during the run: {os.getloadavg()} on {os.cpu_count()} CPUs (wall > cpu means contention)")
    print(f"budget: render < 10 s -> wall {'OK' if big['wall_s'] < 10 else 'OVER'} ({big['wall_s']:.1f} s), "
          f"cpu {'OK' if big['cpu_s'] < 10 else 'OVER'} ({big['cpu_s']:.1f} s); "
          f"index.html < 5 MB -> {'OK' if big['index_mib'] * 2**20 < 5e6 else 'OVER'}")


if __name__ == "__main__":
    main()
