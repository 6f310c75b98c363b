"""``tgsuite report``: render an analysis into a self-contained HTML report folder."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tgsuite.commands.common import CLIError

EPILOG = """\
worked example, any run without a plan (a descriptive report, marked "NO PREREGISTERED DECISION"):
  tgsuite eval --tasks tasks/mini-heldout --policy oracle --policy null --out runs/oracle-vs-null
  tgsuite report runs/oracle-vs-null                # → runs/oracle-vs-null/report/index.html
  It shows per arm the rates of code_ok / behaviour_ok / joint_ok with Wilson 95% CIs, the behaviour x code 2x2,
  a per-repository table, secondary metrics, what the episodes reached and every trajectory; it compares nothing.
  Also for `tgsuite grade` run directories (predictions from another harness).

worked example with a preregistered plan:
  # 1. analyse the evaluation runs against the frozen plan (writes analysis.json)
  tgsuite analyze --protocol prereg/my_plan.frozen.json --runs runs/eval-tg-grpo --out analysis.json
  # 2. render the report; the run directories named inside analysis.json are found automatically
  tgsuite report --analysis analysis.json --protocol prereg/my_plan.frozen.json --out report/ \\
      --training tg:0=runs/train-tg-s0 --training tg:1=runs/train-tg-s1 \\
      --training grpo:0=runs/train-grpo-s0 --training grpo:1=runs/train-grpo-s1
  # 3. open it (works from file://, needs no network)
  xdg-open report/index.html

what you get in --out:
  index.html            the report: verdict banner, criteria, forest plot, 2x2 behaviour x code tables, variance
                        split, sensitivity analyses, training curves, studies, preregistration, provenance, and a
                        pageable table of every episode
  trajectories/*.html   one page per episode (messages, tool calls, diff, grading log), for at most
                        --max-trajectory-pages episodes (a stratified sample above that; the table says which)
  summary.json          verdict and criteria for CI; summary.md the same as Markdown for a pull-request comment

The report only formats what analysis.json holds; it never recomputes a statistic.
"""


def _training_arg(text: str) -> tuple[str, str, Path]:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+):([0-9]+)=(.+)", text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected ARM:SEED=DIR, e.g. tg:0=runs/train-tg-s0 (DIR holds metrics.jsonl)"
        )
    return m.group(1), m.group(2), Path(m.group(3))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="render a self-contained HTML report (of analysis.json, or of one run without a plan)",
        description="Render an analysis (from `tgsuite analyze`) into index.html, trajectory pages, summary.json "
        "and summary.md; or, given only RUN_DIR, a descriptive report of one run (no plan, no decision).", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", nargs="?", type=Path, default=None, metavar="RUN_DIR",
                   help="a run directory (`tgsuite eval`/`grade --out`) for a descriptive report without a plan")
    p.add_argument("--analysis", type=Path, default=None, help="analysis.json written by `tgsuite analyze`")
    p.add_argument("--out", type=Path, default=None,
                   help="folder to write the report into (created if needed; default RUN_DIR/report without a plan)")
    p.add_argument("--protocol", type=Path, default=None,
                   help="the frozen protocol JSON (`tgsuite protocol freeze`); shows the plan and re-checks its hash")
    p.add_argument("--run-dir", action="append", type=Path, default=[], metavar="DIR",
                   help="evaluation run directory (repeatable); default: the runs named in analysis.json")
    p.add_argument("--training", action="append", type=_training_arg, default=[], metavar="ARM:SEED=DIR",
                   help="training run directory holding metrics.jsonl, per arm and seed (repeatable)")
    p.add_argument("--max-trajectory-pages", type=int, default=500, metavar="N",
                   help="write trajectory pages for at most N episodes (default 500)")
    p.add_argument("--fail-unless-ship", action="store_true",
                   help="exit with status 1 when the verdict is not SHIP (for CI gates)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.rundir import RunDirError
    from reports.build import ReportInputError, build_report  # imported late: keeps `tgsuite --help` fast
    from reports.training import MetricsError

    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise CLIError(f"--out {args.out} is a file; fix: give a folder for the report (it is created), e.g. "
                       f"--out {Path(args.out).with_suffix('')}-report")
    if args.max_trajectory_pages < 0:
        raise CLIError("--max-trajectory-pages must be >= 0 (0 writes no trajectory pages)")
    if (args.run is None) == (args.analysis is None):
        raise CLIError("give either RUN_DIR (a descriptive report, no plan) or --analysis analysis.json (the "
                       "preregistered report); fix: e.g. `tgsuite report runs/my-run`")
    if args.run is not None:
        return _descriptive(args)
    if args.out is None:
        raise CLIError("--out is required with --analysis; fix: e.g. --out report/")
    training: dict[str, dict[str, Path]] = {}
    for arm, seed, path in args.training:
        if seed in training.setdefault(arm, {}):
            raise CLIError(f"--training {arm}:{seed} given twice; give each arm and seed once")
        training[arm][seed] = path
    try:
        summary = build_report(
            args.analysis, out_dir=args.out, protocol=args.protocol, run_dirs=args.run_dir,
            training_metrics=training or None, max_trajectory_pages=args.max_trajectory_pages,
        )
    except (ReportInputError, RunDirError, MetricsError) as exc:
        raise CLIError(str(exc)) from exc
    print(f"{summary.verdict}: {args.out / 'index.html'} ({summary.n_episodes:,} episodes, "
          f"{summary.n_trajectory_pages:,} trajectory pages)")
    for w in summary.warnings:
        print(f"warning: {w}")
    return 1 if args.fail_unless_ship and summary.verdict != "SHIP" else 0


def _descriptive(args: argparse.Namespace) -> int:
    """The report of one run directory without a plan (``reports.descriptive``)."""
    from evalsuite.outcomes import EvalDataError
    from evalsuite.run_summary import AGGREGATE_FILE, aggregate_run_dir
    from evalsuite.schema import RunAggregate
    from harness.rundir import RunDirError
    from reports.build import build_descriptive_report

    if args.protocol is not None or args.training or args.fail_unless_ship or args.run_dir:
        raise CLIError("--protocol, --training, --run-dir and --fail-unless-ship need --analysis; a RUN_DIR report "
                       "has no plan and no verdict")
    old = args.run / AGGREGATE_FILE
    try:
        config = RunAggregate.model_validate_json(old.read_text()).config if old.is_file() else None
    except ValueError as exc:
        raise CLIError(f"{old}: not an aggregate ({str(exc).splitlines()[0]}); fix: delete it to recompute") from None
    out = args.out or args.run / "report"
    try:
        agg = aggregate_run_dir(args.run, config=config)
        n_eps, n_pages = build_descriptive_report(args.run, agg, out_dir=out,
                                                  max_trajectory_pages=args.max_trajectory_pages)
    except (EvalDataError, RunDirError) as exc:
        raise CLIError(str(exc)) from exc
    print(f"NO PREREGISTERED DECISION (descriptive): {out / 'index.html'} ({n_eps:,} episodes, "
          f"{n_pages:,} trajectory pages)")
    return 0
