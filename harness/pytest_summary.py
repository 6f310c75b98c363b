"""pytest's terminal output trimmed to what a person reads: one line per failure plus the failing statement.

``summarize_pytest(stdout)`` turns the default (``--tb=auto``) report of ``pytest -q`` into, per failed or erroring
test, in the order of pytest's short summary::

    FAILED tests/test_text.py::test_slug - ZeroDivisionError: division by zero
      assert slug('A B') == 'ab'
      pkg/text.py:12: return a / b                <- only when the error was raised in another file

then pytest's ``Interrupted: ...`` line when there is one, and the counts line without its timing
(``3 failed, 38 passed``). The message is pytest's own first ``E`` line, never truncated to a terminal width
(context ``E`` lines before it, such as a ``SyntaxError``'s file and caret, are kept, indented); then the test's
statement that failed (the line pytest marked ``>`` in the first frame under the repository root) and, when the
error was raised in another file under the root, that frame as ``path:line: source``. Each line is capped at
``LINE_CAP`` characters. Dropped: the progress dots, the tracebacks' other lines, object
addresses, ``+ where`` explanations and diffs, the warnings summary and the timing, all of which made the agent's
test observations long and (timings, addresses) different from run to run.

Not covered: output that has no pytest counts line (another test runner, a crash before pytest reports, an
observation cut in the middle): ``summarize_pytest`` returns None and the caller shows the output unchanged.
Grading never sees this text (the grader reads JUnit XML and its own full output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LINE_CAP = 240

_WORD = r"(?:failed|passed|skipped|deselected|xfailed|xpassed|errors?|warnings?|rerun|subtests? \w+)"
_COUNTS_RE = re.compile(
    rf"^=*\s*(?P<counts>\d+ {_WORD}(?:, \d+ {_WORD})*|no tests ran)(?: in [\d.]+s(?: \([\d:]+\))?)?\s*=*$")
_BANNER_RE = re.compile(r"^=+ (.+?) =+$")
_TITLE_RE = re.compile(r"^_{3,} (.+?) _{3,}$")
_SUMMARY_RE = re.compile(r"^(FAILED|ERROR) (.+?)(?: - (.*))?$")
_LOCATION_RE = re.compile(r"^([^\s/<:][^:]*\.py):(\d+):(?: (.*))?$")
_E_RE = re.compile(r"^E( +)(.*)$")
_INTERRUPTED_RE = re.compile(r"^!+ (Interrupted: .+?) !+$")


@dataclass
class _Section:
    """One entry of pytest's FAILURES / ERRORS report."""

    title: str
    e_lines: list[tuple[int, str]] = field(default_factory=list)
    frames: list[tuple[str, str]] = field(default_factory=list)  # ("path:line", source)


def _cap(line: str) -> str:
    return line if len(line) <= LINE_CAP else line[: LINE_CAP - 3] + "..."


def _sections(lines: list[str]) -> list[_Section]:
    """The FAILURES and ERRORS entries: their ``E`` lines and the in-repository frames."""
    out: list[_Section] = []
    inside, source = False, ""
    for i, line in enumerate(lines):
        banner = _BANNER_RE.match(line)
        if banner:
            inside = banner.group(1) in ("FAILURES", "ERRORS")
            continue
        title = _TITLE_RE.match(line)
        if inside and title:
            out.append(_Section(title.group(1)))
            source = ""
            continue
        if not inside or not out:
            continue
        sec = out[-1]
        if line.startswith(">"):
            source = line[1:].strip()
        elif (e := _E_RE.match(line)) is not None:
            sec.e_lines.append((len(e.group(1)), e.group(2).rstrip()))
        elif (loc := _LOCATION_RE.match(line)) is not None:
            rest = loc.group(3) or ""
            if not source and rest.startswith("in ") and i + 1 < len(lines):
                source = lines[i + 1].strip()  # --tb=short style: the source line follows the location
            sec.frames.append((f"{loc.group(1)}:{loc.group(2)}", source))
            source = ""
    return out


def _match(sections: list[_Section], kind: str, nodeid: str) -> _Section | None:
    """The report entry of one short-summary line (by title: ``test_x``, ``Cls.test_x``, ``ERROR collecting f``)."""
    for sec in sections:
        title = sec.title
        if kind == "ERROR" and title.startswith("ERROR "):
            target = title.split(" ", 2)[-1] if title.startswith("ERROR collecting ") else title.rsplit(" ", 1)[-1]
            if nodeid == target or nodeid.endswith("::" + target.replace(".", "::")):
                return sec
        elif kind == "FAILED" and nodeid.endswith("::" + title.replace(".", "::")):
            return sec
    return None


def _entry(kind: str, nodeid: str, fallback: str, sec: _Section | None) -> list[str]:
    """The lines of one failure: header with the message, context ``E`` lines, test frame and raising frame."""
    if sec is None or not sec.e_lines:
        return [_cap(f"{kind} {nodeid}" + (f" - {fallback}" if fallback else ""))] + (
            _frame_lines(sec) if sec else [])
    low = min(indent for indent, _ in sec.e_lines)
    at = next(k for k, (indent, _) in enumerate(sec.e_lines) if indent == low)
    context = ["  " + " " * (indent - low) + text for indent, text in sec.e_lines[:at] if text.strip()]
    return [_cap(f"{kind} {nodeid} - {sec.e_lines[at][1].strip()}"), *map(_cap, context), *_frame_lines(sec)]


def _frame_lines(sec: _Section) -> list[str]:
    """The test's failing statement (its file is in the node id), then the raising frame when it is elsewhere."""
    if not sec.frames:
        return []
    (first, src), (last, last_src) = sec.frames[0], sec.frames[-1]
    out = [f"  {src}" if src else f"  {first}"]
    if last.split(":")[0] != first.split(":")[0]:
        out.append(f"  {last}: {last_src}" if last_src else f"  {last}")
    return [_cap(x) for x in out]


def summarize_pytest(text: str) -> str | None:
    """The trimmed report of one ``pytest`` run's stdout (see module docstring); None if ``text`` has no pytest
    counts line (then show ``text`` as it is)."""
    lines = text.splitlines()
    counts = next((m.group("counts") for ln in reversed(lines) if (m := _COUNTS_RE.match(ln.strip()))), None)
    if counts is None:
        return None
    sections = _sections(lines)
    start = next((k for k, ln in enumerate(lines) if ln.strip("= ") == "short test summary info"), len(lines))
    out: list[str] = []
    matched: set[int] = set()
    for ln in lines[start + 1:]:
        m = _SUMMARY_RE.match(ln)
        if m is None:
            continue
        sec = _match([s for k, s in enumerate(sections) if k not in matched], m.group(1), m.group(2))
        if sec is not None:
            matched.add(next(k for k, s in enumerate(sections) if s is sec))
        out += _entry(m.group(1), m.group(2), m.group(3) or "", sec)
    if not out:  # no short summary (e.g. ``-rN``): the report's entries by their titles
        out = [ln for sec in sections for ln in _entry("FAILED", sec.title, "", sec)]
    out += [m.group(1) for ln in lines if (m := _INTERRUPTED_RE.match(ln.strip()))]
    return "\n".join([*out, counts])
