"""SWE-bench's own log parsers through ``harness.swebench_compat``: Django, sympy and pytest logs → our statuses."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("swebench", reason="pip install --no-deps swebench==5.0.2")

from harness.swebench_compat import parse_log, parser_name, swebench_resolved  # noqa: E402

DJANGO_LOG = """\
test_lookup_int (lookup.tests.LookupTests) ... ok
test_lookup_str (lookup.tests.LookupTests) ... FAIL
test_skipme (lookup.tests.LookupTests) ... skipped 'needs postgres'
test_boom (lookup.tests.LookupTests) ... ERROR
"""
SYMPY_LOG = """\
sympy/core/tests/test_basic.py[3]
test_equality ok
test_matches_basic F
test_atoms E
"""
PYTEST_LOG = """\
PASSED tests/test_a.py::test_one
FAILED tests/test_a.py::test_two - assert 1 == 2
SKIPPED tests/test_a.py::test_three
"""


def test_parsers_by_repository() -> None:
    assert parser_name("django/django") == "parse_log_django"
    assert parser_name("sympy/sympy") == "parse_log_sympy"
    assert parser_name("nobody/else") is None
    with pytest.raises(KeyError, match="no log parser for 'nobody/else'"):
        parse_log("nobody/else", "")


def test_django_ids_and_statuses() -> None:
    got = parse_log("django/django", DJANGO_LOG)
    assert got == {"test_lookup_int (lookup.tests.LookupTests)": "passed",
                   "test_lookup_str (lookup.tests.LookupTests)": "failed",
                   "test_skipme (lookup.tests.LookupTests)": "skipped",
                   "test_boom (lookup.tests.LookupTests)": "error"}
    assert swebench_resolved(["test_lookup_int (lookup.tests.LookupTests)"],
                             ["test_skipme (lookup.tests.LookupTests)"], got)
    assert not swebench_resolved(["test_lookup_str (lookup.tests.LookupTests)"], [], got)
    assert not swebench_resolved(["test_skipme (lookup.tests.LookupTests)"], [], got)  # skipped F2P fails
    assert not swebench_resolved([], ["test_missing (x.Y)"], got)  # missing P2P fails


def test_sympy_bin_test_and_pytest_logs() -> None:
    assert parse_log("sympy/sympy", SYMPY_LOG) == {"test_equality": "passed", "test_matches_basic": "failed",
                                                   "test_atoms": "error"}
    assert parse_log("pytest-dev/pytest", PYTEST_LOG) == {"tests/test_a.py::test_one": "passed",
                                                          "tests/test_a.py::test_two": "failed",
                                                          "tests/test_a.py::test_three": "skipped"}


def test_importing_the_parsers_pulls_no_heavy_package() -> None:
    code = ("import sys; from harness.swebench_compat import parser_name; parser_name('django/django'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('docker', 'modal', 'datasets', 'unidiff')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
