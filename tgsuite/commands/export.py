"""``tgsuite export inspect RUN_DIR``: a run directory as Inspect ``.eval`` logs
(``harness.trajdata.inspect_export``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tgsuite.commands.common import CLIError

EPILOG = """\
worked example (a small eval run, exported, then opened in Inspect's log viewer):
  tgsuite tasks make-mini --out tasks/mini-heldout --split heldout --repos 2 --tasks-per-repo 2
  tgsuite eval --tasks tasks/mini-heldout --policy oracle --policy null --out runs/on --sandbox docker
  tgsuite export inspect runs/on                 # writes runs/on/inspect/<task set>_<arm>.eval
  inspect view --log-dir runs/on/inspect         # or read_eval_log("runs/on/inspect/...eval") in Python

One .eval log per arm (model tgsuite/<arm>), one sample per episode (the attempt that counts; epoch = the seed's
position + 1), with the messages and tool calls of its trajectory and three scores: resolved, behaviour, joint
(C/I). Episodes without a conversation (`tgsuite grade`) get no behaviour or joint score; infrastructure errors and
invalid instances are errored samples with no score. Works on runs of eval, serve-tools and grade. Needs
pip install 'tgsuite[inspect]'.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help="write a run directory in another tool's format (Inspect .eval logs)",
        description="Write a run directory in another tool's log format.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    i = sub.add_parser("inspect", help="Inspect .eval logs (inspect view, read_eval_log)",
                       description="Write one Inspect .eval log per arm of RUN_DIR.", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("run_dir", metavar="RUN_DIR", help="the --out directory of tgsuite eval / serve-tools / grade")
    i.add_argument("--out", default=None, metavar="DIR", help="where to write the logs (default RUN_DIR/inspect)")
    i.set_defaults(func=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise CLIError("writing Inspect logs needs the `inspect-ai` package; fix: pip install 'tgsuite[inspect]'") from None
    from harness.rundir import RunDirError
    from harness.trajdata.inspect_export import ExportError, export_inspect

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise CLIError(f"{run_dir}: not a directory; fix: pass the --out directory of `tgsuite eval`")
    out = Path(args.out) if args.out else run_dir / "inspect"
    try:
        paths = export_inspect(run_dir, out)
    except (ExportError, RunDirError) as exc:
        raise CLIError(str(exc)) from None
    for path in paths:
        print(f"wrote {path}")
    print(f"open them with: inspect view --log-dir {out}")
    return 0
