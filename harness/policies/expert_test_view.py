"""How ``ScriptedExpert`` looks at the visible tests: the whole test file, or only the lines that call the function.

``read``: it reads the implicated test file with ``read_file`` (every test of the module, often 300+ tokens).

``search``: it greps that test file for calls of the function the issue names (``search{"pattern": "letter\\(",
"path": "tests/test_grades.py"}``), as an engineer greps for a function's call sites; the observation is one
``line:text`` line per call (grep on a single file prints no file name). Those lines are its view of the tests:
each ``assert`` line becomes a test of its own, so the candidate fixes are screened against the function's
assertions only; an edit that breaks another function's test shows in the next ``run_tests`` and is undone like any
failed fix. The failing cases are the hits whose statement is one the first test run printed as failing
(``harness.pytest_summary`` prints it under its ``FAILED`` line). With no such hit (the failing statement does not
call the function, or it spans several lines) the expert reads the whole test file after all.

Pure functions; the expert (``harness.policies.scripted``) decides when to call which tool.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

TestView = Literal["read", "search"]
TEST_VIEWS: tuple[TestView, ...] = ("read", "search")

_HIT_RE = re.compile(r"^(\d+):(.*)$")
_STATEMENT_RE = re.compile(r"^  (\S.*)$")


def call_pattern(function: str) -> str:
    """The ``search`` pattern (extended regex) for call sites of ``function``: ``letter\\(``."""
    return re.escape(function) + r"\("


def failing_statements(run_out: str) -> set[str]:
    """The test statements a summarised pytest report names as failing (the indented line under each FAILED)."""
    lines = run_out.splitlines()
    return {m.group(1).strip() for prev, line in zip(lines, lines[1:], strict=False)
            if prev.startswith(("FAILED ", "ERROR ")) and (m := _STATEMENT_RE.match(line))}


def view_from_search(module_name: str, hits: str, run_out: str) -> tuple[str, tuple[str, ...]] | None:
    """(a test module with one test per ``assert`` hit, the names of the failing ones) from a ``search``
    observation on one test file; None when no hit is a failing statement of ``run_out``."""
    failing_now = failing_statements(run_out)
    body, failing = ["import pytest", f"from {module_name} import *", ""], []
    for line in hits.splitlines():
        m = _HIT_RE.match(line)
        stmt = m.group(2).strip() if m else ""
        if not stmt.startswith("assert "):
            continue
        try:
            ast.parse(stmt)
        except SyntaxError:
            continue
        name = f"test_line_{m.group(1)}"
        body += ["", f"def {name}():", f"    {stmt}", ""]
        if stmt in failing_now:
            failing.append(name)
    return ("\n".join(body), tuple(failing)) if failing else None
