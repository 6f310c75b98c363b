"""The one console script, ``tgsuite``.

Each sub-command lives in its own module under ``tgsuite/commands/`` and exposes
``register(subparsers) -> None``; the module adds its parser(s) and sets ``func`` (returns an exit code).
Every command is also a plain Python call in the package that owns the work; this file only wires them up.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from tgsuite.commands.common import CLIError

# Order = order in `tgsuite --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "tgsuite.commands.doctor",
    "tgsuite.commands.images",
    "tgsuite.commands.tasks",
    "tgsuite.commands.eval",
    "tgsuite.commands.data",
    "tgsuite.commands.grade",
    "tgsuite.commands.serve_tools",
    "tgsuite.commands.train",
    "tgsuite.commands.protocol",
    "tgsuite.commands.analyze",
    "tgsuite.commands.report",
    "tgsuite.commands.export",
    "tgsuite.commands.canary",
    "tgsuite.commands.reproduce",
)

DESCRIPTION = """\
tgsuite: reproduce and evaluate Targeted Guidance (GRPO + a gated, hint-conditioned KL term on failing turns).

Typical flow:
  tgsuite doctor                                   # is this machine ready?
  tgsuite reproduce --preset smoke --out runs/smoke  # the whole mini reproduction, ending in an HTML report
Run `tgsuite COMMAND --help` for a worked example of each command.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tgsuite", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"tgsuite {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tgsuite: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
