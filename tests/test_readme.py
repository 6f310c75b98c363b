"""The README stays a page a newcomer reads in minutes, and the project's Markdown pages keep working links.

- README.md is at most 15 KB and names few commits: run logs belong in docs/RESULTS.md, history in
  docs/CHANGELOG.md, benchmark tables in benchmarks/README.md.
- Every relative link in README.md, docs/RESULTS.md, docs/CHANGELOG.md and benchmarks/README.md points at a file
  that exists and, with a ``#fragment`` into a Markdown page, at a heading that page has (GitHub's anchor rules).
- The README's CLI table names every command and sub-command the CLI has.
"""

from __future__ import annotations

import argparse
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "docs" / "RESULTS.md", ROOT / "docs" / "CHANGELOG.md", ROOT / "benchmarks" / "README.md"]
MAX_README_BYTES = 15 * 1024
MAX_README_COMMITS = 5

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and HTML comments (what renders as Markdown)."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, only letters, marks, digits, connector
    punctuation, spaces and hyphens kept, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").replace("*", "").strip().lower()
    kept = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """'target: why' for every relative link of ``page`` that does not resolve."""
    bad = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest} does not exist")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: {dest.name} has no heading with the anchor #{fragment}")
    return bad


def test_readme_is_at_most_15_kb() -> None:
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, (
        f"README.md is {size:,} bytes, over {MAX_README_BYTES:,}: move run logs to docs/RESULTS.md, history to "
        "docs/CHANGELOG.md and benchmark tables to benchmarks/README.md")


def test_readme_grows_no_run_log() -> None:
    commits = {w for w in re.findall(r"\b[0-9a-f]{7}\b", README.read_text(encoding="utf-8"))
               if re.search(r"[a-f]", w) and re.search(r"[0-9]", w)}  # fmt: skip
    assert len(commits) <= MAX_README_COMMITS, (
        f"README.md names {len(commits)} commits ({', '.join(sorted(commits))}): a run log belongs in "
        "docs/RESULTS.md; the README keeps one what-to-expect table")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert page.is_file()
    assert broken_links(page) == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Runs at 8ed4248 (2026-12-02): the first base\n")
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Same\n\n## Same\n\n[a](other.md#runs-at-8ed4248-2026-12-02-the-first-base) "
                    "[b](#same-1) [c](https://example.org/x) ![d](other.md)\n"
                    "[e](missing.md) [f](other.md#no-such-heading) [g](#title-x)\n"
                    "```\n[h](not-checked-in-code.md)\n```\n<!-- [i](not-checked-in-comments.md) -->\n")
    assert broken_links(page) == [
        f"missing.md: {tmp_path / 'missing.md'} does not exist",
        "other.md#no-such-heading: other.md has no heading with the anchor #no-such-heading",
        "#title-x: page.md has no heading with the anchor #title-x",
    ]


def test_slugs_follow_github() -> None:
    assert slug("Training throughput on CPU (`train_throughput_bench.py`)") == (
        "training-throughput-on-cpu-train_throughput_benchpy")
    assert slug("Against issue #20's targets") == "against-issue-20s-targets"
    assert slug("Wall time — every mini run × 3") == "wall-time--every-mini-run--3"


def cli_rows() -> dict[str, str]:
    """README's CLI table: first command word after `tgsuite` → the row."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `tgsuite ([a-z-]+)", line)
        if m:
            rows[m.group(1)] = line
    return rows


def test_the_cli_table_names_every_command_and_sub_command() -> None:
    from tgsuite.cli import build_parser

    def children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found: dict[str, argparse.ArgumentParser] = {}
        for action in parser._actions:  # noqa: SLF001 (argparse has no public list of sub-parsers)
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                found.update(action.choices)
        return found

    rows = cli_rows()
    missing = []
    for name, sub in children(build_parser()).items():
        if name not in rows:
            missing.append(f"tgsuite {name}")
            continue
        missing += [f"tgsuite {name} {s}" for s in children(sub) if f"`{s}`" not in rows[name]
                    and f"`tgsuite {name} {s}`" not in rows[name]]  # fmt: skip
    assert missing == [], f"README.md's CLI table lacks: {', '.join(missing)} (one line per command)"


def readme_commands() -> list[list[str]]:
    """Every `tgsuite ...` command line of the README's fenced code blocks (continuations joined, comments off)."""
    import shlex

    commands, fenced, pending = [], False, ""
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            continue
        code = re.sub(r"(^|\s)#.*$", "", line).rstrip()  # a comment starts a word, as in bash (not `v1#model`)
        pending += code.rstrip("\\").strip() + " "
        if code.endswith("\\"):
            continue
        words = shlex.split(pending)
        pending = ""
        if words[:1] == ["tgsuite"]:
            commands.append(words[1:])
    return commands


def test_every_tgsuite_command_in_the_readme_parses(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's commands are valid for today's CLI (a renamed or removed flag fails here)."""
    from tgsuite.cli import build_parser

    commands = readme_commands()
    assert len(commands) >= 10
    for argv in commands:
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"README: `tgsuite {' '.join(argv)}` does not parse ({exc.code}): {capsys.readouterr().err}")
