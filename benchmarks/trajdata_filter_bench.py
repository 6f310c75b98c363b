"""Benchmark: the dataset filters on synthetic trajectories — time with the MinHash near-duplicate filter against the
same filters without it (the baseline, measured in the same run), recall of planted near-duplicates, false merges,
and peak RSS.

Records: ``--records`` synthetic chat trajectories of ``--words`` random words each (a 2,000-word vocabulary,
``random.Random(--seed)``); a share ``--dup-share`` of them are planted near-duplicates of an earlier record with
``--edit-share`` of their words replaced (each replaced word changes up to 5 of the 5-word shingles: one word of
300 gives Jaccard ≈ 0.97, six words ≈ 0.82). Prints records/s for both modes, the ratio, how many planted duplicates the filter removed
(recall), how many unplanted records it removed (false merges) and the peak RSS. Example:

    .venv/bin/python benchmarks/trajdata_filter_bench.py --records 2000 --words 400 --edit-share 0.005
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time


def _records(a: argparse.Namespace) -> tuple[list, set[str]]:
    from harness.schema import Message, Trajectory
    from harness.trajdata.schema import Provenance, TrajectoryRecord

    rng = random.Random(a.seed)
    vocab = [f"tok{i}" for i in range(2000)]
    texts: list[list[str]] = []
    planted: set[str] = set()
    out = []
    for i in range(a.records):
        if texts and rng.random() < a.dup_share:
            words = list(rng.choice(texts))
            for j in rng.sample(range(len(words)), max(1, int(a.edit_share * len(words)))):
                words[j] = rng.choice(vocab)
            planted.add(f"r{i}")
        else:
            words = [rng.choice(vocab) for _ in range(a.words)]
        texts.append(words)
        msgs = [Message(role="user", content="Fix the bug"), Message(role="assistant", content=" ".join(words))]
        prov = Provenance(source_format="openai_jsonl", path="synthetic", locator=f"line {i}", source_sha256="0" * 64)
        out.append(TrajectoryRecord(record_id=f"r{i}", provenance=prov,
                                    trajectory=Trajectory(instance_id="t", policy="p", seed=0, messages=msgs)))
    return out, planted


def main() -> None:
    from harness.trajdata.filters import FilterOptions, apply_filters

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--words", type=int, default=300)
    p.add_argument("--dup-share", type=float, default=0.2)
    p.add_argument("--edit-share", type=float, default=0.005)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    records, planted = _records(a)
    t = time.perf_counter()
    base, _ = apply_filters(records, FilterOptions(near_dup_threshold=None))
    t_base = time.perf_counter() - t
    t = time.perf_counter()
    kept, counts = apply_filters(records, FilterOptions(near_dup_threshold=a.threshold, seed=a.seed))
    t_near = time.perf_counter() - t
    removed = {r.record_id for r in base} - {r.record_id for r in kept}
    print(json.dumps({
        "records": len(records), "planted_near_duplicates": len(planted),
        "baseline_s": round(t_base, 3), "near_dup_s": round(t_near, 3),
        "baseline_records_per_s": round(len(records) / t_base), "near_dup_records_per_s": round(len(records) / t_near),
        "ratio_near_over_baseline_time": round(t_near / t_base, 1),
        "recall": round(len(removed & planted) / max(1, len(planted)), 3), "false_merges": len(removed - planted),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }, indent=1))


if __name__ == "__main__":
    main()
