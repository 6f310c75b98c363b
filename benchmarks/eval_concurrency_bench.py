"""Benchmark: wall time of the main job's held-out evaluation at several episode concurrencies (the preset's
``eval.concurrency``: episodes run at once, their turns sampled as one batch), same checkpoint, same tasks.

Every concurrency runs the pipeline's own evaluation stage (``tgsuite.pipeline.stages.stage_eval``) with the
preset's settings in Docker; only ``eval.concurrency`` differs. Episodes draw from their own seeded generators, so
the concurrency should change the time and nothing else: the script prints, per concurrency, the wall time, its
ratio to the first (the baseline), the resolved and behaviour counts, how many episodes ended exactly as in the
baseline (status, resolved, tokens), and the peak RSS of this process. Example (the tuning set, never the
preregistered one):

    .venv/bin/tgsuite tasks make-heldout --preset mini --dev --out /tmp/mini-dev
    .venv/bin/tgsuite tasks validate /tmp/mini-dev --runs 2 --workers 2
    .venv/bin/python benchmarks/eval_concurrency_bench.py --checkpoint assets/sft/mini --tasks /tmp/mini-dev \
        --concurrency 8,16,24
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path


def _episodes(run_dir: Path) -> dict[str, tuple[str, bool, int]]:
    from harness.rundir import load_run

    return {r.instance_id: (r.status, r.resolved, r.metrics.tokens) for r in load_run(run_dir).results}


def main() -> None:
    from tgsuite.pipeline.presets import PRESETS
    from tgsuite.pipeline.stages import excluded_tests, stage_eval

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="model directory (HF layout + tokenizer), e.g. assets/sft/mini")
    ap.add_argument("--tasks", required=True, help="a validated held-out task set (use the dev seed's)")
    ap.add_argument("--preset", default="mini", choices=sorted(PRESETS))
    ap.add_argument("--concurrency", default="8,16", help="comma list; the first is the baseline")
    ap.add_argument("--temperature", type=float, default=None, help="default: the preset's eval.temperature")
    a = ap.parse_args()
    preset = PRESETS[a.preset]
    levels = [int(c) for c in a.concurrency.split(",")]
    temperature = preset.eval.temperature if a.temperature is None else a.temperature
    tasks = Path(a.tasks)
    excluded = excluded_tests(tasks)
    base_wall: float | None = None
    base_eps: dict[str, tuple[str, bool, int]] = {}
    print(f"checkpoint {a.checkpoint}, tasks {tasks}, temperature {temperature}, preset {preset.name}")
    print("| concurrency | wall s | vs first | resolved | behaviour | episodes as in the first | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for c in levels:
            p = preset.model_copy(update={"eval": preset.eval.model_copy(update={"concurrency": c,
                                                                                 "temperature": temperature})})
            run_dir = Path(tmp) / f"c{c}"
            t = time.perf_counter()
            out = stage_eval(run_dir, tasks, {"bench": a.checkpoint}, p, None, excluded)
            wall = time.perf_counter() - t
            eps = _episodes(run_dir)
            if base_wall is None:
                base_wall, base_eps = wall, eps
            same = sum(eps.get(k) == v for k, v in base_eps.items())
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"| {c} | {wall:.1f} | {base_wall / wall:.2f}× | {out.resolved}/{out.scored} | "
                  f"{out.behaviour_ok}/{out.scored} | {same}/{len(base_eps)} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()
