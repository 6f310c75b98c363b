"""``harness.pytest_summary``: the agent's ``run_tests`` observation is pytest's report trimmed to one line per
failure plus the failing statement (issue #20), on real pytest 9 output recorded in tests/fixtures/pytest_output and
on a live run through ``ToolExecutor``."""

from __future__ import annotations

from pathlib import Path

from harness.pytest_summary import LINE_CAP, summarize_pytest
from harness.tools import ToolExecutor, format_tool_call, parse_tool_calls
from tests.harness_fakes import DirSandbox, make_calc_task

FIX = Path(__file__).parents[1] / "fixtures" / "pytest_output"


def test_failures_one_line_each_plus_statement_and_raising_frame() -> None:
    got = summarize_pytest((FIX / "failures.txt").read_text())
    assert got == "\n".join([
        "FAILED tests/test_m.py::test_div - ZeroDivisionError: division by zero",
        "  assert div(4, 0) == 2",
        "  pkg/m.py:2: return helper(a) / b",
        "FAILED tests/test_m.py::test_eq - assert 2.0 == 3.0",
        "  assert div(4, 2) == 3.0",
        "FAILED tests/test_m.py::test_list - assert [1, 2, 3] == [1, 2, 4]",
        "  assert [1, 2, 3] == [1, 2, 4]",
        "FAILED tests/test_m.py::TestBox::test_get - KeyError: 'x'",
        "  assert Box().get() == 1",
        "  pkg/m.py:9: return {}[\"x\"]",
        "4 failed, 1 passed",
    ])


def test_collection_errors_keep_the_message_context() -> None:
    syntax = summarize_pytest((FIX / "syntax_error.txt").read_text())
    assert syntax is not None
    lines = syntax.splitlines()
    assert lines[0] == "ERROR tests/test_m.py - SyntaxError: invalid syntax"
    assert any("line 2" in ln for ln in lines[1:3]) and "  from pkg.m import div, Box" in lines
    assert lines[-2:] == ["Interrupted: 1 error during collection", "1 error"]
    imp = summarize_pytest((FIX / "import_error.txt").read_text())
    assert imp is not None and imp.splitlines()[:3] == [
        "ERROR tests/test_m.py - ModuleNotFoundError: No module named 'nosuch'",
        "  from pkg.m import div, Box", "  pkg/m.py:1: import nosuch"]


def test_passing_runs_lose_dots_and_timing_and_other_output_is_not_pytest() -> None:
    assert summarize_pytest("......                   [100%]\n6 passed in 0.03s\n") == "6 passed"
    assert summarize_pytest("===== 2 passed, 1 warning in 1.20s =====") == "2 passed, 1 warning"
    assert summarize_pytest("\nno tests ran in 0.01s\n") == "no tests ran"
    assert summarize_pytest("Ran 3 tests in 0.001s\n\nOK\n") is None  # unittest: shown as it is
    assert summarize_pytest("") is None


def test_long_messages_are_capped() -> None:
    text = (FIX / "failures.txt").read_text().replace("division by zero", "x" * 1000)
    got = summarize_pytest(text)
    assert got is not None and max(len(ln) for ln in got.splitlines()) == LINE_CAP


def test_run_tests_observation_is_the_summary(tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path)
    (repo / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    sbx = DirSandbox(repo)
    try:
        ex = ToolExecutor(sbx, inst, timeout=60, cap_chars=10_000)
        (call,) = parse_tool_calls(format_tool_call("run_tests", {"tests": []}))
        obs = ex.run(call).observation
    finally:
        sbx.close()
    assert obs.splitlines() == ["$ python3 -m pytest -q", "FAILED tests/test_calc.py::test_add - assert -1 == 5",
                                "  assert add(2, 3) == 5", "1 failed", "[exit code 1]"], obs
