"""Every ``--help`` page has a worked example of its own command; a mistyped flag shows the usage of the
sub-command it was given to; ``tgsuite --version`` prints the installed version."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from tgsuite.cli import COMMAND_MODULES, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def help_pages() -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """(path, parser) for the top level, every sub-command and every sub-sub-command."""

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
        yield path, parser
        for action in parser._actions:  # noqa: SLF001 (argparse has no public list of sub-parsers)
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                for name, sub in action.choices.items():
                    yield from walk(sub, [*path, name])

    return walk(build_parser(), [])


def has_example_of(text: str, path: list[str]) -> bool:
    """An 'example' heading, and after it a command line that runs ``tgsuite <path>`` (``$ `` and ``VAR=x``
    prefixes allowed)."""
    at = text.lower().find("example")
    if at < 0:
        return False
    command = re.escape(" ".join(["tgsuite", *path]))
    return re.search(rf"^\s*(\$\s+)?(\w+=\S+\s+)*{command}(\s|$)", text[at:], re.M) is not None


PAGES = list(help_pages())


def test_the_walk_reaches_every_command_and_sub_command() -> None:
    names = {" ".join(p) for p, _ in PAGES}
    assert len(COMMAND_MODULES) == len({p[0] for p, _ in PAGES if p})
    assert {"", "eval", "grade", "tasks validate", "protocol power", "train arms", "data filter"} <= names
    assert len(PAGES) >= 30


@pytest.mark.parametrize("path", [p for p, _ in PAGES], ids=lambda p: " ".join(p) or "tgsuite")
def test_every_help_page_has_a_worked_example_of_its_command(path: list[str]) -> None:
    parser = dict((tuple(p), q) for p, q in PAGES)[tuple(path)]
    text = parser.format_help()
    assert has_example_of(text, path), f"`tgsuite {' '.join(path)} --help` has no example running it:\n{text}"


def test_the_example_check_can_fail() -> None:
    assert not has_example_of("usage: tgsuite images show\n\noptions:\n  --json", ["images", "show"])
    assert not has_example_of("examples:\n  tgsuite images build\n", ["images", "show"])
    assert has_example_of("examples:\n  $ tgsuite images show --json\n", ["images", "show"])
    assert has_example_of("example:\n  PRESET=smoke tgsuite reproduce\n", ["reproduce"])


@pytest.mark.parametrize("argv, usage, hint", [
    (["eval", "--tasks", "t", "--out", "o", "--temprature", "0.2"], "usage: tgsuite eval", "--temperature"),
    (["protocol", "power", "plan.toml", "--sedes", "3"], "usage: tgsuite protocol power", "--seeds"),
    (["train", "rl", "--out", "o", "--bogus-flag"], "usage: tgsuite train rl", None),
    (["data", "filter", "ds", "--out", "o", "--min-rewrd", "0.5"], "usage: tgsuite data filter", "--min-reward"),
])  # fmt: skip
def test_a_mistyped_flag_shows_that_sub_commands_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, hint: str | None
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert f"error: unrecognized arguments: {argv[-2] if hint else argv[-1]}" in err
    if hint:
        assert f"did you mean {hint}?" in err


def test_the_top_level_still_reports_its_own_mistakes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--bogus"])
    assert capsys.readouterr().err.startswith("usage: tgsuite [-h]")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"tgsuite {version('tgsuite')}"), out
    from protocols.provenance import git_state

    commit, _ = git_state(ROOT)
    if commit:  # a git checkout: the commit is named
        assert f"(git {commit[:7]}" in out, out


def test_version_from_the_console_entry_point() -> None:
    run = subprocess.run([sys.executable, "-m", "tgsuite", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.startswith("tgsuite "), run.stderr
