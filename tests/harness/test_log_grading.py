"""Issue #16 item 6: grading tasks whose tests are not pytest (Django's ``runtests.py``, sympy's ``bin/test``) from
their test command's output with swebench's log parsers (``TaskInstance.test_log_parser``), under the same
FAIL_TO_PASS / PASS_TO_PASS rules as the JUnit path (``harness.grading.decide_grade``).

The Django and sympy logs are written by hand in the runners' own formats (Django: unittest's verbose lines,
``FAIL:``/``ERROR:`` headers, the "Internal Server Error ... ok" split line; sympy: ``name ok|F|E`` lines and
the ``___ path.py:name ___`` failure headers). The end-to-end tests grade a unittest repository (the runner
Django's test runner wraps) in ``LocalSandbox`` and in Docker.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.grading import build_test_script, grade_from_output, grade_patch
from harness.sandbox import SandboxSpec
from harness.schema import TaskInstance
from harness.swebench_compat import log_parser_names, parse_log_as
from harness.tasks import TaskSetError, canonical_record, parse_record
from tests.harness_fakes import diff_of

DJANGO_LOG = """Testing against Django installed in '/testbed/django'
Importing application admin_views
Operations to perform:
  Synchronize unmigrated apps: admin_views, auth, contenttypes, messages, sessions, staticfiles
  Apply all migrations: admin, sites
Running migrations:
  Applying admin.0001_initial... OK
  Applying sites.0001_initial... OK
System check identified no issues (1 silenced).
test_add_view (admin_views.tests.AdminViewBasicTest) ... ok
test_changelist_view (admin_views.tests.AdminViewBasicTest) ... FAIL
test_delete_view (admin_views.tests.AdminViewBasicTest) ... ERROR
test_history_view (admin_views.tests.AdminViewBasicTest) ... skipped 'Database doesn't support feature(s): x'
test_multiline_view (admin_views.tests.AdminViewBasicTest) ... Internal Server Error: /test_admin/admin/
ok

======================================================================
ERROR: test_delete_view (admin_views.tests.AdminViewBasicTest)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/testbed/tests/admin_views/tests.py", line 88, in test_delete_view
    response = self.client.get(url)
KeyError: 'pk'

======================================================================
FAIL: test_changelist_view (admin_views.tests.AdminViewBasicTest)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/testbed/tests/admin_views/tests.py", line 60, in test_changelist_view
    self.assertEqual(response.status_code, 200)
AssertionError: 500 != 200

----------------------------------------------------------------------
Ran 5 tests in 0.512s

FAILED (failures=1, errors=1, skipped=1)
"""

SYMPY_LOG = """============================= test process starts ==============================
executable:         /usr/bin/python  (3.9.19-final-0) [CPython]
architecture:       64-bit
cache:              no
ground types:       python
numpy:              None
random seed:        61398573
hash randomization: on (PYTHONHASHSEED=2309137364)

sympy/core/tests/test_basic.py[3]
test_structure ok
test_equality F
test_matches_basic E
                                                                          [FAIL]

________________________________________________________________________________
_____________ sympy/core/tests/test_basic.py:test_matches_basic ______________
Traceback (most recent call last):
  File "/testbed/sympy/core/tests/test_basic.py", line 40, in test_matches_basic
    raise TypeError
TypeError
________________________________________________________________________________
________________ sympy/core/tests/test_basic.py:test_equality _________________
Traceback (most recent call last):
  File "/testbed/sympy/core/tests/test_basic.py", line 30, in test_equality
    assert b21 != b2
AssertionError

====== tests finished: 1 passed, 1 failed, 1 exceptions, in 0.05 seconds =======
DO *NOT* COMMIT!
"""

ADMIN = "(admin_views.tests.AdminViewBasicTest)"


def test_django_log_statuses() -> None:
    got = parse_log_as("django", DJANGO_LOG)
    assert {k: v for k, v in got.items() if k.endswith(ADMIN)} == {
        f"test_add_view {ADMIN}": "passed", f"test_changelist_view {ADMIN}": "failed",
        f"test_delete_view {ADMIN}": "error", f"test_history_view {ADMIN}": "skipped",
        f"test_multiline_view {ADMIN}": "passed"}
    assert not any("Applying" in k for k in got)  # migration lines are not tests


def test_sympy_log_statuses() -> None:
    got = parse_log_as("sympy", SYMPY_LOG)
    assert {k: got[k] for k in ("test_structure", "test_equality", "test_matches_basic")} == {
        "test_structure": "passed", "test_equality": "failed", "test_matches_basic": "error"}
    assert got["sympy/core/tests/test_basic.py:test_equality"] == "failed"


def _out(log: str, rc: int) -> str:
    return f">>>>> Applied git-apply\n>>>>> Start Test Output\n{log}\n>>>>> Test Exit Code: {rc}\n>>>>> OOM Kills: 0 0\n"


def test_log_grading_applies_the_junit_rules() -> None:
    kw = dict(touched_tests=False, log_parser="django")
    ok = grade_from_output(f2p=[f"test_add_view {ADMIN}"], p2p=[f"test_history_view {ADMIN}"],
                           stdout=_out("test_add_view (admin_views.tests.AdminViewBasicTest) ... ok\n"
                                       "test_history_view (admin_views.tests.AdminViewBasicTest) ... skipped 'x'", 0),
                           junit_text=None, log_text="test_add_view (admin_views.tests.AdminViewBasicTest) ... ok\n"
                           "test_history_view (admin_views.tests.AdminViewBasicTest) ... skipped 'x'\n", **kw)
    assert ok is not None and ok.resolved and ok.valid and ok.parse_source == "test-log"
    bad = grade_from_output(f2p=[f"test_changelist_view {ADMIN}", f"test_history_view {ADMIN}"],
                            p2p=[f"test_add_view {ADMIN}", f"test_gone {ADMIN}"], stdout=_out(DJANGO_LOG, 1),
                            junit_text=None, log_text=DJANGO_LOG, **kw)
    assert bad is not None and bad.valid and not bad.resolved and bad.reason.startswith("TESTS_FAILED")
    assert bad.f2p == {f"test_changelist_view {ADMIN}": "failed", f"test_history_view {ADMIN}": "skipped"}
    assert bad.p2p == {f"test_add_view {ADMIN}": "passed", f"test_gone {ADMIN}": "missing"}
    lying = grade_from_output(f2p=[f"test_add_view {ADMIN}"], p2p=[], stdout=_out(DJANGO_LOG, 0),
                              junit_text=None, log_text=DJANGO_LOG, **kw)
    assert lying is not None and not lying.valid and lying.reason.startswith("INVALID_GRADE")
    nolog = grade_from_output(f2p=[f"test_add_view {ADMIN}"], p2p=[], stdout=_out("", 0), junit_text=None,
                              log_text=None, **kw)
    assert nolog is not None and not nolog.valid and nolog.reason.startswith("NO_TEST_LOG")
    empty = grade_from_output(f2p=[f"test_add_view {ADMIN}"], p2p=[], stdout=_out("", 5), junit_text=None,
                              log_text="Ran 0 tests\n", **kw)
    assert empty is not None and not empty.valid and empty.reason.startswith("NO_TESTS_COLLECTED")


def _record(**kw) -> dict:
    return {"instance_id": "d-1", "repo": "django/django", "base_commit": "abc", "problem_statement": "p",
            "patch": "--- a/x.py\n+++ b/x.py\n", "test_patch": "", "FAIL_TO_PASS": ["t"], **kw}


def test_task_validation_names_unknown_parsers_and_keeps_old_hashes() -> None:
    assert "django" in log_parser_names() and "sympy" in log_parser_names()
    with pytest.raises(TaskSetError, match=r"tasks.jsonl:3 .*'test_log_parser': unknown parser 'nose'.*django"):
        parse_record(_record(test_log_parser="nose"), where="tasks.jsonl:3")
    with pytest.raises(TaskSetError, match="test_log_parser"):
        parse_record(_record(test_log_parser="../x"), where="tasks.jsonl:3")
    inst = parse_record(_record(test_log_parser="sympy"), where="tasks.jsonl:1")
    assert inst.test_log_parser == "sympy" and '"test_log_parser":"sympy"' in canonical_record(inst)
    default = parse_record(_record(), where="tasks.jsonl:1")
    assert default.test_log_parser == "junit" and "test_log_parser" not in canonical_record(default)
    # fields at their default that newer versions added (the log parser, the held-out stratum) keep old hashes
    assert json.loads(canonical_record(default)) == {k: v for k, v in default.model_dump(mode="json").items()
                                                      if k not in ("test_log_parser", "stratum")}


def test_eval_script_runs_a_log_parsed_command_as_given() -> None:
    common = dict(base_commit="b", restore_files=[], infra_files=[],
                  test_ids=["test_x (m.C)"], grader_dir="/tmp/g", timeout_s=60)
    script = build_test_script(test_cmd="./tests/runtests.py --verbosity 2 admin_views", log_parser="django",
                               **common)
    assert "./tests/runtests.py --verbosity 2 admin_views < /dev/null 2>&1 | tee \"$G/out/test.log\"" in script
    assert "--junitxml" not in script and "test_x" not in script
    assert "--junitxml" in build_test_script(test_cmd="python -m pytest", **common)


# ---------------------------------------------------------------- end to end: a unittest repository

CALC_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
CALC_FIXED = CALC_BUGGY.replace("return a - b\n\n\ndef sub", "return a + b\n\n\ndef sub")
BASE_TESTS = ("import unittest\n\nfrom calc import sub\n\n\nclass TestCalc(unittest.TestCase):\n"
              "    def test_sub(self):\n        self.assertEqual(sub(3, 1), 2)\n")
HIDDEN_TESTS = BASE_TESTS.replace("from calc import sub", "from calc import add, sub") + (
    "\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n")


def _unittest_task(root: Path) -> tuple[TaskInstance, Path]:
    repo = root / "ucalc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC_BUGGY)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_calc.py").write_text(BASE_TESTS)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "b"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    inst = TaskInstance(
        instance_id="ucalc-1", repo="calc", base_commit=base.stdout.strip(), problem_statement="add() subtracts",
        patch=diff_of(repo, {"calc.py": CALC_FIXED}), test_patch=diff_of(repo, {"tests/test_calc.py": HIDDEN_TESTS}),
        # unittest's verbose lines, as Django's runner prints them (Python 3.11 adds the method to the name)
        FAIL_TO_PASS=["test_add (tests.test_calc.TestCalc.test_add)"],
        PASS_TO_PASS=["test_sub (tests.test_calc.TestCalc.test_sub)"],
        test_cmd="python -m unittest -v tests.test_calc", test_log_parser="django")
    return inst, repo


@pytest.fixture(scope="module")
def ucalc(tmp_path_factory: pytest.TempPathFactory) -> tuple[TaskInstance, Path]:
    return _unittest_task(tmp_path_factory.mktemp("ucalc"))


def _check(grades: dict[str, object]) -> None:
    gold, empty = grades["gold"], grades["empty"]
    assert gold.resolved and gold.valid and gold.parse_source == "test-log", gold.reason  # type: ignore[attr-defined]
    assert not empty.resolved and empty.valid and empty.reason.startswith("TESTS_FAILED"), empty.reason  # type: ignore[attr-defined]
    assert empty.f2p == {"test_add (tests.test_calc.TestCalc.test_add)": "failed"}  # type: ignore[attr-defined]


def test_unittest_repo_graded_from_its_log_local(ucalc) -> None:
    from harness.sandbox_local import LocalSandbox

    inst, repo = ucalc
    grades, arts = {}, {}
    for name, patch in (("gold", inst.patch), ("empty", "")):
        with LocalSandbox(SandboxSpec()) as sb:
            sb.copy_in(repo, ".")
            arts[name] = {}
            grades[name] = grade_patch(inst, patch, sb, timeout_s=60, artifacts=arts[name])
    _check(grades)
    assert "test_add (tests.test_calc.TestCalc.test_add) ... ok" in arts["gold"]["test_log.txt"]
    assert "junit.xml" not in arts["gold"]


@pytest.mark.docker
def test_unittest_repo_graded_from_its_log_docker(ucalc, docker_provider) -> None:
    inst, repo = ucalc
    grades = {}
    for name, patch in (("gold", inst.patch), ("empty", "")):
        with docker_provider.create(SandboxSpec(mem_bytes=256 << 20), instance_id=inst.instance_id) as sb:
            sb.copy_in(repo, ".")
            grades[name] = grade_patch(inst, patch, sb, timeout_s=60)
    _check(grades)


def test_regrade_reads_the_stored_test_log(tmp_path: Path) -> None:
    """``tgsuite eval --regrade`` re-decides a log-parsed episode from ``grade/test_log.txt``."""
    from types import SimpleNamespace

    from harness.runner_regrade import _stored_grade

    inst = parse_record(_record(test_log_parser="django", FAIL_TO_PASS=[f"test_add_view {ADMIN}"],
                                PASS_TO_PASS=[f"test_changelist_view {ADMIN}"]), where="t")
    (tmp_path / "test_output.txt").write_text(_out(DJANGO_LOG, 1))
    (tmp_path / "test_log.txt").write_text(DJANGO_LOG)
    grade = _stored_grade(tmp_path, SimpleNamespace(grade=None), inst, [])  # type: ignore[arg-type]
    assert grade is not None and grade.parse_source == "test-log" and grade.valid and not grade.resolved
    assert grade.p2p == {f"test_changelist_view {ADMIN}": "failed"}
    assert json.loads((tmp_path / "grade.json").read_text())["reason"].startswith("TESTS_FAILED")
    excluded = _stored_grade(tmp_path, SimpleNamespace(grade=None), inst, [f"test_changelist_view {ADMIN}"])  # type: ignore[arg-type]
    assert excluded is not None and excluded.p2p == {}
