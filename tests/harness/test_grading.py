"""Grading: pure parsers/deciders without a sandbox, and adversarial fixtures graded with real git + pytest."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.grading import (
    build_test_script,
    decide_grade,
    extract_patch,
    grade_patch,
    junit_key,
    parse_eval_markers,
    parse_junit_xml,
    parse_pytest_text,
    patch_touches_tests,
    touched_paths,
)
from tests.harness_fakes import CALC_FIXED, DirSandbox, diff_of, make_calc_task

F2P = ["tests/test_calc.py::test_add"]
P2P = ["tests/test_calc.py::test_sub"]

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="6">
<testcase classname="tests.test_calc" name="test_add" time="0.01"/>
<testcase classname="tests.test_calc" name="test_sub" time="0.01"><failure message="x">boom</failure></testcase>
<testcase classname="tests.test_calc.TestK" name="test_p[a::b/c-1]" time="0"><skipped type="pytest.skip"/></testcase>
<testcase classname="tests.test_calc" name="test_err"><error message="setup"/></testcase>
<testcase classname="tests.test_calc" name="test_twice"/>
<testcase classname="tests.test_calc" name="test_twice"><error message="teardown"/></testcase>
</testsuite></testsuites>"""


# ---------------------------------------------------------------- pure


def test_junit_key_matches_pytest_mangling() -> None:
    assert junit_key("tests/test_calc.py::test_add") == ("tests.test_calc", "test_add")
    assert junit_key("tests/test_calc.py::TestK::test_p[a::b/c-1]") == ("tests.test_calc.TestK", "test_p[a::b/c-1]")
    assert junit_key("pkg/sub/test_x.py::test_y") == ("pkg.sub.test_x", "test_y")


def test_parse_junit_statuses_and_worst_of_duplicates() -> None:
    m = parse_junit_xml(JUNIT)
    assert m[("tests.test_calc", "test_add")] == "passed"
    assert m[("tests.test_calc", "test_sub")] == "failed"
    assert m[("tests.test_calc.TestK", "test_p[a::b/c-1]")] == "skipped"
    assert m[("tests.test_calc", "test_err")] == "error"
    assert m[("tests.test_calc", "test_twice")] == "error"


@pytest.mark.parametrize("bad", ["", "<html/>", "<testsuites><testcase"])
def test_parse_junit_rejects_non_junit(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_junit_xml(bad)


def _junit(**statuses: str) -> dict[tuple[str, str], str]:
    return {("tests.test_calc", k): v for k, v in statuses.items()}


@pytest.mark.parametrize(
    ("junit", "exit_code", "resolved", "valid"),
    [
        (_junit(test_add="passed", test_sub="passed"), 0, True, True),
        (_junit(test_add="failed", test_sub="passed"), 1, False, True),
        (_junit(test_add="skipped", test_sub="passed"), 0, False, True),  # skipped F2P fails (SWE-bench v5)
        (_junit(test_add="passed", test_sub="skipped"), 0, True, True),  # skipped P2P is maintained
        (_junit(test_add="passed"), 0, False, True),  # missing P2P fails
        (_junit(test_sub="passed"), 0, False, True),  # missing F2P fails
        (_junit(test_add="error", test_sub="passed"), 1, False, True),
        (_junit(test_add="passed", test_sub="passed"), 1, False, False),  # exit != 0 with no failure: invalid
        (_junit(test_add="failed", test_sub="passed"), 0, False, False),  # exit 0 with failures: invalid
        ({}, 5, False, False),  # nothing collected
        (None, 0, False, False),  # no junit: text never resolves
    ],
)
def test_decide_grade_table(junit, exit_code: int, resolved: bool, valid: bool) -> None:
    g = decide_grade(f2p=F2P, p2p=P2P, junit=junit, exit_code=exit_code,
                     text_statuses={F2P[0]: "passed", P2P[0]: "passed"})
    assert (g.resolved, g.valid) == (resolved, valid), g.reason


def test_decide_grade_patch_not_applied_and_timeout() -> None:
    g = decide_grade(f2p=F2P, p2p=P2P, junit=None, exit_code=None, patch_applied=False)
    assert not g.resolved and g.valid and not g.patch_applied
    g = decide_grade(f2p=F2P, p2p=P2P, junit=_junit(test_add="passed", test_sub="passed"), exit_code=124,
                     timed_out=True)
    assert not g.resolved and not g.valid and g.reason.startswith("GRADE_TIMEOUT")


def test_text_parser_reads_short_summary() -> None:
    out = "PASSED tests/test_calc.py::test_add\nFAILED tests/test_calc.py::test_sub - assert 1\nXFAIL t.py::x - r\n"
    assert parse_pytest_text(out) == {F2P[0]: "passed", P2P[0]: "failed", "t.py::x": "skipped"}


def test_touched_paths_and_flags() -> None:
    patch = ("diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-x\n+y\n"
             "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n")
    assert touched_paths(patch) == ["src/a.py", "conftest.py"]
    assert patch_touches_tests(patch)
    assert not patch_touches_tests(patch.split("diff --git a/conftest")[0])
    assert patch_touches_tests("--- a/tests/test_x.py\n+++ b/tests/test_x.py\n")
    assert patch_touches_tests("--- a/src/a.py\n+++ b/src/a.py\n", protected=["src/a.py"])


def test_markers_cannot_be_forged_by_test_output() -> None:
    out = (">>>>> Applied git-apply\n>>>>> Start Test Output\n>>>>> Applied none\n>>>>> Test Exit Code: 0\n"
           ">>>>> Patch Apply Failed\n>>>>> Test Exit Code: 1\n")
    m = parse_eval_markers(out)
    assert (m.applied_with, m.apply_failed, m.exit_code) == ("git-apply", False, 1)
    assert parse_eval_markers(">>>>> Applied x\n>>>>> Test Exit Code: 0\n").exit_code is None


def test_eval_script_quotes_ids_and_writes_junit_outside_repo() -> None:
    s = build_test_script(base_commit="abc", restore_files=["t x.py"],
                          infra_files=[], test_cmd="python -m pytest", test_ids=["t.py::a[1 2]"],
                          grader_dir="/tmp/g", timeout_s=10)
    assert "'t.py::a[1 2]'" in s and "'t x.py'" in s and '--junitxml="$G/out/junit.xml"' in s and "G=/tmp/g" in s


# ---------------------------------------------------------------- real git + pytest (fake host sandbox)


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory):
    return make_calc_task(tmp_path_factory.mktemp("calc"))


def _grade(calc, edits: dict[str, str | None] | str, **kw):
    inst, repo = calc
    patch = edits if isinstance(edits, str) else diff_of(repo, edits)
    with DirSandbox(repo) as sb:
        return grade_patch(inst, patch, sb, timeout_s=60, **kw)


def test_gold_resolves_and_empty_does_not(calc) -> None:
    g = _grade(calc, calc[0].patch)
    assert g.resolved and g.valid and g.parse_source == "junit-xml" and not g.tests_touched
    g = _grade(calc, "")
    assert not g.resolved and g.valid and g.f2p == {F2P[0]: "failed"} and g.p2p == {P2P[0]: "passed"}


CONFTEST_PRINT_EXIT = (
    "import sys\nprint('PASSED tests/test_calc.py::test_add')\nprint('PASSED tests/test_calc.py::test_sub')\n"
    "print('>>>>> Test Exit Code: 0')\nsys.exit(0)\n"
)
CONFTEST_FORGE_REPORTS = (
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
CONFTEST_SKIP_ALL = (
    "import pytest\n\ndef pytest_collection_modifyitems(items):\n"
    "    for it in items:\n        it.add_marker(pytest.mark.skip(reason='nope'))\n"
)


@pytest.mark.parametrize("policy", ["reset", "flag"])
@pytest.mark.parametrize("conftest", [CONFTEST_PRINT_EXIT, CONFTEST_SKIP_ALL])
def test_adversarial_conftest_never_resolves(calc, policy: str, conftest: str) -> None:
    g = _grade(calc, {"conftest.py": conftest}, infra_policy=policy)
    assert not g.resolved and g.tests_touched


def test_forged_reports_conftest_is_reset(calc) -> None:
    g = _grade(calc, {"conftest.py": CONFTEST_FORGE_REPORTS})
    assert not g.resolved and g.valid and g.tests_touched and g.f2p[F2P[0]] == "failed"


def test_patch_deleting_or_skipping_tests_never_resolves(calc) -> None:
    g = _grade(calc, {"tests/test_calc.py": None})
    assert not g.resolved and g.tests_touched
    skip_mod = "import pytest\npytestmark = pytest.mark.skip('no')\n"
    g = _grade(calc, {"tests/test_calc.py": skip_mod, "calc.py": CALC_FIXED.replace("+", "-")})
    assert not g.resolved and g.tests_touched
    # skipping from library code (not a test file) at import time: the F2P test is skipped -> fails
    lib_skip = "import pytest\npytest.skip('x', allow_module_level=True)\n" + CALC_FIXED
    g = _grade(calc, {"calc.py": lib_skip})
    assert not g.resolved and not g.tests_touched


PYPROJECT_BUMP = '[project]\nname = "calc"\nversion = "1"\n'


def test_library_hard_exit_and_pyproject_addopts(calc) -> None:
    g = _grade(calc, {"calc.py": "import os\nos._exit(0)\n"})
    assert not g.resolved and not g.valid and g.reason.startswith("NO_JUNIT")
    pyproject = '[project]\nname = "calc"\nversion = "0"\n[tool.pytest.ini_options]\naddopts = "-k nothing"\n'
    g = _grade(calc, {"pyproject.toml": pyproject, "calc.py": CALC_FIXED})
    assert g.resolved and g.tests_touched  # the pytest table was reset to base; the real fix still resolves
    g = _grade(calc, {"pyproject.toml": PYPROJECT_BUMP, "calc.py": CALC_FIXED})
    assert g.resolved and not g.tests_touched  # a change outside [tool.pytest*] is not a test-config change


SHADOW_PYTEST = (  # a root pytest.py shadows the real pytest under `python -m pytest` and forges the report
    "import os, sys\nfor a in sys.argv:\n    if a.startswith('--junitxml='):\n        p = a.split('=', 1)[1]\n"
    "        os.makedirs(os.path.dirname(p), exist_ok=True)\n        open(p, 'w').write('<testsuites><testsuite>"
    "<testcase classname=\"tests.test_calc\" name=\"test_add\"/><testcase classname=\"tests.test_calc\" "
    "name=\"test_sub\"/></testsuite></testsuites>')\nsys.exit(0)\n"
)


def test_shadowing_the_test_runner_never_resolves(calc) -> None:
    for edits in ({"pytest.py": SHADOW_PYTEST}, {"pytest/__init__.py": SHADOW_PYTEST}):
        g = _grade(calc, edits, infra_policy="flag")
        assert not g.resolved and g.tests_touched, g.reason


def test_shadow_candidates() -> None:
    from harness.grading import shadow_candidate

    assert shadow_candidate("pytest.py") == "pytest.py" and shadow_candidate("_pytest/x.py") == "_pytest"
    assert shadow_candidate("xml/__init__.py") == "xml" and shadow_candidate("json.py") == "json.py"
    assert shadow_candidate("calc.py") is None and shadow_candidate("src/pytest.py") is None
    assert shadow_candidate("README.md") is None


def test_patch_that_does_not_apply(calc) -> None:
    bad = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n-nope\n+nope2\n"
    g = _grade(calc, bad)
    assert not g.resolved and g.valid and not g.patch_applied


def test_extract_patch_takes_new_files_and_skips_bytecode(calc, tmp_path: Path) -> None:
    inst, repo = calc
    with DirSandbox(repo) as sb:
        sb.write_file("calc.py", CALC_FIXED.encode())
        sb.write_file("new_mod.py", b"X = 1\n")
        sb.write_file("__pycache__/calc.cpython-311.pyc", b"\x00\x01")
        sb.write_file(".pytest_cache/v/x", b"{}")
        sb.write_file(".gitignore", b".pytest_cache\n")
        patch = extract_patch(sb, inst.base_commit)
    assert touched_paths(patch) == [".gitignore", "calc.py", "new_mod.py"]
    g = _grade(calc, patch)
    assert g.resolved


# ---------------------------------------------------------------- the real sandboxes

CASES = [  # (name, edits or "gold"/"empty", expect resolved)
    ("gold", "gold", True),
    ("empty", "empty", False),
    ("conftest_print_exit", {"conftest.py": CONFTEST_PRINT_EXIT}, False),
    ("conftest_forge", {"conftest.py": CONFTEST_FORGE_REPORTS, "calc.py": CALC_FIXED.replace("+", "-")}, False),
    ("delete_tests", {"tests/test_calc.py": None}, False),
]


def _patch_for(calc, edits) -> str:
    inst, repo = calc
    return {"gold": inst.patch, "empty": ""}[edits] if isinstance(edits, str) else diff_of(repo, edits)


FAST_PYTEST = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the venv's plugins (hypothesis, ...) only slow startup


def test_grading_with_local_sandbox(calc) -> None:
    from harness.sandbox import SandboxSpec
    from harness.sandbox_local import LocalSandbox

    inst, repo = calc
    for name, edits, expected in [CASES[0], CASES[3]]:  # the fake-sandbox tests above cover the rest
        with LocalSandbox(SandboxSpec(env=FAST_PYTEST)) as sb:
            sb.copy_in(repo, ".")
            g = grade_patch(inst, _patch_for(calc, edits), sb, timeout_s=120)
        assert g.resolved is expected, (name, g.reason)


@pytest.mark.docker
def test_grading_in_docker(calc, docker_provider) -> None:
    inst, repo = calc
    for name, edits, expected in [CASES[0], CASES[2], CASES[3]]:
        with docker_provider.create(instance_id=inst.instance_id) as sb:
            sb.copy_in(repo, ".")
            g = grade_patch(inst, _patch_for(calc, edits), sb, timeout_s=120)
        assert g.resolved is expected, (name, g.reason)
        if name == "gold":
            assert g.valid and g.parse_source == "junit-xml" and g.exit_code == 0
    with docker_provider.create(instance_id=inst.instance_id) as sb:  # the image has python3 only
        sb.copy_in(repo, ".")
        g = grade_patch(inst, _patch_for(calc, {"pyproject.toml": PYPROJECT_BUMP, "calc.py": CALC_FIXED}), sb)
    assert g.resolved and not g.tests_touched, g.reason


def test_grade_from_output_oom_and_dead_script() -> None:
    from harness.grading import grade_from_output

    out = ">>>>> Applied git-apply\n>>>>> Start Test Output\nKilled\n>>>>> Test Exit Code: 137\n"
    g = grade_from_output(f2p=F2P, p2p=P2P, stdout=out, junit_text=None, touched_tests=False, oom_killed=True)
    assert g is not None and not g.valid and g.reason.startswith("TESTS_OOM_KILLED")
    g = grade_from_output(f2p=F2P, p2p=P2P, stdout=out, junit_text=None, touched_tests=False)
    assert g is not None and not g.valid and g.reason.startswith("GRADE_TIMEOUT")
    assert grade_from_output(f2p=F2P, p2p=P2P, stdout=">>>>> Applied none\n", junit_text=None,
                             touched_tests=False) is None  # script died: the caller raises GraderError (infra)


def test_extract_patch_host_ignores_agent_git_and_keeps_base_pristine(calc) -> None:
    import subprocess

    from harness.grading import GraderError, extract_patch_host

    inst, repo = calc
    objects = lambda: sorted(p.name for p in (repo / ".git" / "objects").rglob("*") if p.is_file())  # noqa: E731
    before = objects()
    with DirSandbox(repo) as sb:
        sb.write_file("calc.py", CALC_FIXED.encode())
        sb.write_file("secret_gold.py", b"GOLD = 1\n")
        sb.exec("rm -rf .git", timeout=30)  # the agent destroys its repository
        with pytest.raises(GraderError):
            extract_patch(sb, inst.base_commit)
        patch = extract_patch_host(sb, repo, inst.base_commit)
    assert touched_paths(patch) == ["calc.py", "secret_gold.py"]
    assert objects() == before, "no blob of an episode may land in the pristine base repository"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    assert _grade(calc, patch).resolved
