"""Benchmark: mini task family generation speed, against the I/O floor measured in the same run.

Measures, for ``--repos`` x ``--tasks-per-repo`` train tasks:
- ``generate``: building every task in memory (templates, planting + in-process bug detection, tests, diffs,
  problem statements, git commit ids), wall and CPU seconds;
- ``write``: ``write_task_set`` of the result (tasks.jsonl + one snapshot folder per task), and the same with
  ``snapshot_format="tar.gz"`` (one archive per task);
- ``io_floor`` (the baseline): writing the same bytes to the same layout with plain ``Path.write_bytes`` and no
  generation at all; ratio = (generate + write) / io_floor;
- ``load``: ``load_task_set`` (validation of every record plus the content hash over all snapshots);
- peak RSS of this process (``ru_maxrss``).

Usage:  python benchmarks/minirepos_bench.py [--repos 500] [--tasks-per-repo 4] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.minirepos.generator import generate  # noqa: E402
from harness.tasks import load_task_set, write_task_set  # noqa: E402


def _timed(fn):  # noqa: ANN001, ANN202
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repos", type=int, default=500)
    ap.add_argument("--tasks-per-repo", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    (insts, snaps), gen_w, gen_c = _timed(
        lambda: generate(split="train", repos=args.repos, tasks_per_repo=args.tasks_per_repo, seed=args.seed))
    with tempfile.TemporaryDirectory(prefix="minibench-") as tmp:
        _, wr_w, wr_c = _timed(lambda: write_task_set(Path(tmp) / "ts", insts, snaps))
        _, tar_w, tar_c = _timed(lambda: write_task_set(Path(tmp) / "tar", insts, snaps, snapshot_format="tar.gz"))
        _, ldt_w, _ = _timed(lambda: load_task_set(Path(tmp) / "tar"))

        def floor() -> None:
            root = Path(tmp) / "floor"
            lines = [i.model_dump_json() + "\n" for i in insts]
            for iid, files in snaps.items():
                for rel, data in files.items():
                    p = root / "snapshots" / iid / rel
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(data)
            (root / "tasks.jsonl").write_text("".join(lines))

        _, fl_w, fl_c = _timed(floor)
        ts, ld_w, ld_c = _timed(lambda: load_task_set(Path(tmp) / "ts"))
    total = gen_w + wr_w
    print(json.dumps({
        "tasks": len(insts), "repos": args.repos,
        "generate_wall_s": round(gen_w, 2), "generate_cpu_s": round(gen_c, 2),
        "write_dir_wall_s": round(wr_w, 2), "io_floor_wall_s": round(fl_w, 2),
        "ratio_generate_plus_write_over_io_floor": round(total / fl_w, 2) if fl_w else None,
        "write_tar_gz_wall_s": round(tar_w, 2), "write_tar_gz_cpu_s": round(tar_c, 2),
        "ratio_tar_gz_write_over_dir_write": round(tar_w / wr_w, 3) if wr_w else None,
        "generate_plus_tar_gz_wall_s": round(gen_w + tar_w, 2), "load_tar_gz_wall_s": round(ldt_w, 2),
        "tasks_per_s": round(len(insts) / total, 1),
        "load_task_set_wall_s": round(ld_w, 2), "load_cpu_s": round(ld_c, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "task_set_sha256": ts.sha256[:16],
    }, indent=1))


if __name__ == "__main__":
    main()
