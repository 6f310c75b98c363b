"""The one console script, ``tgsuite``.

Each sub-command lives in its own module under ``tgsuite/commands/`` and exposes
``register(subparsers) -> None``; the module adds its parser(s) and sets ``func`` (returns an exit code).
Every command is also a plain Python call in the package that owns the work; this file only wires them up.

Every ``--help`` page carries a worked example (``tests/tgsuite/test_cli_help.py`` walks them all); a flag a
sub-command does not know is reported with that sub-command's usage, not the top-level one (``SubCommandParser``);
``tgsuite --version`` prints the installed version and, in a git checkout, its commit.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

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

example (a first session):
  tgsuite doctor                                     # is this machine ready?
  tgsuite reproduce --preset smoke --out runs/smoke  # the whole mini reproduction at tiny sizes, ending in an HTML report
Run `tgsuite COMMAND --help` for a worked example of each command.
"""


def version_text() -> str:
    """``tgsuite <version>``, plus the commit of the checkout this code runs from when it is a git checkout."""
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    from protocols.provenance import git_state

    try:
        text = f"tgsuite {version('tgsuite')}"
    except PackageNotFoundError:
        text = "tgsuite (not installed: run `bash scripts/setup.sh`)"
    checkout = Path(__file__).resolve().parents[1]
    commit, dirty = git_state(checkout) if (checkout / "pyproject.toml").is_file() else (None, None)
    if commit:
        text += f" (git {commit[:7]}{', with uncommitted changes' if dirty else ''})"
    return text


class _VersionAction(argparse.Action):
    """Like argparse's ``version`` action, but the text (a git call) is computed only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> NoReturn:  # fmt: skip
        print(version_text())
        parser.exit()


class SubCommandParser(argparse.ArgumentParser):
    """The parser class of every sub-command (and sub-sub-command).

    argparse hands arguments a sub-command does not know up to the top-level parser, which then prints the
    top-level usage. Here the sub-command that received them reports them itself, with its own usage and the
    closest flag it does know."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:  # fmt: skip
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized_message(self, extras))
        return ns, extras


def unrecognized_message(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """``unrecognized arguments: --temprature 0.2 (did you mean --temperature?)``."""
    known = [s for a in parser._actions for s in a.option_strings]  # noqa: SLF001 (argparse has no public list)
    hints = []
    for arg in extras:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-"):
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            if close:
                hints.append(f"{flag}: did you mean {close[0]}?")
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tgsuite", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action=_VersionAction, help="print the version (and git commit) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=SubCommandParser)
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
