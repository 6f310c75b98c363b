"""Grading: hidden tests run on a candidate patch in a fresh sandbox (HARNESS.md §7.3).

Pure parts (no sandbox, unit-tested alone):
- ``parse_junit_xml``: pytest JUnit XML → ``{(classname, name): status}``; ``junit_key`` maps a pytest node id
  to the same key the way pytest's own ``mangle_test_address`` does.
- ``parse_pytest_text``: the ``-rA`` short summary → statuses (diagnostics only, see below).
- ``decide_grade``: requested test ids + parsed statuses + exit code → ``harness.schema.Grade``, SWE-bench v5
  semantics: an F2P test that is missing, skipped or errored fails; a skipped P2P test is maintained, a missing
  one fails; exit code 0 with failures, or non-zero exit with no failure, is an *invalid* grade.
- ``touched_paths`` / ``is_test_path`` / ``is_test_infra_path``: what a unified diff touches.
- ``build_test_script`` / ``parse_eval_markers``: step 2 of the scripts run in the grading sandbox and the markers.

Thin sandbox wrappers: ``extract_patch`` (``git add -A && git diff --binary --cached <base>`` in the agent's
sandbox) and ``grade_patch`` (two scripts in a *fresh* sandbox: ``harness.grading_apply`` applies the patch and
reports what it really changed, ``harness.grading_script`` restores and runs the tests; it reads the JUnit file
and decides).

Anti-spoofing, what is covered: the result comes from a JUnit file written by pytest into a directory outside the
repository created after the patch is applied; text output is never trusted for resolution (a conftest that prints
``PASSED`` lines, or exits 0 before pytest writes its report, cannot resolve). What is restored is decided from the
repository's STATE after the patch (git's view of the work tree, every file type, ignored files included), never
from the patch text, so quoted names, odd prefixes, context diffs or ``patch --fuzz`` quirks change nothing: every
file of the hidden test patch and every file holding an F2P/P2P test is restored to base before the hidden test
patch is applied; every changed path that is not agent source (``harness.grading_paths``: tests, pytest
configuration, start-up hooks, package metadata, bytecode) is reset with ``infra_policy="reset"`` (default) and
always flagged as ``tests_touched``; a new top-level entry on a ``sys.path`` root that would shadow any module the
interpreter imports from outside the repository is deleted. The patch is applied with ``.git`` moved out of the
work tree and git runs without hooks, so no hook or configuration the patch wrote runs. What is NOT covered: code
that runs inside the pytest process (e.g. the library under test, imported by the tests) can forge the JUnit file
on purpose; that needs a process boundary we do not have. A task with a ``test_log_parser`` (non-pytest runners:
Django, sympy) is graded from its test command's output instead, which that process can print at will.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from harness.grading_apply import (
    STATE_FILE,
    AppliedState,
    RestorePlan,
    build_apply_script,
    interpreter_of,
    parse_state,
    plan_restore,
)
from harness.grading_paths import is_test_path, shadow_candidate_in
from harness.grading_script import build_test_script, parse_eval_markers
from harness.sandbox import Sandbox
from harness.schema import Grade, TaskInstance, TestStatus

log = logging.getLogger(__name__)

GRADER_VERSION = "grade@v2"  # v2: grader-owned pytest config, no plugin autoload, foreign files restored
InfraPolicy = Literal["reset", "flag"]
_FAILING: frozenset[str] = frozenset({"failed", "error"})
_RANK: dict[str, int] = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_INFRA_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg"})
_JUNK_PATHSPECS = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc", ":(exclude,glob).pytest_cache/**")


# ------------------------------------------------------------------------------------------------ parsing (pure)


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) pytest's junitxml plugin writes for ``nodeid`` (copy of ``mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def parse_junit_xml(text: str) -> dict[tuple[str, str], TestStatus]:
    """Per-testcase status from pytest's JUnit XML. Several entries for one test keep the worst status.

    Raises ``ValueError`` if the text is not a JUnit document.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"junit xml does not parse: {exc}") from exc
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"junit xml root is <{root.tag}>, expected <testsuites> or <testsuite>")
    out: dict[tuple[str, str], TestStatus] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        tags = {child.tag for child in case}
        status: TestStatus
        if "error" in tags:
            status = "error"
        elif "failure" in tags:
            status = "failed"
        elif "skipped" in tags:
            status = "skipped"
        else:
            status = "passed"
        if key not in out or _RANK[status] > _RANK[out[key]]:
            out[key] = status
    return out


_TEXT_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS)\s+(\S+(?:\[[^\]]*\])?)")
_TEXT_MAP: dict[str, TestStatus] = {
    "PASSED": "passed", "FAILED": "failed", "ERROR": "error", "XFAIL": "skipped", "XPASS": "passed",
}


def parse_pytest_text(text: str) -> dict[str, TestStatus]:
    """Node id → status from pytest's ``-rA`` short summary. Diagnostic only: any process can print these lines."""
    out: dict[str, TestStatus] = {}
    for line in text.splitlines():
        m = _TEXT_LINE.match(line.strip())
        if m:
            out[m.group(2)] = _TEXT_MAP[m.group(1)]
    return out


def statuses_for(nodeids: Iterable[str], junit: dict[tuple[str, str], TestStatus]) -> dict[str, TestStatus]:
    """Status of each requested node id; ``missing`` when the JUnit file has no such testcase."""
    return {nid: junit.get(junit_key(nid), "missing") for nid in nodeids}


# ------------------------------------------------------------------------------------------------ deciding (pure)


def decide_grade(
    *,
    f2p: list[str],
    p2p: list[str],
    junit: dict[tuple[str, str], TestStatus] | None,
    exit_code: int | None,
    timed_out: bool = False,
    patch_applied: bool = True,
    tests_touched: bool = False,
    text_statuses: dict[str, TestStatus] | None = None,
    duration_s: float = 0.0,
    log: dict[str, TestStatus] | None = None,
    log_parser: str = "junit",
) -> Grade:
    """Decide a ``Grade`` from parsed results. ``valid=False`` grades go to the ambiguous path (HARNESS §7.6).

    ``resolved`` needs: the patch applied, a report, exit code 0, every F2P ``passed`` and every P2P
    ``passed`` or ``skipped``. The report is the JUnit one (``junit``, keyed like pytest's junitxml) or, for a task
    with a ``test_log_parser`` other than ``junit``, the statuses that parser read from the test command's output
    (``log``, keyed by test id; ``parse_source="test-log"``). The same rules apply to both. Text statuses of the
    JUnit path are recorded (``parse_source="text"``) but never resolve.
    """
    common = dict(exit_code=exit_code, tests_touched=tests_touched, duration_s=duration_s,
                  grader_version=GRADER_VERSION)
    if not patch_applied:
        return Grade(resolved=False, valid=True, reason="PATCH_APPLY_FAILED: candidate patch did not apply",
                     patch_applied=False, parse_source="none", **common)
    if timed_out:
        return Grade(resolved=False, valid=False, reason="GRADE_TIMEOUT: test command timed out",
                     parse_source="none", **common)
    if log_parser != "junit":
        if log is None:
            return Grade(resolved=False, valid=False, parse_source="none", **common,
                         reason=f"NO_TEST_LOG: the test command left no log (exit code {exit_code})")
        found, what = log, f"the {log_parser} test log"
        f2p_s, p2p_s = {t: log.get(t, "missing") for t in f2p}, {t: log.get(t, "missing") for t in p2p}
        common["parse_source"] = "test-log"
    elif junit is None:
        text = text_statuses or {}
        f2p_s = {t: text.get(t, "missing") for t in f2p}
        p2p_s = {t: text.get(t, "missing") for t in p2p}
        return Grade(resolved=False, valid=False, f2p=f2p_s, p2p=p2p_s,
                     reason=f"NO_JUNIT: pytest wrote no JUnit report (exit code {exit_code}); text is not trusted",
                     parse_source="text" if text else "none", **common)
    else:
        found, what = junit, "the JUnit report"
        f2p_s, p2p_s = statuses_for(f2p, junit), statuses_for(p2p, junit)
    any_fail = any(s in _FAILING for s in found.values())
    if exit_code == 0 and any_fail:
        return Grade(resolved=False, valid=False, f2p=f2p_s, p2p=p2p_s,
                     reason="INVALID_GRADE: exit code 0 but the report has failures", **common)
    if exit_code != 0 and not any_fail and not _has_missing(f2p_s, p2p_s):
        return Grade(resolved=False, valid=False, f2p=f2p_s, p2p=p2p_s,
                     reason=f"INVALID_GRADE: exit code {exit_code} but no test failed", **common)
    if not found:
        return Grade(resolved=False, valid=False, f2p=f2p_s, p2p=p2p_s,
                     reason=f"NO_TESTS_COLLECTED: {what} has no test results (exit code {exit_code})", **common)
    bad_f2p = sorted(t for t, s in f2p_s.items() if s != "passed")
    bad_p2p = sorted(t for t, s in p2p_s.items() if s not in ("passed", "skipped"))
    resolved = exit_code == 0 and not bad_f2p and not bad_p2p
    reason = "RESOLVED" if resolved else _fail_reason(bad_f2p, bad_p2p, exit_code)
    return Grade(resolved=resolved, valid=True, f2p=f2p_s, p2p=p2p_s, reason=reason, **common)


def _has_missing(*maps: dict[str, TestStatus]) -> bool:
    return any(s == "missing" for m in maps for s in m.values())


def _fail_reason(bad_f2p: list[str], bad_p2p: list[str], exit_code: int | None) -> str:
    parts = []
    if bad_f2p:
        parts.append(f"{len(bad_f2p)} FAIL_TO_PASS not passing (first: {bad_f2p[0]})")
    if bad_p2p:
        parts.append(f"{len(bad_p2p)} PASS_TO_PASS broken (first: {bad_p2p[0]})")
    if not parts:
        parts.append(f"exit code {exit_code}")
    return "TESTS_FAILED: " + "; ".join(parts)


# ------------------------------------------------------------------------------------------------ patches (pure)

_DIFF_GIT = re.compile(r"^diff --git a/(.+?) b/(.+)$")
_DIFF_PLUS = re.compile(r"^(?:\+\+\+|---) (?:[ab]/)?(.+?)(?:\t.*)?$")


def touched_paths(patch: str) -> list[str]:
    """Repository-relative paths a unified (git or plain) diff touches, in order, without duplicates."""
    seen: dict[str, None] = {}
    for line in patch.splitlines():
        m = _DIFF_GIT.match(line)
        if m:
            seen.setdefault(m.group(1), None)
            seen.setdefault(m.group(2), None)
            continue
        m = _DIFF_PLUS.match(line)
        if m and m.group(1) != "/dev/null":
            seen.setdefault(m.group(1), None)
    return list(seen)


def is_test_infra_path(path: str) -> bool:
    """Files that configure how pytest runs (pyproject.toml counts only if its pytest table changed)."""
    return path.rsplit("/", 1)[-1] in _INFRA_NAMES


def shadow_candidate(path: str) -> str | None:
    """The top-level name if ``path`` could shadow the test runner or a standard-library module (``python -m
    pytest`` puts the repository root first on ``sys.path``), else None. The eval script removes such an entry
    only when it did not exist at base, so a repository's own ``test/`` or ``code/`` folder is left alone.
    ``harness.grading_paths.shadow_candidate_in`` also looks under the test command's ``PYTHONPATH`` roots."""
    return shadow_candidate_in(path)


def test_files_of(nodeids: Iterable[str]) -> list[str]:
    """The files holding the given pytest node ids."""
    return sorted({nid.split("::", 1)[0] for nid in nodeids if "::" in nid or nid.endswith(".py")})


def patch_touches_tests(patch: str, protected: Iterable[str] = ()) -> bool:
    """True when the patch touches a test file, test infrastructure, a protected path, or pyproject.toml.

    pyproject.toml is flagged here on any change; ``grade_patch`` narrows it to a changed ``[tool.pytest*]``.
    """
    protected_set = set(protected)
    return any(
        p in protected_set or is_test_path(p) or is_test_infra_path(p) or p.endswith("pyproject.toml")
        for p in touched_paths(patch)
    )


# ------------------------------------------------------------------------------------------------ sandbox wrappers


class GraderError(RuntimeError):
    """The grader itself failed (script died, tree could not be reset): INFRA ``GRADER_CRASH``, retried."""

    kind = "GRADER_CRASH"


class PatchTooLarge(ValueError):
    """The agent's diff exceeded the output cap: an agent outcome (``patch_apply_failed``), not infra."""


def extract_patch(sandbox: Sandbox, base_commit: str, *, timeout_s: float = 120.0) -> str:
    """``git add -A && git diff --binary --cached <base>`` in the agent's sandbox (.gitignore respected; bytecode
    and pytest caches excluded from the diff even without a .gitignore).

    Raises ``GraderError`` when git fails (no repository, unknown base) and ``PatchTooLarge`` on overflow;
    ``SandboxUnavailable`` from the sandbox propagates (infra).
    """
    excludes = " ".join(shlex.quote(p) for p in _JUNK_PATHSPECS)
    cmd = (
        "git -c safe.directory='*' add -A >/dev/null && "
        f"git -c safe.directory='*' diff --binary --cached {shlex.quote(base_commit)} -- . {excludes}"
    )
    res = sandbox.exec(cmd, timeout=timeout_s)
    if res.timed_out or res.returncode != 0:
        raise GraderError(f"patch extraction failed (exit {res.returncode}): {res.stderr.strip()[-500:]}")
    if res.truncated:
        raise PatchTooLarge("the agent's diff is larger than the sandbox output cap")
    return res.stdout


def extract_patch_host(sandbox: Sandbox, base_repo: Path, base_commit: str, *, max_bytes: int = 64 << 20) -> str:
    """The agent's changes, computed on the HOST: copy the sandbox's work tree out, drop whatever ``.git`` it has,
    and diff it against the harness's own pristine base repository (a temporary index, ``git add -A``,
    ``git diff --binary --cached <base>``; .gitignore respected, bytecode and pytest caches excluded).

    Unlike ``extract_patch`` nothing the agent did to ``.git`` (deleting it, rewriting HEAD or objects) can
    change the result or turn the episode into an infrastructure error. Raises ``PatchTooLarge`` (agent) for a
    diff over ``max_bytes`` or a work tree that cannot be copied out safely (e.g. links leaving it), and
    ``GraderError`` (infra) when host git fails.
    """
    with tempfile.TemporaryDirectory(prefix="tgsuite-extract-") as tmp:
        work = Path(tmp) / "work"
        try:
            sandbox.copy_out(".", work)
        except tarfile.TarError as exc:
            raise PatchTooLarge(f"the work tree cannot be copied out safely: {exc}") from exc
        git_entry = work / ".git"
        if git_entry.is_dir() and not git_entry.is_symlink():
            shutil.rmtree(git_entry)
        elif git_entry.exists() or git_entry.is_symlink():
            git_entry.unlink()
        # New objects go to a temp object store (the base repo's is read through alternates): the pristine
        # repository is copied into later sandboxes and must never hold another episode's blobs.
        (Path(tmp) / "objects").mkdir()
        env = {**os.environ, "GIT_DIR": str(Path(base_repo) / ".git"), "GIT_WORK_TREE": str(work),
               "GIT_INDEX_FILE": str(Path(tmp) / "index"), "GIT_OBJECT_DIRECTORY": str(Path(tmp) / "objects"),
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(Path(base_repo) / ".git" / "objects")}
        git = ["git", "-c", "safe.directory=*", "-c", "core.autocrlf=false"]
        for args in (["read-tree", base_commit], ["add", "-A"]):
            res = subprocess.run(git + args, cwd=work, env=env, capture_output=True, timeout=300)
            if res.returncode != 0:
                raise GraderError(f"host git {args[0]} failed: {res.stderr.decode(errors='replace')[-500:]}")
        res = subprocess.run(git + ["diff", "--binary", "--cached", base_commit, "--", ".", *_JUNK_PATHSPECS],
                             cwd=work, env=env, capture_output=True, timeout=300)
        if res.returncode != 0:
            raise GraderError(f"host git diff failed: {res.stderr.decode(errors='replace')[-500:]}")
    if len(res.stdout) > max_bytes:
        raise PatchTooLarge(f"the agent's diff is {len(res.stdout)} bytes (limit {max_bytes})")
    return res.stdout.decode("utf-8", errors="replace")


def grade_patch(
    instance: TaskInstance,
    patch: str,
    sandbox: Sandbox,
    *,
    timeout_s: float = 900.0,
    infra_policy: InfraPolicy = "reset",
    excluded_tests: Iterable[str] = (),
    artifacts: dict[str, str] | None = None,
) -> Grade:
    """Grade ``patch`` in ``sandbox``, which must be FRESH: the instance repository at ``base_commit`` in its
    work directory, never the agent's sandbox. ``excluded_tests`` (flaky, from validation) are not run.

    ``artifacts``, when given, is filled with ``eval.sh``, ``test_output.txt``, ``junit.xml`` for the caller to
    store. Raises ``GraderError`` (infra) when the script cannot run; ``SandboxUnavailable`` propagates.
    """
    if not timeout_s > 0:
        raise ValueError(f"grade timeout {timeout_s!r} s must be > 0 (timeout 0 would mean no limit); fix: e.g. "
                         "--grade-timeout 900")
    t0 = time.monotonic()
    skip = set(excluded_tests)
    f2p = [t for t in instance.FAIL_TO_PASS if t not in skip]
    p2p = [t for t in instance.PASS_TO_PASS if t not in skip]
    restore = sorted(set(touched_paths(instance.test_patch)) | set(test_files_of(f2p + p2p)))
    grader_dir = f"/tmp/tgsuite-grade-{uuid.uuid4().hex[:12]}"
    apply_script = build_apply_script(
        base_commit=instance.base_commit, candidate_patch=patch, test_patch=instance.test_patch,
        grader_dir=grader_dir, python=interpreter_of(instance.test_cmd), sys_path_files=restore)
    res1 = sandbox.exec(["bash", "-s"], input=apply_script.encode(), timeout=600)
    stdout, stderr, script = res1.stdout, res1.stderr, apply_script
    markers = parse_eval_markers(stdout)
    plan: RestorePlan | None = None
    res = res1
    if markers.reset_failed or (not markers.apply_failed and ">>>>> State Written" not in stdout):
        _cleanup(sandbox, grader_dir)
        if artifacts is not None:
            artifacts.update({"eval.sh": script, "test_output.txt": stdout + STDERR_SEPARATOR + stderr})
        raise GraderError(f"grading sandbox could not reset the repository to {instance.base_commit} or apply the "
                          f"patch (exit {res1.returncode}): {stderr.strip()[-300:]}")
    if not markers.apply_failed:
        plan = plan_restore(_read_state(sandbox, grader_dir), test_cmd=instance.test_cmd)
        test_script = build_test_script(
            base_commit=instance.base_commit, restore_files=restore,
            infra_files=plan.foreign if infra_policy == "reset" else [],
            test_cmd=instance.test_cmd, test_ids=f2p + p2p, grader_dir=grader_dir, timeout_s=timeout_s,
            reset_pyproject=infra_policy == "reset", shadow=plan.shadow, log_parser=instance.test_log_parser)
        res = sandbox.exec(["bash", "-s"], input=test_script.encode(), timeout=timeout_s + 120)
        stdout, stderr = stdout + res.stdout, stderr + res.stderr
        script = f"{apply_script}\n# ---- step 2 (harness.grading_script) ----\n{test_script}"
        markers = parse_eval_markers(stdout)
    is_junit = instance.test_log_parser == "junit"
    report = f"{grader_dir}/out/{'junit.xml' if is_junit else 'test.log'}"
    report_text = _read_report(sandbox, report) if markers.exit_code is not None else None
    _cleanup(sandbox, grader_dir)
    if artifacts is not None:
        artifacts.update({"eval.sh": script, "test_output.txt": stdout + STDERR_SEPARATOR + stderr})
        if report_text is not None:
            artifacts["junit.xml" if is_junit else TEST_LOG_ARTIFACT] = report_text
    if markers.reset_failed:
        raise GraderError(f"grading sandbox could not reset the repository to {instance.base_commit}")
    changed = plan.changed if plan is not None else []
    touched_tests = bool(plan and plan.foreign) or markers.git_dir_written or any(p in restore for p in changed)
    junit_text, log_text = (report_text, None) if is_junit else (None, report_text)
    grade = grade_from_output(f2p=f2p, p2p=p2p, stdout=stdout, junit_text=junit_text,
                              touched_tests=touched_tests, duration_s=time.monotonic() - t0,
                              sandbox_timed_out=res.timed_out, instance_id=instance.instance_id,
                              oom_killed=bool(getattr(res, "oom_killed", False)),
                              log_parser=instance.test_log_parser, log_text=log_text)
    if grade is None:
        raise GraderError(f"eval script ended without an exit-code marker (rc {res.returncode}): "
                          f"{stderr.strip()[-300:]}")
    return grade


def _read_state(sandbox: Sandbox, grader_dir: str) -> AppliedState:
    """Step 1's state file (what the apply really changed). GraderError (infra) when it cannot be read."""
    text = _read_report(sandbox, f"{grader_dir}/{STATE_FILE}")
    try:
        if text is None:
            raise ValueError("cat failed")
        return parse_state(text.encode())
    except ValueError as exc:
        raise GraderError(f"the grader's state file could not be read back: {exc}") from exc


STDERR_SEPARATOR = "\n--- stderr ---\n"
TEST_LOG_ARTIFACT = "test_log.txt"  # grade/ file holding a log-parsed test command's output (junit.xml otherwise)


def grade_from_output(*, f2p: list[str], p2p: list[str], stdout: str, junit_text: str | None, touched_tests: bool,
                      duration_s: float = 0.0, sandbox_timed_out: bool = False,
                      instance_id: str = "", oom_killed: bool = False, log_parser: str = "junit",
                      log_text: str | None = None) -> Grade | None:
    """Pure: the Grade from the eval script's stdout and the JUnit text, or for ``log_parser`` other than
    ``junit`` the test command's log parsed by that swebench parser (live grading and offline ``--regrade``).
    Returns None when the script died before printing an exit code and the sandbox did not time out."""
    markers = parse_eval_markers(stdout)
    oom_killed = oom_killed or markers.oom_killed
    common = dict(tests_touched=touched_tests or markers.pyproject_pytest_changed or markers.shadow_removed,
                  duration_s=duration_s)
    if markers.apply_failed:
        return decide_grade(f2p=f2p, p2p=p2p, junit=None, exit_code=None, patch_applied=False, **common)
    if markers.test_patch_failed:
        return Grade(resolved=False, valid=False, reason="TEST_PATCH_FAILED: hidden test patch did not apply",
                     parse_source="none", grader_version=GRADER_VERSION, **common)
    if markers.exit_code is None:
        if oom_killed:  # the memory limit killed the script itself before it could print the exit code
            return Grade(resolved=False, valid=False, reason="TESTS_OOM_KILLED: the test run hit the memory limit",
                         exit_code=None, parse_source="none", grader_version=GRADER_VERSION, **common)
        if sandbox_timed_out:
            return decide_grade(f2p=f2p, p2p=p2p, junit=None, exit_code=None, timed_out=True, **common)
        return None
    junit = None
    if junit_text is not None:
        try:
            junit = parse_junit_xml(junit_text)
        except ValueError as exc:
            log.warning("%s: %s", instance_id, exc)
    parsed = None
    if log_parser != "junit" and log_text is not None:
        from harness.swebench_compat import parse_log_as

        parsed = parse_log_as(log_parser, log_text, instance_id=instance_id, f2p=f2p, p2p=p2p)
    if oom_killed and markers.exit_code in (137, -9):
        return Grade(resolved=False, valid=False, reason="TESTS_OOM_KILLED: the test run hit the memory limit",
                     exit_code=markers.exit_code, parse_source="none", grader_version=GRADER_VERSION, **common)
    return decide_grade(
        f2p=f2p, p2p=p2p, junit=junit, exit_code=markers.exit_code, timed_out=markers.exit_code in (124, 137),
        text_statuses=parse_pytest_text(stdout), log=parsed, log_parser=log_parser, **common,
    )


def _read_report(sandbox: Sandbox, path: str) -> str | None:
    res = sandbox.exec(["cat", path], timeout=60)
    if res.returncode != 0:
        return None
    if res.truncated:
        try:
            return sandbox.read_file(path, max_bytes=256 << 20).decode("utf-8", "replace")
        except (OSError, ValueError) as exc:
            log.warning("test report %s too large to read back: %s", path, exc)
            return None
    return res.stdout


def _cleanup(sandbox: Sandbox, grader_dir: str) -> None:
    try:
        sandbox.exec(["rm", "-rf", grader_dir], timeout=60)
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort; the sandbox is discarded anyway
        log.debug("cleanup of %s failed: %s", grader_dir, exc)
