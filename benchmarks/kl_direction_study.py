"""The KL-direction study (issue #34, item 2): targeted guidance with the reverse KL, the forward KL and JSD × λ ×
seeds, and GRPO (λ = 0) per seed as the reference, each trained from the same start model with the preset's RL
settings; training-time curves (behaviour compliance, pass rate, tool-call validity, gradient norm of each loss
term), P(heading) at held-out finish contexts for the start model and every final checkpoint, unprompted and with
the hint (docs/METHOD.md, "The KL-direction study"; ``tgsuite.pipeline.kl_study``).

    python benchmarks/kl_direction_study.py --out runs/kl_direction                    # mini: 3 × 3 × 3 + 3 runs
    python benchmarks/kl_direction_study.py --out runs/kl_direction --start DIR        # another start model
    python benchmarks/kl_direction_study.py --out runs/kl_tiny --preset smoke --start DIR \\
        --directions reverse,forward --lambdas 0.1 --seeds 0 --steps 1 --probe-contexts 2   # a tiny check

Re-running the same command resumes (finished runs and probes are skipped). It writes OUT/kl_direction.json (every
run's curves and summary, the tables) and OUT/kl_direction.md (one table per metric, direction × λ, mean ± sd over
seeds, the GRPO reference row, and the mean curves) and prints the Markdown. Exploratory: it chooses the tg arm's
defaults and never enters a decision.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: give a comma list of numbers, e.g. 0.03,0.1,0.3") from exc


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: give a comma list of integers, e.g. 0,1,2") from exc


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="output folder (created; re-use it to resume)")
    p.add_argument("--preset", choices=["mini", "smoke"], default="mini",
                   help="RL settings, task-set sizes and expert settings (tgsuite.pipeline.presets)")
    p.add_argument("--start", default=None, help="the model RL starts from: a model folder or sft:<name> "
                   "(default: the preset's shipped SFT coder, mini: sft:mini = assets/sft/mini)")
    p.add_argument("--directions", type=_names, default=("reverse", "forward", "jsd"),
                   help="comma list of reverse, forward, jsd (default: all three)")
    p.add_argument("--lambdas", type=_floats, default=(0.03, 0.1, 0.3), help="comma list of λ > 0 (default "
                   "0.03,0.1,0.3)")
    p.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="training seeds (default 0,1,2)")
    p.add_argument("--steps", type=int, default=None, help="RL steps per run (default: the preset's run.steps)")
    p.add_argument("--no-reference", action="store_true", help="skip the grpo (λ = 0) reference runs")
    p.add_argument("--dev-task-seed", type=int, default=1, help="task seed of the dev held-out set the probe "
                   "contexts come from; never the preset's held-out seed (default 1)")
    p.add_argument("--probe-contexts", type=int, default=40, help="expert episodes on the dev held-out set, one "
                   "finish context each when it finishes (default 40)")
    p.add_argument("--window", type=int, default=None, help="last-window steps of the tables (default: half the "
                   "steps)")
    p.add_argument("--force", action="append", default=[], metavar="STAGE",
                   help="re-run this stage even if it is up to date (repeatable; 'all' for every stage)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from pydantic import ValidationError

    from tgsuite.pipeline.kl_study import KLStudySpec, run_kl_study
    from tgsuite.pipeline.presets import PRESETS

    preset = PRESETS[args.preset]
    start = args.start or preset.sft_start
    if start is None:
        sys.exit(f"--preset {args.preset} ships no SFT start model; give --start DIR (a model folder)")
    try:
        spec = KLStudySpec(start=start, directions=args.directions, lambdas=args.lambdas, seeds=args.seeds,
                           steps=args.steps, reference=not args.no_reference, dev_task_seed=args.dev_task_seed,
                           probe_contexts=args.probe_contexts, window=args.window)
    except ValidationError as exc:
        sys.exit(f"bad study settings: {exc}")
    from repro.pretrain.ship import BaseIntegrityError

    try:
        record = run_kl_study(preset, spec, args.out, force=frozenset(args.force))
    except (BaseIntegrityError, ValueError) as exc:  # a missing shipped start, a bad start folder or dev seed
        sys.exit(str(exc))
    ran = sum(v["wall_s"] for v in record["stages"].values() if not v["skipped"])
    print((Path(args.out) / "kl_direction.md").read_text())
    print(f"\nWritten: {args.out}/kl_direction.json, {args.out}/kl_direction.md ({ran:.0f} s of stages run in "
          "this call; per-stage times in the JSON's 'stages')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
