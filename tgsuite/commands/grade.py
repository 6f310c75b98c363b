"""``tgsuite grade``: grade another harness's predictions (SWE-bench format) with eval's grading procedure."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from harness.sandbox import SANDBOX_KINDS
from tgsuite.commands.common import CLIError
from tgsuite.commands.tasks import positive_int

log = logging.getLogger(__name__)

EPILOG = """\
worked example (grade the gold patches of a mini task set, as a predictions file from any agent would be):
  tgsuite tasks make-mini --out tasks/mini-heldout --split heldout --repos 2 --tasks-per-repo 2
  python -c "import json; [print(json.dumps({'instance_id': t['instance_id'], 'model_name_or_path': 'gold', \\
      'model_patch': t['patch']})) for t in map(json.loads, open('tasks/mini-heldout/tasks.jsonl'))]" > preds.jsonl
  tgsuite grade --tasks tasks/mini-heldout --predictions preds.jsonl --out runs/grade-gold
  tgsuite analyze ... / tgsuite report runs/grade-gold     # the run directory reads like an eval run

Input: SWE-bench's predictions format, JSON Lines (or a JSON list, or SWE-agent's {instance_id: prediction}) of
  {"instance_id": "...", "model_name_or_path": "my-agent", "model_patch": "diff --git ..."}
one model per file; other fields are kept. Every predicted instance must be in --tasks.

Output (RUN_DIR): SWE-bench's run report <model>.<RUN_DIR's folder name>.json, with swebench 5.0.2's keys
(resolved_ids, unresolved_ids, error_ids, empty_patch_ids, completed_ids, incomplete_ids, submitted_ids,
infra_failure_ids, ambiguous_failure_ids, their counts, failure_reasons; a patch that does not apply, a
whitespace-only one included, is an error there, as in SWE-bench), and eval's layout: manifest.json,
episodes/<id>/<arm>/s0/a<k>/{patch.diff, grade/, result.json}, results.jsonl, aggregate.json (arm = --arm,
default the model name with '/' as '__'; no behaviour is judged: there is no conversation, so only the coding
endpoint means something in `analyze`).
Each patch is graded exactly as `tgsuite eval` grades an agent's patch: a fresh sandbox, the hidden tests, the gold
control run for an invalid grade, infrastructure errors retried and never scored. Instances rejected by
validation.json are not graded (they count as errors). Resume: run the same command again (a folder that
graded another patch for a predicted instance is refused: grade an edited predictions file into a new --out).
--out must be a new or empty folder, or a `tgsuite grade` run folder (resumed); never the task set's folder.
SIGINT / SIGTERM stop the run at once: graded patches are kept, this run's containers are removed (exit 130 / 143).
"""


def _arm(text: str) -> str:
    from harness.runner_arms import ARM_NAME

    if not ARM_NAME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} must match {ARM_NAME.pattern} (it becomes a folder name: no "
                                         "'/' or spaces); fix: e.g. --arm tg@s0")
    return text


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "grade", help="grade a predictions file (SWE-bench format) from any agent",
        description="Grade each model_patch of a SWE-bench predictions file on a task set, in fresh sandboxes, "
                    "and write SWE-bench's report JSON plus a run directory that `analyze` and `report` read.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tasks", required=True, metavar="DIR", help="task set folder (with tasks.jsonl)")
    p.add_argument("--predictions", required=True, metavar="FILE",
                   help="predictions: JSON Lines, a JSON list or {instance_id: prediction}")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory (created, or resumed)")
    p.add_argument("--arm", default=None, metavar="NAME", type=_arm,
                   help="arm name of the results (default: the model name, '/' as '__'); for `tgsuite analyze` "
                        "name it after the plan's arm and training seed, e.g. --arm tg@s0")
    p.add_argument("--workers", type=positive_int, default=1, help="patches graded at once (default 1)")
    p.add_argument("--sandbox", choices=SANDBOX_KINDS, default="docker",
                   help="default docker; local runs the tests on this machine, NOT isolated")
    p.add_argument("--max-attempts", type=positive_int, default=3, help="attempts per patch on infra errors (default 3)")
    p.add_argument("--grade-timeout", type=float, default=900.0, help="seconds for the hidden tests (default 900)")
    p.add_argument("--ignore-validation", action="store_true",
                   help="grade instances that validation.json rejected, and run flaky tests it excluded")
    p.set_defaults(func=run)


def _load(args: argparse.Namespace) -> tuple[Any, list[Any], list[Any], dict[str, list[str]]]:
    """(task set, every prediction, the predictions to grade, flaky tests excluded per instance)."""
    from harness.predictions import check_against_tasks, load_predictions
    from harness.tasks import load_task_set
    from harness.validate import load_validation

    try:
        ts = load_task_set(args.tasks)
    except (OSError, ValueError) as exc:
        raise CLIError(f"--tasks {args.tasks}: {exc}") from None
    try:
        preds = load_predictions(args.predictions)
        check_against_tasks(preds, ts, f"--predictions {args.predictions}")
    except OSError as exc:
        raise CLIError(f"--predictions {args.predictions}: {exc}") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    val = None if args.ignore_validation else load_validation(args.tasks)
    if val is None:
        return ts, preds, preds, {}
    if val.task_set_sha256 != ts.sha256:
        raise CLIError(f"{args.tasks}/validation.json was made for another version of this task set; fix: "
                       "re-run `tgsuite tasks validate` or pass --ignore-validation")
    rejected = {r.instance_id for r in val.rejected}
    for iid in sorted(rejected & {p.instance_id for p in preds}):
        log.warning("not grading %s: rejected by validation (reported as an error)", iid)
    return ts, preds, [p for p in preds if p.instance_id not in rejected], val.excluded_tests()


def run(args: argparse.Namespace) -> int:
    from harness.infra import RetryPolicy
    from harness.predictions import grade_predictions, swebench_report, write_swebench_report
    from harness.run_control import RunInterrupted, check_out_dir, sandbox_run_id
    from harness.runner import RunAborted
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxUnavailable

    if args.workers < 1 or args.max_attempts < 1:
        raise CLIError("--workers and --max-attempts must be >= 1")
    out = Path(args.out)
    try:
        check_out_dir(out, "grade", args.tasks)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    ts, all_preds, preds, excluded = _load(args)
    factory = TaskSandboxFactory(ts, kind=args.sandbox, run_id=sandbox_run_id(out))
    try:
        factory.preflight()
        results = grade_predictions(ts, preds, out, sandbox_factory=factory, workers=args.workers,
                                    retry=RetryPolicy(max_attempts=args.max_attempts), excluded_tests=excluded,
                                    grade_timeout_s=args.grade_timeout, argv=["tgsuite", *sys.argv[1:]],
                                    arm=args.arm, model_name_or_path=all_preds[0].model_name_or_path)
    except SandboxUnavailable as exc:
        raise CLIError(f"sandbox preflight failed ({exc.kind}): {exc}") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    except RunAborted as exc:
        print(f"tgsuite grade: {exc}", file=sys.stderr)
        return 1
    except RunInterrupted as exc:
        factory.close()
        print(f"tgsuite grade: {exc}; graded patches are kept in {out} (results.jsonl rebuilt) and this run's "
              "containers removed. Run the same command again to resume.", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(exc.exit_code)  # in-flight grading threads may still be winding down: do not wait for them
    finally:
        factory.close()
    if results:
        from evalsuite.run_summary import aggregate_run_dir

        aggregate_run_dir(out, config={"source": "predictions"})
    report = swebench_report(ts, all_preds, results)
    path = write_swebench_report(out, all_preds[0].model_name_or_path, report)
    print(f"submitted {report.submitted_instances}  resolved {report.resolved_instances}  unresolved "
          f"{report.unresolved_instances}  empty patch {report.empty_patch_instances}  error {report.error_instances}")
    print(f"report: {path}\nresults: {out / 'results.jsonl'}")
    infra = [r.instance_id for r in results if r.failure_class == "infra"]
    if infra:
        print(f"incomplete: {len(infra)} patches still infra errors after retries (first: {infra[0]}); run the same "
              "command again to resume", file=sys.stderr)
        return 1
    return 0
