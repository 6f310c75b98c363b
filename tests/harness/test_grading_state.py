"""Grading decides from the repository's state after the patch, never from the patch text (issue #38 item 1-2).

Every patch here is one of the audit's spoofs: it does NOT fix ``add`` but tries to make the hidden tests pass
through a module that shadows one the interpreter imports (``attr/``, a compiled ``argparse.so``, a module pytest
imports, on the repository root or a ``PYTHONPATH`` root), through names the old text parser read wrongly (quoted
names, ``x/`` prefixes, a context diff with space-separated dates), through bytecode (a sourceless ``.pyc``, an
unchecked-hash ``__pycache__`` entry) or through a git hook that ``patch`` writes into ``.git``. Each is graded with
real git, ``patch`` and pytest in the directory sandbox (and the import-shadowing ones in Docker).
"""

from __future__ import annotations

import base64
import importlib.util
import py_compile
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from harness.grading import grade_patch
from harness.grading_apply import AppliedState, interpreter_of, parse_state, plan_restore
from harness.grading_paths import is_agent_source, module_name_of, shadowing_entries
from tests.harness_fakes import CALC_FIXED, DirSandbox, _git, diff_of, make_calc_src_task, make_calc_task

# Runs when the shadowing module is imported: make ``calc.add`` add (what the fix would do).
MONKEYPATCH = "import calc\ncalc.add = lambda a, b: a + b\n"
FORGE_PLUGIN = (  # marks every test report as passed
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
FAKE_PYTEST = (  # a module named pytest that writes a passing JUnit report and exits 0
    "import os, sys\nfor a in sys.argv:\n    if a.startswith('--junitxml='):\n        p = a.split('=', 1)[1]\n"
    "        os.makedirs(os.path.dirname(p), exist_ok=True)\n        open(p, 'w').write('<testsuites><testsuite>"
    "<testcase classname=\"tests.test_calc\" name=\"test_add\"/><testcase classname=\"tests.test_calc\" "
    "name=\"test_sub\"/></testsuite></testsuites>')\nsys.exit(0)\n"
)
# A shadowing ``attr`` that hands pytest the real one (so pytest still runs) after making ``calc.add`` add.
ATTR_SHADOW = (
    "import importlib, os, sys\nsys.modules.pop(__name__)\nsaved = sys.path[:]\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.', os.getcwd()) and not p.endswith('/src')]\n"
    "real = importlib.import_module('attr')\nsys.path[:] = saved\n" + MONKEYPATCH
)
HOOK = "#!/bin/sh\nprintf 'def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n    return a - b\\n' > calc.py\n"


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory):
    return make_calc_task(tmp_path_factory.mktemp("state"))


@pytest.fixture(scope="module")
def calc_src(tmp_path_factory: pytest.TempPathFactory):
    """The calc task with its code under ``src/`` and ``PYTHONPATH=src python -m pytest``."""
    return make_calc_src_task(tmp_path_factory.mktemp("src"))


def pyc_of(source: str, *, unchecked: bool = False) -> bytes:
    """``source`` compiled by this interpreter (the one the directory sandbox's pytest runs)."""
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "m.py", Path(d) / "m.pyc"
        src.write_text(source)
        mode = py_compile.PycInvalidationMode.UNCHECKED_HASH if unchecked else None
        py_compile.compile(str(src), cfile=str(out), doraise=True, invalidation_mode=mode)
        return out.read_bytes()


def _grade(task, patch: str, sandbox=None, **kw):
    inst, repo = task
    with (sandbox or DirSandbox(repo)) as sb:
        return grade_patch(inst, patch, sb, timeout_s=60, **kw)


def _pytest_imports_pygments() -> bool:
    return importlib.util.find_spec("pygments") is not None


# ---------------------------------------------------------------- import shadowing (item 1)


@pytest.mark.skipif(not _pytest_imports_pygments(), reason="pygments is not installed")
@pytest.mark.parametrize("where", ["", "src/"])
def test_module_the_test_runner_imports_is_not_shadowed(calc, calc_src, where: str) -> None:
    """pytest imports ``pygments`` (installed, not the standard library, not on any fixed list)."""
    task = calc_src if where else calc
    g = _grade(task, diff_of(task[1], {f"{where}pygments/__init__.py": MONKEYPATCH}))
    assert not g.resolved and g.tests_touched, g.reason


def test_compiled_module_shadowing_the_standard_library_is_removed(calc) -> None:
    """A compiled ``argparse`` (here bytes that do not load: pytest would crash on it) is deleted before the tests
    run: with the real fix the patch resolves, and the grade is flagged."""
    inst, repo = calc
    so = f"argparse.cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"
    for name in (so, "argparse.so"):
        g = _grade(calc, diff_of(repo, {name: b"\x7fELF not really", "calc.py": CALC_FIXED.encode()}))
        assert g.resolved and g.tests_touched, (name, g.reason)
        g = _grade(calc, diff_of(repo, {name: b"\x7fELF not really"}))
        assert not g.resolved, (name, g.reason)


def test_repository_own_top_level_package_is_kept(calc) -> None:
    """An entry that exists at base is the repository's own, never removed (here a package named ``attr``)."""
    inst, repo = make_calc_task(Path(tempfile.mkdtemp(prefix="tgs-own-")), "calc-own")
    (repo / "attr").mkdir()
    (repo / "attr" / "__init__.py").write_text("X = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "own attr")
    inst = inst.model_copy(update={"base_commit": _git(repo, "rev-parse", "HEAD").strip()})
    patch = diff_of(repo, {"attr/__init__.py": "X = 2\n", "calc.py": CALC_FIXED})
    g = _grade((inst, repo), patch)
    assert g.resolved and not g.tests_touched, g.reason


# ---------------------------------------------------------------- what the patch really wrote (item 2)


def test_quoted_names_are_seen_as_written(calc) -> None:
    patch = ('diff --git "a/conftest.py" "b/conftest.py"\nnew file mode 100644\n--- /dev/null\n'
             '+++ "b/conftest.py"\n@@ -0,0 +1,' + str(FORGE_PLUGIN.count("\n")) + " @@\n"
             + "".join("+" + line + "\n" for line in FORGE_PLUGIN.splitlines()))
    g = _grade(calc, patch)
    assert g.patch_applied and not g.resolved and g.tests_touched, g.reason


def test_foreign_prefix_is_seen_as_written(calc) -> None:
    body = "".join("+" + line + "\n" for line in FAKE_PYTEST.splitlines())
    patch = f"--- /dev/null\n+++ x/pytest.py\n@@ -0,0 +1,{FAKE_PYTEST.count(chr(10))} @@\n{body}"
    g = _grade(calc, patch)
    assert g.patch_applied and not g.resolved and g.tests_touched, g.reason


def test_context_diff_with_space_separated_dates(calc) -> None:
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    lines = FAKE_PYTEST.splitlines()
    patch = ("*** /dev/null 1970-01-01 00:00:00\n--- b/pytest.py 2024-01-01 00:00:00\n***************\n"
             f"*** 0 ****\n--- 1,{len(lines)} ----\n" + "".join(f"+ {line}\n" for line in lines))
    g = _grade(calc, patch)
    assert g.patch_applied and not g.resolved and g.tests_touched, g.reason


def test_sourceless_bytecode_is_not_imported(calc) -> None:
    inst, repo = calc
    g = _grade(calc, diff_of(repo, {"calc.py": None, "calc.pyc": pyc_of(CALC_FIXED)}))
    assert not g.resolved and g.tests_touched, g.reason


def test_unchecked_hash_bytecode_is_not_imported(calc) -> None:
    inst, repo = calc
    tag = sys.implementation.cache_tag
    g = _grade(calc, diff_of(repo, {f"__pycache__/calc.{tag}.pyc": pyc_of(CALC_FIXED, unchecked=True)}))
    assert not g.resolved and g.tests_touched, g.reason


def test_git_hook_written_by_patch_never_runs(calc) -> None:
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    body = "".join("+" + line + "\n" for line in HOOK.splitlines())
    patch = ("diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n"
             f"--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,{HOOK.count(chr(10))} @@\n{body}")
    artifacts: dict[str, str] = {}
    g = _grade(calc, patch, artifacts=artifacts)
    assert ">>>>> Applied patch-fuzz" in artifacts["test_output.txt"], artifacts["test_output.txt"][-2000:]
    assert not g.resolved and g.tests_touched, g.reason


def test_git_config_written_by_patch_never_runs(calc) -> None:
    """``core.fsmonitor`` in ``.git/config`` would run a command on every git status/diff of the grader."""
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    marker = Path(tempfile.mkdtemp(prefix="tgs-fsmon-")) / "ran"
    cfg = f"[core]\n\tfsmonitor = touch {marker}\n\thooksPath = hooks-evil\n"
    body = "".join("+" + line + "\n" for line in cfg.splitlines())
    patch = f"--- /dev/null\n+++ b/.git/config\n@@ -0,0 +1,{cfg.count(chr(10))} @@\n{body}"
    g = _grade(calc, patch)
    assert not g.resolved and not marker.exists(), g.reason


def test_real_fix_next_to_junk_still_resolves(calc) -> None:
    """Plain source changes (a new module, a README, a deleted file) are the agent's: kept, not flagged."""
    inst, repo = calc
    g = _grade(calc, diff_of(repo, {"calc.py": CALC_FIXED, "helpers/extra.py": "X = 1\n", "NOTES.md": "x\n",
                                    "pyproject.toml": None}))
    assert g.resolved and not g.tests_touched, g.reason


# ---------------------------------------------------------------- pure parts


def test_pure_state_and_plan() -> None:
    def b64(items: list[str]) -> bytes:
        return base64.b64encode("".join(f"{i}\0" for i in items).encode())

    text = b"\n".join([
        b"modules " + base64.b64encode(b"attr\nargparse\npygments\n"),
        b"before " + b64(["pkg.egg-info/PKG-INFO"]),
        b"tracked " + b64(["M", "calc.py", "D", "tests/test_calc.py", "A", "attr/__init__.py"]),
        b"after " + b64(["pkg.egg-info/PKG-INFO", "argparse.so", "src/pygments/x.py", "sub/", "a.pyc"]),
        b"written " + b64(["./pkg.egg-info/PKG-INFO", "./calc.py"]),
        b"basedirs " + b64([".", "tests"]),
    ])
    st = parse_state(text)
    assert isinstance(st, AppliedState) and st.basedirs == ("tests",)
    assert st.new == ["a.pyc", "argparse.so", "attr/__init__.py", "src/pygments/x.py", "sub/"]
    plan = plan_restore(st, test_cmd="PYTHONPATH=src python -m pytest")
    assert plan.foreign == ["a.pyc", "pkg.egg-info/PKG-INFO", "sub", "tests/test_calc.py"]
    assert plan.shadow == ["argparse.so", "attr", "src/pygments"]
    with pytest.raises(ValueError, match="lacks"):
        parse_state(b"modules \n")
    assert module_name_of("argparse.cpython-311-x86_64-linux-gnu.so", False) == "argparse"
    assert module_name_of("README.md", False) is None and module_name_of("attr", True) == "attr"
    assert shadowing_entries(["json.py", "calc.py"], [], []) == ["json.py"]
    assert not is_agent_source("__pycache__/calc.cpython-311.pyc") and is_agent_source("calc.py")
    assert interpreter_of("PYTHONPATH=src /opt/py/bin/python3.11 -m pytest") == "/opt/py/bin/python3.11"
    assert interpreter_of("./tests/runtests.py") == "python" and interpreter_of("'unbalanced") == "python"


# ---------------------------------------------------------------- Docker: the audit's own cases


@pytest.mark.docker
def test_import_shadowing_in_docker(calc, calc_src, docker_provider) -> None:
    """The image's pytest imports ``attr``: a new ``attr/`` on the root or a PYTHONPATH root ran code in pytest."""
    inst, repo = calc
    cases = [(calc, {"attr/__init__.py": ATTR_SHADOW}, False), (calc_src, {"src/attr/__init__.py": ATTR_SHADOW}, False),
             (calc, {"attr/__init__.py": ATTR_SHADOW, "calc.py": CALC_FIXED}, True)]
    for task, edits, expected in cases:
        with docker_provider.create(instance_id="state") as sb:
            sb.copy_in(task[1], ".")
            g = _grade(task, diff_of(task[1], edits), sandbox=sb)
        assert g.resolved is expected and g.tests_touched, (edits, g.reason)
    with docker_provider.create(instance_id="state-so") as sb:
        sb.copy_in(repo, ".")
        g = _grade(calc, diff_of(repo, {"argparse.so": b"\x7fELF", "calc.py": CALC_FIXED.encode()}), sandbox=sb)
    assert g.resolved and g.tests_touched, g.reason
    hook = "".join("+" + line + "\n" for line in HOOK.splitlines())
    patch = ("diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n"
             f"--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,{HOOK.count(chr(10))} @@\n{hook}")
    with docker_provider.create(instance_id="state-hook") as sb:
        sb.copy_in(repo, ".")
        g = _grade(calc, patch, sandbox=sb)
    assert not g.resolved and g.tests_touched, g.reason

