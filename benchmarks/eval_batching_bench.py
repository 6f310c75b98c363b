"""Benchmark: held-out evaluation throughput with turns batched across episodes (``repro.batching``) and prompt
prefixes reused across turns (``repro.prefix_cache``) vs the plain sampler, one request at a time.

Both modes run the SAME episodes (same instances, arm, seeds, limits; LocalSandbox by default) through
``harness.runner.run_eval`` with a ``SamplerPolicy`` over a trained checkpoint:

- baseline: ``KVSampler`` served one request at a time (the runner locks a policy that is not thread-safe), with
  ``--baseline-workers`` episode threads (tool calls overlap, generation does not) — what evaluation did before;
- batched: ``BatchingEngine(KVSampler(prefix_cache=2 × workers))`` with ``--workers`` episode threads, their turns
  sampled as one batch, each turn prefilling only what the last one did not.

Prints wall time, episodes/s, the ratio batched/baseline, the mean rows per batch, the share of prompt tokens reused, the resolved counts (they may
differ: a batch changes float rounding, so a near-tie can flip a sampled token) and the peak RSS. Example:

    .venv/bin/python benchmarks/eval_batching_bench.py --checkpoint OUT/sft/model --tasks OUT/tasks/heldout \
        --instances 16 --max-turns 8 --max-new-tokens 160
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path


def _run(policy, ts, out: Path, workers: int, a: argparse.Namespace) -> tuple[float, list]:
    from harness.interfaces import EpisodeLimits
    from harness.runner import run_eval
    from harness.runner_sandbox import TaskSandboxFactory

    t = time.perf_counter()
    with TaskSandboxFactory(ts, kind=a.sandbox, run_id=out.name) as fac:
        res = run_eval(ts, {"sft": policy}, [0], out, sandbox_factory=fac, workers=workers,
                       limits=EpisodeLimits(max_turns=a.max_turns), order="arm")
    return time.perf_counter() - t, res


def main() -> None:
    from harness.sandbox import SANDBOX_KINDS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="model directory (HF layout + tokenizer), e.g. an SFT output")
    ap.add_argument("--tasks", required=True, help="held-out task-set directory")
    ap.add_argument("--instances", type=int, default=16)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--baseline-workers", type=int, default=2)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--sandbox", default="local", choices=SANDBOX_KINDS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--window", type=float, default=0.05, help="BatchingEngine.window_s")
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from harness.schema import TaskSet
    from harness.tasks import load_task_set
    from repro.batching import BatchingEngine
    from repro.sampler import KVSampler, SamplerPolicy
    from repro.tokenizer import load_tokenizer

    torch.set_num_threads(a.threads)
    full = load_task_set(a.tasks)
    ts = TaskSet(name=full.name, path=full.path, sha256=full.sha256, instances=full.instances[:a.instances])
    model = AutoModelForCausalLM.from_pretrained(a.checkpoint).eval()
    tok = load_tokenizer(a.checkpoint)
    kw = {"name": "sft", "max_new_tokens": a.max_new_tokens, "temperature": 1.0}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        wall_b, res_b = _run(SamplerPolicy(KVSampler(model), tok, **kw), ts, Path(tmp) / "baseline",
                             a.baseline_workers, a)
        with BatchingEngine(KVSampler(model, prefix_cache=2 * a.workers), max_batch=a.workers,
                            window_s=a.window) as eng:
            wall_x, res_x = _run(SamplerPolicy(eng, tok, **kw), ts, Path(tmp) / "batched", a.workers, a)
            mean_rows = eng.stats.mean_rows
            reuse = eng.engine.prefix.stats.reuse_rate  # type: ignore[union-attr]
    for name, wall, res, workers in (("baseline", wall_b, res_b, a.baseline_workers),
                                     ("batched", wall_x, res_x, a.workers)):
        rows[name] = {"workers": workers, "episodes": len(res), "wall_s": round(wall, 1),
                      "episodes_per_s": round(len(res) / wall, 4), "resolved": sum(r.resolved for r in res),
                      "steps": sum(r.metrics.steps for r in res), "tokens": sum(r.metrics.tokens for r in res)}
    rows["batched"]["mean_rows_per_batch"] = round(mean_rows, 2)
    rows["batched"]["prompt_tokens_reused"] = round(reuse, 3)
    print(json.dumps(rows, indent=1))
    print(f"ratio batched/baseline (episodes/s): {rows['batched']['episodes_per_s'] / rows['baseline']['episodes_per_s']:.2f}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
