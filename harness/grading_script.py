"""Step 2 of grading a patch, the bash script that tests the applied tree, and the markers both steps print (pure;
see harness.grading; step 1, ``harness.grading_apply``, set up the grader directory outside the repository, a
``python`` shim when the image has only ``python3``, reset to base and applied the candidate with the repository's
``.git`` moved out of the work tree).

Order inside the sandbox: remove new top-level entries that would shadow an importable module; restore every
changed path that is not agent source (policy ``reset``); restore every hidden-test file to base and apply the
hidden test patch; move ``.git`` back; run
the tests with JUnit XML written into the grader directory (or, for a task with a ``test_log_parser``, its test
command as given with its output kept there for the log parser); print the exit code. Markers printed before
``>>>>> Start Test Output`` are the script's own; test output cannot forge them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from harness.grading_paths import runnable_test_cmd


@dataclass(frozen=True)
class EvalMarkers:
    applied_with: str | None
    apply_failed: bool
    test_patch_failed: bool
    reset_failed: bool
    exit_code: int | None
    pyproject_pytest_changed: bool
    shadow_removed: bool = False
    git_dir_written: bool = False  # the candidate wrote into .git (moved away while it was applied; deleted)
    oom_killed: bool = False  # the cgroup's OOM-kill counter rose while the tests ran


def build_test_script(
    *,
    base_commit: str,
    restore_files: list[str],
    infra_files: list[str],
    test_cmd: str,
    test_ids: list[str],
    grader_dir: str,
    timeout_s: float,
    reset_pyproject: bool = True,
    shadow: Iterable[str] = (),
    log_parser: str = "junit",
) -> str:
    """Step 2's bash script, run (``bash -s``) in the grading sandbox after ``harness.grading_apply``'s step 1
    left the applied tree, the hidden test patch and the repository's ``.git`` (moved out of the work tree) in
    ``grader_dir``. Pure; stored, after step 1's, as eval.sh."""
    q = shlex.quote
    return (
        _script_setup(q(grader_dir), q(base_commit))
        + _script_restore(" ".join(q(f) for f in infra_files), " ".join(q(f) for f in restore_files),
                          reset_pyproject, " ".join(q(f) for f in shadow))
        + (_script_test(test_cmd, " ".join(q(t) for t in test_ids), timeout_s) if log_parser == "junit"
           else _script_test_log(test_cmd, timeout_s))
    )


def _script_setup(G: str, B: str) -> str:  # noqa: N803
    return f"""set -u
git() {{ command git -c safe.directory='*' -c advice.detachedHead=false -c core.hooksPath=/dev/null "$@"; }}
G={G}; B={B}
[ -d "$G/git" ] || {{ echo '>>>>> Reset Failed'; exit 90; }}
export GIT_DIR="$G/git" GIT_WORK_TREE="$PWD"
[ -x "$G/bin/python" ] && export PATH="$G/bin:$PATH"
"""


_PYPROJECT_CHECK = """import sys
try:
    import tomllib
    a, b = (tomllib.load(open(p, "rb")).get("tool", {}) for p in sys.argv[1:3])
    pick = lambda t: {k: v for k, v in t.items() if k.startswith("pytest")}
    sys.exit(0 if pick(a) == pick(b) else 1)
except Exception:
    sys.exit(1)
"""


def _script_restore(infra: str, restore: str, reset_pyproject: bool, shadow: str) -> str:
    return f"""for t in {shadow}; do
  git cat-file -e "$B:$t" 2>/dev/null || {{ rm -rf -- "$t"; echo ">>>>> Shadow Removed $t"; }}
done
for f in {infra}; do git checkout -q "$B" -- "$f" 2>/dev/null || rm -rf -- "$f"; done
if [ -f pyproject.toml ] && ! git diff --quiet "$B" -- pyproject.toml 2>/dev/null; then
  git show "$B:pyproject.toml" > "$G/pyproject.base" 2>/dev/null || : > "$G/pyproject.base"
  if (cd / && python -I - "$G/pyproject.base" "$OLDPWD/pyproject.toml") <<'PYEOF'
{_PYPROJECT_CHECK}PYEOF
  then :; else echo '>>>>> Pyproject Pytest Changed'
    if [ {int(reset_pyproject)} = 1 ]; then git checkout -q "$B" -- pyproject.toml 2>/dev/null || rm -f pyproject.toml; fi
  fi
fi
for f in {restore}; do git checkout -q "$B" -- "$f" 2>/dev/null || rm -rf -- "$f"; done
if [ -s "$G/test.diff" ]; then
  git apply --binary --whitespace=nowarn "$G/test.diff" || {{ echo '>>>>> Test Patch Failed'; exit 0; }}
fi
unset GIT_DIR GIT_WORK_TREE
rm -rf -- .git && mv "$G/git" .git || {{ echo '>>>>> Reset Failed'; exit 90; }}
"""


def _script_test(test_cmd: str, ids: str, timeout_s: float) -> str:
    cmd = runnable_test_cmd(test_cmd)
    return f"""mkdir -p "$G/out"
{_script_grader_config()}{_OOM_FN}oom0=$(oom_kills)
echo '>>>>> Start Test Output'
export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
unset PYTEST_ADDOPTS PYTEST_PLUGINS PYTHONSTARTUP
timeout -k 5 {int(timeout_s)} {cmd} -c "$CFG" --rootdir="$PWD" -rA -p no:cacheprovider --junitxml="$G/out/junit.xml" {ids} < /dev/null
rc=$?
rm -f -- "$CFG"
printf '\\n>>>>> Test Exit Code: %s\\n' "$rc"
echo ">>>>> OOM Kills: ${{oom0:-?}} $(oom_kills)"
"""


def _script_test_log(test_cmd: str, timeout_s: float) -> str:
    """A non-pytest test command (``TaskInstance.test_log_parser``): run as given, its output (stdout and stderr
    together) kept in ``$G/out/test.log`` for the log parser and shown in the test output too."""
    cmd = runnable_test_cmd(test_cmd)
    return f"""mkdir -p "$G/out"
{_OOM_FN}oom0=$(oom_kills)
echo '>>>>> Start Test Output'
export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
unset PYTHONSTARTUP
timeout -k 5 {int(timeout_s)} {cmd} < /dev/null 2>&1 | tee "$G/out/test.log"
rc=${{PIPESTATUS[0]}}
printf '\\n>>>>> Test Exit Code: %s\\n' "$rc"
echo ">>>>> OOM Kills: ${{oom0:-?}} $(oom_kills)"
"""


# The memory cgroup's OOM-kill counter (cgroup v1, then v2), read before and after the tests: a test process the
# kernel killed for memory shows as exit 137 like a timeout's SIGKILL; the counter tells them apart.
_OOM_FN = """oom_kills() {
  { cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null; } |
    while read -r k v; do [ "$k" = oom_kill ] && echo "$v"; done
}
"""


def _script_grader_config() -> str:
    """The grader's own pytest configuration: the BASE commit's pytest section (pytest's own search order at the
    repository root), copied to a fresh name in the root (relative ``pythonpath``/``testpaths`` keep their
    meaning) and passed with ``-c``, so no configuration file the patch wrote is read; ``[pytest]`` when base
    has none. Runs after the patch is applied and the agent's non-source files are restored."""
    return """CFG="$PWD/.tgsuite-grader-$(basename "$G")"
found=''
for f in pytest.ini .pytest.ini pyproject.toml tox.ini setup.cfg; do
  git show "$B:$f" > "$G/cfg" 2>/dev/null || continue
  case "$f" in
    pytest.ini|.pytest.ini) found="$CFG.ini";;
    pyproject.toml) grep -qE '^[[:space:]]*\\[tool\\.pytest\\.ini_options\\]' "$G/cfg" && found="$CFG.toml";;
    tox.ini) grep -qE '^[[:space:]]*\\[pytest\\]' "$G/cfg" && found="$CFG.ini";;
    setup.cfg) grep -qE '^[[:space:]]*\\[tool:pytest\\]' "$G/cfg" && found="$CFG.cfg";;
  esac
  [ -n "$found" ] && break
done
if [ -n "$found" ]; then CFG="$found"; cp "$G/cfg" "$CFG"; else CFG="$CFG.ini"; printf '[pytest]\\n' > "$CFG"; fi
"""


_START = ">>>>> Start Test Output"
# Not anchored at the line start: output of a pytest killed mid-line (timeout, OOM) that an older script
# version printed the marker after, on the same line, still parses. The last marker wins (the script's own).
_EXIT_RE = re.compile(r">>>>> Test Exit Code: (-?\d+)\s*$", re.M)
_OOM_RE = re.compile(r"^>>>>> OOM Kills: (\S+) (\S+)\s*$", re.M)
_APPLIED_RE = re.compile(r"^>>>>> Applied (\S+)\s*$", re.M)


def parse_eval_markers(stdout: str) -> EvalMarkers:
    """Markers the eval script printed. Setup markers are read only before the first ``Start Test Output``
    marker and the exit code only from the last line of its kind, so test output cannot forge either."""
    head, started, tail = stdout.partition(_START)
    codes = _EXIT_RE.findall(tail) if started else []
    applied = _APPLIED_RE.findall(head)
    return EvalMarkers(
        applied_with=applied[0] if applied else None,
        apply_failed=">>>>> Patch Apply Failed" in head,
        test_patch_failed=">>>>> Test Patch Failed" in head,
        reset_failed=">>>>> Reset Failed" in head,
        exit_code=int(codes[-1]) if codes else None,
        pyproject_pytest_changed=">>>>> Pyproject Pytest Changed" in head,
        shadow_removed=">>>>> Shadow Removed" in head,
        git_dir_written=">>>>> Git Dir Written" in head,
        oom_killed=_oom_rose(_OOM_RE.findall(tail) if started else []),
    )


def _oom_rose(found: list[tuple[str, str]]) -> bool:
    """The last OOM-counter marker (the script's own, printed after the tests) shows the counter rising."""
    if not found:
        return False
    before, after = found[-1]
    return before.isdigit() and after.isdigit() and int(after) > int(before)


