"""The mini preset's RL step: today's path against the fast one, in the same run, same seed and batch.

    python benchmarks/rl_step_bench.py [--model DIR] [--steps 3] [--repeats 2] [--arm tg] [--tasks DIR] [--today REF]

``--model`` is the SFT model RL starts from (HF layout + tokenizer; default: the shipped SFT coder in
``assets/sft/mini``). The RL settings are the ``mini`` preset's (``tgsuite.pipeline.presets.MINI.rl``: 1 group × 4
rollouts, 8 turns of at most 192 tokens, LocalSandbox) with ``run.steps = --steps``, on a mini train task set
(``--tasks``; default: 8 repositories × 4 tasks made with task seed 0 in a temporary folder).

Variants (each a real ``repro.train.train_rl`` run in its own process, so its peak RSS is its own; the order
alternates between repeats):

- ``today``: the code of git commit ``--today`` (default ``ffe6b74``, main when issue #35 was filed), checked out
  into a temporary folder and imported from there, with that commit's ``mini`` preset: padded ``[B, T]``
  micro-batches in float32, the episodes' tool calls and grading one after another, the host's pytest plugins loaded
  in every LocalSandbox test run;
- ``new``: this checkout and its ``mini`` preset: packed micro-batches in bf16-mixed (fp32 master weights), tool
  calls and grading on 4 threads (grading while the others sample), no host pytest plugins in the sandbox.

For each: seconds per step (``time/step_s``, every step), the split from the run's compute ledger (sampling =
``rollout``; environment = tool calls and grading not hidden behind sampling; trainer; teacher), peak RSS. Step 1
of every run starts from the same weights with the same seed, so its rollouts must match across runs and variants
(reward, tokens, turns): printed and checked.

Then, in the ``new`` process, on the documents of its last step, alternated ``--trainer-reps`` times: the RL trainer
step as ``today`` runs it, as ``new`` runs it, and the packed SFT path (``repro.sft.batch_losses`` under bf16-mixed:
forward, backward, AdamW) — tokens/s of each (student tokens per second of trainer time; the teacher's forward is
timed apart, as the ledger does).

The last line: ``rl_step speedup <X>x trainer_vs_packed <Y>x``: the median step time of ``today`` over that of
``new``, and the median RL-trainer tokens/s of ``new`` over that of the packed SFT path.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("today", "new")
STEP1_KEYS = ("reward/total", "task/pass_rate", "rollout/response_tokens", "rollout/turns")


def _config(model: str, tasks: str, arm: str, steps: int, variant: str) -> Any:
    from repro.config import load_config
    from tgsuite.pipeline.presets import MINI

    return load_config(arm=arm, overrides={**MINI.rl, "run.steps": steps, "run.seed": 0, "model.init": model,
                                           "tasks.path": tasks})


def _trainer_rates(cfg_new: Any, plan: Any, model: Any, pad_id: int, reps: int, arm: str) -> dict[str, list[float]]:
    """Student tokens per second of trainer time on ``plan``'s documents: the RL trainer as ``today`` and as
    ``new`` run it, and the packed SFT path, alternated ``reps`` times (each on its own copy of the weights)."""
    import torch

    from repro.compute import ComputeLedger
    from repro.sft import batch_losses
    from repro.train import optimizer_step
    from repro.trainer_step import LossRoot

    docs = [(t.ids, [1 if p in set(t.act_pos) else 0 for p in range(len(t.ids))]) for t in plan.trajs]
    n_tok = sum(len(ids) for ids, _ in docs)
    cfg_today = cfg_new.model_copy(update={
        "optim": cfg_new.optim.model_copy(update={"padding_free": False}),
        "model": cfg_new.model.model_copy(update={"precision": "fp32"})})

    def rl(cfg: Any) -> Any:
        lm = copy.deepcopy(model).train()
        root = LossRoot(lm, cfg)
        opt = torch.optim.AdamW(lm.parameters(), lr=cfg.optim.lr)

        def step() -> float:
            t0 = time.perf_counter()
            _, teacher_s = optimizer_step(root, cfg, plan, opt, pad_id, ComputeLedger(), 0)
            return n_tok / (time.perf_counter() - t0 - teacher_s)
        return step

    def sft() -> Any:
        lm = copy.deepcopy(model).train()
        opt = torch.optim.AdamW(lm.parameters(), lr=1e-4)

        def step() -> float:
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            nll, n, _, _ = batch_losses(lm, docs, precision="bf16-mixed")
            (nll / max(1, n)).backward()
            torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
            opt.step()
            return n_tok / (time.perf_counter() - t0)
        return step

    paths = {"trainer_today": rl(cfg_today), "trainer_new": rl(cfg_new), "sft_packed": sft()}
    for fn in paths.values():
        fn()  # warm-up (AdamW state, oneDNN kernels)
    out: dict[str, list[float]] = {k: [] for k in paths}
    for r in range(reps):
        for k in (list(paths) if r % 2 == 0 else list(reversed(paths))):
            out[k].append(paths[k]())
    return out


def worker(args: argparse.Namespace) -> None:
    """One variant's RL run (in its own process); prints one JSON line."""
    from repro import train as train_mod
    from repro.rl_setup import default_setup
    from repro.track import read_metrics

    cfg = _config(args.model, args.tasks, args.arm, args.steps, args.worker)
    setup = default_setup(cfg)
    captured: dict[str, Any] = {}
    build = train_mod.build_batch

    def capture(groups: Any, c: Any, hint_ids: Any) -> Any:  # keep the last step's batch for the trainer timing
        captured["plan"] = build(groups, c, hint_ids)
        return captured["plan"]

    train_mod.build_batch = capture
    out = Path(args.out)
    t0 = time.perf_counter()
    train_mod.train_rl(cfg, out, setup=setup)
    wall = time.perf_counter() - t0
    rows = read_metrics(out / "metrics.jsonl")
    ledger = json.loads((out / "manifest.json").read_text())["compute"]
    rec: dict[str, Any] = {
        "variant": args.worker, "wall_s": wall, "step_s": [r["time/step_s"] for r in rows],
        "ledger_wall_s": ledger["wall_s"], "ledger_tokens": ledger["tokens"],
        "step1": {k: rows[0].get(k) for k in STEP1_KEYS},
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if args.worker == "new" and args.trainer_reps > 0:
        rec["trainer_tps"] = _trainer_rates(cfg, captured["plan"], setup.model, setup.tokenizer.pad_token_id,
                                            args.trainer_reps, args.arm)
    print("RESULT " + json.dumps(rec), flush=True)


def _checkout(ref: str, dest: Path) -> Path:
    """The tree of commit ``ref`` in ``dest`` (git archive: no worktree bookkeeping left behind)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _run_variant(args: argparse.Namespace, variant: str, out: Path, tree: Path) -> dict[str, Any]:
    """One run in its own process, importing the packages of ``tree`` (this checkout, or the ``--today`` commit)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", variant, "--out", str(out), "--model", args.model, "--tasks",
           args.tasks, "--steps", str(args.steps), "--arm", args.arm, "--trainer-reps", str(args.trainer_reps)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"{variant} run failed (exit {proc.returncode})")
    return json.loads(line[len("RESULT "):])


def _split(rec: dict[str, Any]) -> str:
    w = rec["ledger_wall_s"]
    parts = {"sampling": w.get("rollout", 0.0), "environment": w.get("environment", 0.0),
             "trainer": w.get("trainer", 0.0), "teacher": w.get("teacher", 0.0)}
    total = sum(parts.values()) or 1.0
    return ", ".join(f"{k} {v:.1f} s ({100 * v / total:.0f} %)" for k, v in parts.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "assets" / "sft" / "mini"), help="the SFT model RL starts from")
    ap.add_argument("--tasks", help="a mini train task set (default: 8 repos x 4 tasks, task seed 0, made here)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each variant (alternating order)")
    ap.add_argument("--arm", default="tg")
    ap.add_argument("--trainer-reps", type=int, default=5, help="alternated trainer timings (0 = skip)")
    ap.add_argument("--today", default="ffe6b74", help="the git commit whose code is 'today' (default: main when "
                    "issue #35 was filed)")
    ap.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if not (Path(args.model) / "config.json").is_file():
        raise SystemExit(f"--model {args.model}: no config.json there; pass an SFT model directory (tgsuite train sft "
                         "--preset mini --out DIR writes DIR/model)")
    with tempfile.TemporaryDirectory(prefix="rl-step-bench-") as tmp:
        trees = {"today": _checkout(args.today, Path(tmp) / "today-tree"), "new": ROOT}
        args.model = str(Path(args.model).resolve())
        if args.tasks is None:
            from harness.minirepos import make_mini

            args.tasks = str(Path(tmp) / "tasks")
            make_mini(Path(args.tasks), split="train", repos=8, tasks_per_repo=4, seed=0)
        results: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
        for r in range(args.repeats):
            for v in (list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))):
                rec = _run_variant(args, v, Path(tmp) / f"{v}-{r}", trees[v])
                results[v].append(rec)
                print(f"{v:6s} run {r}: steps {', '.join(f'{s:.1f}' for s in rec['step_s'])} s; {_split(rec)}; "
                      f"peak RSS {rec['peak_rss_mb']:.0f} MB", flush=True)
    med = {v: statistics.median([s for rec in recs for s in rec["step_s"]]) for v, recs in results.items()}
    first = results["today"][0]["step1"]
    same = all(rec["step1"] == first for recs in results.values() for rec in recs)
    print(f"step 1 rollouts (same weights, same seed): {first} -> "
          f"{'identical in every run' if same else 'DIFFER: ' + str([r['step1'] for r in results['new']])}")
    tps = {k: statistics.median([x for rec in results["new"] for x in rec.get("trainer_tps", {}).get(k, [])] or [0])
           for k in ("trainer_today", "trainer_new", "sft_packed")}
    print(f"trainer tokens/s on the same documents: today {tps['trainer_today']:.0f}, new {tps['trainer_new']:.0f} "
          f"({tps['trainer_new'] / max(tps['trainer_today'], 1e-9):.2f}x), packed SFT path {tps['sft_packed']:.0f}")
    print(f"median step: today {med['today']:.1f} s, new {med['new']:.1f} s")
    print(f"rl_step speedup {med['today'] / med['new']:.2f}x trainer_vs_packed "
          f"{tps['trainer_new'] / max(tps['sft_packed'], 1e-9):.2f}x")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
