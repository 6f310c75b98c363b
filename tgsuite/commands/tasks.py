"""``tgsuite tasks``: make the mini task family and validate task sets."""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path

from harness.sandbox import SANDBOX_KINDS
from tgsuite.commands.common import CLIError

log = logging.getLogger(__name__)

TASKS_EPILOG = """\
examples (each sub-command's --help has more):
  tgsuite tasks make-mini --out tasks/mini-heldout --split heldout --repos 4 --tasks-per-repo 3
  tgsuite tasks make-heldout --preset mini --dev --out tasks/mini-dev   # the stratified set, dev seed
  tgsuite tasks validate tasks/mini-heldout          # gold x3 / empty x3 in Docker -> validation.json
  tgsuite tasks import-swebench --records records.jsonl --repos clones/ --out tasks/swe
"""

MAKE_MINI_EPILOG = """\
examples:
  # 2000 train tasks (500 repositories x 4 bugs) and a held-out set, each byte-identical for its seed
  $ tgsuite tasks make-mini --out tasks/mini-train --split train --repos 500 --tasks-per-repo 4 --seed 0 \\
        --snapshot-format tar.gz
  wrote 2000 tasks from 500 repositories to tasks/mini-train in 51.5 s
  (measured on a busy 2-core machine: 6.5 s of CPU, the rest waiting for the disk and other processes)
  $ tgsuite tasks make-mini --out tasks/mini-heldout --split heldout --repos 20 --tasks-per-repo 3 --seed 0 \\
        --self-check 5
  wrote 60 tasks from 20 repositories to tasks/mini-heldout in 2.7 s
  self-check (host python, 5 sampled tasks): 5 ok

What you get: DIR/tasks.jsonl (one SWE-bench-style record per task: problem_statement, patch, test_patch,
FAIL_TO_PASS, PASS_TO_PASS, plus split, difficulty, bug_family, template_tier) and DIR/snapshots/<instance_id>/
(the repository with the bug, visible tests included; hidden tests live only in test_patch).
Held-out repositories never occur in a train split (names are partitioned by a hash bit); held-out tasks are tagged
template_tier=seen_templates or unseen_templates (module templates and function names no train task uses).
Next: `tgsuite tasks validate DIR` (gold x3 / empty x3 in Docker), then `tgsuite eval`.
"""

MAKE_HELDOUT_EPILOG = """\
examples:
  # the tuning set: the mini preset's held-out design at its dev seed (use this for every choice)
  $ tgsuite tasks make-heldout --preset mini --dev --out tasks/mini-dev
  # the preregistered primary set (what `tgsuite reproduce --preset mini` freezes); against a train set on disk
  $ tgsuite tasks make-heldout --preset mini --train-tasks runs/mini/tasks/train --out tasks/mini-primary

What you get: OUT/ (the primary set: the preset's repositories from the TRAINING template families, with held-out
repository names and new, made-up module names; per repository a fixed number of tasks whose gold fix changes the
same lines as a task of the preset's training set, stratum "twin", and of tasks whose fix has no such twin, stratum
"no_twin") and, when the design has one, OUT-generalization/ (repositories from templates no training task uses,
stratum "generalization": reported on its own, never part of a primary endpoint). Each record's `stratum` field says
which. Without --train-tasks the training set is regenerated in memory from the preset (train_repos,
train_tasks_per_repo, task_seed; deterministic). See docs/HARNESS.md, "The primary held-out set".
Next: `tgsuite tasks validate OUT`.
"""

VALIDATE_EPILOG = """\
examples:
  $ tgsuite tasks validate tasks/mini-heldout                       # Docker, gold x3 and empty x3 per task
  $ tgsuite tasks validate tasks/mini-heldout --sandbox local --runs 1 --instance acme-labs__brisk-otter-1

Writes DIR/validation.json. Rejected instances (with the reason) are skipped by `tgsuite eval`; flaky tests are
excluded. Exit code 0 when every instance is valid, 1 when some were rejected.
"""


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (``--workers``, ``--runs``, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _make_mini(args: argparse.Namespace) -> int:
    from harness.minirepos import make_mini

    out = Path(args.out)
    if (out / "tasks.jsonl").exists() and not args.overwrite:
        raise CLIError(f"{out} already holds a task set; choose another --out or pass --overwrite to replace it")
    t0 = time.perf_counter()
    summary = make_mini(out, split=args.split, repos=args.repos, tasks_per_repo=args.tasks_per_repo,
                        seed=args.seed, overwrite=args.overwrite, snapshot_format=args.snapshot_format)
    dt = time.perf_counter() - t0
    print(f"wrote {summary.tasks} tasks from {summary.repos} repositories to {out} in {dt:.1f} s")
    if summary.tasks < summary.requested:
        print(f"note: {summary.requested - summary.tasks} fewer tasks than asked: some repositories had fewer "
              "detectable bugs than --tasks-per-repo (see the log)")
    if args.verbose_summary:
        print(json.dumps({"families": summary.families, "tiers": summary.tiers}, indent=1))
    if args.self_check:
        return _self_check(out, args.self_check, args.seed)
    return 0


def _make_heldout(args: argparse.Namespace) -> int:
    from tgsuite.pipeline.heldout import train_signatures_of, write_heldout
    from tgsuite.pipeline.presets import PRESETS

    preset = PRESETS.get(args.preset)
    if preset is None:
        raise CLIError(f"unknown preset {args.preset!r}; choose one of {sorted(PRESETS)}")
    if preset.heldout is None:
        raise CLIError(f"preset {preset.name!r} has no stratified held-out design (Preset.heldout); use "
                       "`tgsuite tasks make-mini` for it")
    out = Path(args.out)
    gen_out = Path(args.generalization_out) if args.generalization_out else out.with_name(out.name + "-generalization")
    for folder in (out, gen_out):
        if (folder / "tasks.jsonl").exists() and not args.overwrite:
            raise CLIError(f"{folder} already holds a task set; choose another --out or pass --overwrite")
    t0 = time.perf_counter()
    try:
        sigs = train_signatures_of(Path(args.train_tasks) if args.train_tasks else None, repos=preset.train_repos,
                                   tasks_per_repo=preset.train_tasks_per_repo, seed=preset.task_seed)
        rec = write_heldout(preset.heldout, sigs, out, gen_out, dev=args.dev, overwrite=args.overwrite)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    strata = ", ".join(f"{k} {v}" for k, v in sorted((rec.strata or {}).items()))
    which = f"dev seed {rec.seed}" if args.dev else f"preregistered held-out seed {rec.seed}"
    print(f"wrote the primary set ({rec.n} tasks: {strata}; {which}) to {out}")
    if rec.generalization is not None:
        print(f"wrote the generalization tier ({rec.generalization.n} tasks) to {gen_out}")
    print(f"in {time.perf_counter() - t0:.1f} s")
    return 0


def _self_check(out: Path, count: int, seed: int) -> int:
    from harness.minirepos.selfcheck import check_instance
    from harness.tasks import load_task_set

    ts = load_task_set(out)
    sample = random.Random(f"self-check:{seed}").sample(ts.instances, min(count, len(ts.instances)))
    bad = [r for r in (check_instance(ts.path, inst) for inst in sample) if not r.ok]
    print(f"self-check (host python, {len(sample)} sampled tasks): {len(sample) - len(bad)} ok")
    for r in bad:
        print(f"  FAILED {r.instance_id}: {'; '.join(r.problems)}")
    return 1 if bad else 0


def _validate(args: argparse.Namespace) -> int:
    import os
    import sys

    from harness.run_control import RunInterrupted
    from harness.sandbox import SandboxUnavailable
    from harness.tasks import TaskSetError, load_task_set
    from harness.validate import validate_task_set

    try:
        ts = load_task_set(args.dir)
    except TaskSetError as exc:
        raise CLIError(str(exc)) from None
    try:
        report = validate_task_set(args.dir, runs=args.runs, sandbox=args.sandbox, workers=args.workers,
                                   instance_ids=args.instance or None, out=args.out, task_set=ts,
                                   grade_timeout_s=args.timeout, progress=True)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    except SandboxUnavailable as exc:
        raise CLIError(f"sandbox preflight failed ({exc.kind}): {exc}") from None
    except RunInterrupted as exc:  # the factory's containers are already removed (validate_task_set)
        print(f"tgsuite tasks validate: {exc}; no validation.json written and this run's containers removed. "
              "Run the same command again.", file=sys.stderr)
        sys.stderr.flush()
        os._exit(exc.exit_code)
    rejected = report.rejected
    print(f"validated {len(report.instances)} instances ({args.sandbox}, {args.runs} runs each): "
          f"{len(report.instances) - len(rejected)} valid, {len(rejected)} rejected")
    for r in rejected:
        print(f"  REJECTED {r.instance_id}: {r.reason}")
    print(f"task set {ts.name}: sha256 {ts.sha256}  (a plan pins it as [task_set] name = {json.dumps(ts.name)}, "
          f"sha256 = \"{ts.sha256}\")")
    return 1 if rejected else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="make the mini task family; import SWE-bench records; validate",
                                   description=__doc__, epilog=TASKS_EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)

    mk = sub.add_parser(
        "make-mini", help="generate mini repositories with one planted bug per task",
        description="Generate the mini task family: small Python repositories (2-4 modules) with one planted bug "
                    "per task from 10 bug families, issue-style problem statements, visible tests, hidden tests "
                    "and gold patches.",
        epilog=MAKE_MINI_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mk.add_argument("--out", required=True, help="folder to write (tasks.jsonl + snapshots/)")
    mk.add_argument("--split", required=True, choices=("train", "heldout"), help="which split to generate")
    mk.add_argument("--repos", type=positive_int, required=True, help="number of repositories")
    mk.add_argument("--tasks-per-repo", type=positive_int, required=True, help="tasks (planted bugs) per repository")
    mk.add_argument("--seed", type=int, default=0, help="generation seed (same seed, same bytes; default 0)")
    mk.add_argument("--overwrite", action="store_true", help="replace a task set already in --out")
    mk.add_argument("--snapshot-format", choices=("dir", "tar.gz"), default="dir",
                    help="dir: a browsable folder per task (default); tar.gz: one archive per task, much faster "
                         "to write and load for thousands of tasks")
    mk.add_argument("--self-check", type=int, default=0, metavar="K",
                    help="afterwards run K sampled tasks' hidden tests on base and gold with the host python")
    mk.add_argument("--verbose-summary", action="store_true", help="print counts per bug family and tier")
    mk.set_defaults(func=_make_mini)

    mh = sub.add_parser(
        "make-heldout", help="generate a preset's stratified primary held-out set and its generalization tier",
        description="Generate the primary held-out set of a preset's design (Preset.heldout): new repositories "
                    "from the training template families with new module names, a fixed number of tasks per "
                    "stratum (fix twin in the training set or not), plus the unseen-template generalization tier.",
        epilog=MAKE_HELDOUT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mh.add_argument("--preset", required=True, help="preset whose design and training set to use (e.g. mini)")
    mh.add_argument("--out", required=True, help="folder for the primary set")
    mh.add_argument("--generalization-out", default=None, help="folder for the generalization tier "
                    "(default: OUT-generalization)")
    mh.add_argument("--dev", action="store_true", help="use the design's dev seed (for tuning) instead of the "
                    "preregistered held-out seed")
    mh.add_argument("--train-tasks", default=None, metavar="DIR", help="the training task set the strata are "
                    "measured against (default: regenerate the preset's in memory)")
    mh.add_argument("--overwrite", action="store_true", help="replace task sets already there")
    mh.set_defaults(func=_make_heldout)

    va = sub.add_parser(
        "validate", help="gold x N / empty x N gate; writes validation.json",
        description="Validate a task set: grade the gold patch and the empty patch N times per instance in fresh "
                    "sandboxes; reject broken instances and exclude flaky tests.",
        epilog=VALIDATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    va.add_argument("dir", help="task set folder (tasks.jsonl + snapshots/)")
    va.add_argument("--runs", type=positive_int, default=3, help="gold and empty runs per instance (default 3)")
    va.add_argument("--sandbox", choices=SANDBOX_KINDS, default="docker",
                    help="docker (isolated, default) or local (NOT isolated; for machines without Docker)")
    va.add_argument("--workers", type=positive_int, default=1, help="instances validated in parallel (default 1)")
    va.add_argument("--instance", action="append", metavar="ID", help="only this instance (repeatable)")
    va.add_argument("--out", default=None, help="report path (default DIR/validation.json)")
    va.add_argument("--timeout", type=float, default=900.0, help="seconds per grading run (default 900)")
    va.set_defaults(func=_validate)

    from tgsuite.commands.tasks_import import register_import

    register_import(sub)
