"""Grading that files in the repository cannot bend (issue #14 item 3), hung/killed test runs (item 4) and
SWE-bench-style ``test_cmd`` with environment assignments (item 5).

Each spoof is a patch that does NOT fix the bug but tries to make the hidden tests pass through a file pytest or
the interpreter reads: a configuration file, a plugin entry point, an interpreter start-up hook, a test-package
``__init__.py``, a module shadowing pytest on the test command's ``PYTHONPATH``. Graded with real git and pytest
in the fake directory sandbox (fast), in ``LocalSandbox`` where plugin auto-loading is on, and in Docker.
"""

from __future__ import annotations

import pytest

from harness.grading import grade_patch, parse_eval_markers
from harness.grading_paths import foreign_paths, pythonpath_roots, runnable_test_cmd, shadow_candidates
from tests.harness_fakes import CALC_FIXED, DirSandbox, diff_of, make_calc_src_task, make_calc_task

FORGE_PLUGIN = (  # marks every test report as passed
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
MONKEYPATCH = "import calc\ncalc.add = lambda a, b: a + b\n"
FAKE_PYTEST = (  # a module named pytest that writes a passing JUnit report and exits 0
    "import os, sys\nfor a in sys.argv:\n    if a.startswith('--junitxml='):\n        p = a.split('=', 1)[1]\n"
    "        os.makedirs(os.path.dirname(p), exist_ok=True)\n        open(p, 'w').write('<testsuites><testsuite>"
    "<testcase classname=\"tests.test_calc\" name=\"test_add\"/><testcase classname=\"tests.test_calc\" "
    "name=\"test_sub\"/></testsuite></testsuites>')\nsys.exit(0)\n"
)
ENTRY_POINT = {
    "spoof-0.dist-info/METADATA": "Metadata-Version: 2.1\nName: spoof\nVersion: 0\n",
    "spoof-0.dist-info/entry_points.txt": "[pytest11]\nspoof = spoofplug\n",
    "spoofplug.py": FORGE_PLUGIN,
}

SPOOFS: dict[str, dict[str, str | None]] = {
    "dot_pytest_ini_addopts_plugin": {".pytest.ini": "[pytest]\naddopts = -p spoofplug\n",
                                      "spoofplug.py": FORGE_PLUGIN},
    "pytest_ini_addopts_plugin": {"pytest.ini": "[pytest]\naddopts = -p spoofplug\n", "spoofplug.py": FORGE_PLUGIN},
    "tox_ini": {"tox.ini": "[pytest]\naddopts = -p spoofplug\n", "spoofplug.py": FORGE_PLUGIN},
    "setup_cfg": {"setup.cfg": "[tool:pytest]\naddopts = -p spoofplug\n", "spoofplug.py": FORGE_PLUGIN},
    "pyproject_addopts": {"pyproject.toml": '[project]\nname = "calc"\nversion = "0"\n'
                          '[tool.pytest.ini_options]\naddopts = "-p spoofplug"\n', "spoofplug.py": FORGE_PLUGIN},
    "conftest_in_tests_dir": {"tests/conftest.py": FORGE_PLUGIN},
    "conftest_in_subdir": {"tests/sub/conftest.py": FORGE_PLUGIN, "tests/conftest.py": "pytest_plugins = []\n"},
    "tests_init_monkeypatch": {"tests/__init__.py": MONKEYPATCH},
    "entry_point_plugin": ENTRY_POINT,
    "root_sitecustomize": {"sitecustomize.py": MONKEYPATCH},
    "pth_file": {"spoof.pth": "import calc\n"},
}


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory):
    return make_calc_task(tmp_path_factory.mktemp("adv"))


@pytest.fixture(scope="module")
def calc_src(tmp_path_factory: pytest.TempPathFactory):
    """The calc task with its code under ``src/`` and ``PYTHONPATH=src python -m pytest``."""
    return make_calc_src_task(tmp_path_factory.mktemp("src"))


def _grade(task, edits: dict[str, str | None] | str, sandbox=None, **kw):
    inst, repo = task
    patch = edits if isinstance(edits, str) else diff_of(repo, edits)
    with (sandbox or DirSandbox(repo)) as sb:
        return grade_patch(inst, patch, sb, timeout_s=60, **kw)


@pytest.mark.parametrize("name", sorted(SPOOFS))
def test_spoof_never_resolves_and_is_flagged(calc, name: str) -> None:
    g = _grade(calc, SPOOFS[name])
    assert not g.resolved and g.tests_touched, (name, g.reason)


@pytest.mark.parametrize("name", ["tests_init_monkeypatch", "pth_file", "entry_point_plugin"])
def test_spoof_with_the_real_fix_still_resolves(calc, name: str) -> None:
    g = _grade(calc, {**SPOOFS[name], "calc.py": CALC_FIXED})
    assert g.resolved and g.tests_touched, (name, g.reason)


def test_entry_point_plugin_with_autoload_on(calc) -> None:
    """LocalSandbox leaves pytest's plugin auto-loading on unless the grader turns it off."""
    from harness.sandbox_local import LocalSandbox

    inst, repo = calc
    sb = LocalSandbox()
    sb.copy_in(repo, ".")
    g = _grade(calc, ENTRY_POINT, sandbox=sb)
    assert not g.resolved and g.tests_touched, g.reason


def test_pythonpath_test_cmd_runs_under_timeout(calc_src) -> None:
    g = _grade(calc_src, calc_src[0].patch)
    assert g.resolved and g.valid, g.reason


@pytest.mark.parametrize("edits", [{"src/sitecustomize.py": MONKEYPATCH}, {"src/pytest.py": FAKE_PYTEST},
                                   {"src/usercustomize.py": MONKEYPATCH}])
def test_pythonpath_tricks_never_resolve(calc_src, edits) -> None:
    g = _grade(calc_src, edits)
    assert not g.resolved and g.tests_touched, g.reason


def test_pure_path_rules() -> None:
    assert foreign_paths(["calc.py", "pkg/__init__.py", "tests/__init__.py", "a/conftest.py", "x.pth",
                          "e-0.dist-info/entry_points.txt", "src/sitecustomize.py", "pyproject.toml",
                          "README.md"]) == ["tests/__init__.py", "a/conftest.py", "x.pth",
                                            "e-0.dist-info/entry_points.txt", "src/sitecustomize.py"]
    assert pythonpath_roots("PYTHONPATH=src:./lib/ python -m pytest") == ["src", "lib"]
    assert shadow_candidates(["src/pytest.py", "src/calc.py", "json.py"], ["src"]) == ["json.py", "src/pytest.py"]
    assert runnable_test_cmd("python -m pytest") == "python -m pytest"
    assert runnable_test_cmd("A=1 PYTHONPATH=src python -m pytest -x") == "env A=1 PYTHONPATH=src python -m pytest -x"
    with pytest.raises(ValueError, match="no command"):
        runnable_test_cmd("A=1")


# ---------------------------------------------------------------- item 4: hung and killed test runs

HANG = "import time\n\ndef add(a, b):\n    time.sleep(600)\n\n\ndef sub(a, b):\n    return a - b\n"


def test_marker_after_a_line_cut_off_is_parsed() -> None:
    out = ">>>>> Applied git-apply\n>>>>> Start Test Output\ntests/test_calc.py ..>>>>> Test Exit Code: 124\n"
    assert parse_eval_markers(out).exit_code == 124


def test_hanging_patch_is_a_graded_timeout_with_its_output(calc) -> None:
    inst, repo = calc
    artifacts: dict[str, str] = {}
    with DirSandbox(repo) as sb:
        g = grade_patch(inst, diff_of(repo, {"calc.py": HANG}), sb, timeout_s=8, artifacts=artifacts)
    assert not g.resolved and not g.valid and g.reason.startswith("GRADE_TIMEOUT") and g.exit_code == 124
    assert "tests/test_calc.py" in artifacts["test_output.txt"]


# ---------------------------------------------------------------- Docker

DOCKER_SPOOFS = ["dot_pytest_ini_addopts_plugin", "entry_point_plugin", "tests_init_monkeypatch", "pth_file"]


@pytest.mark.docker
def test_spoofs_in_docker(calc, calc_src, docker_provider) -> None:
    for name in DOCKER_SPOOFS:
        with docker_provider.create(instance_id="adv") as sb:
            sb.copy_in(calc[1], ".")
            g = _grade(calc, SPOOFS[name], sandbox=sb)
        assert not g.resolved and g.tests_touched, (name, g.reason)
    for edits, expected in ((calc_src[0].patch, True), ({"src/pytest.py": FAKE_PYTEST}, False),
                            ({"src/sitecustomize.py": MONKEYPATCH}, False)):
        with docker_provider.create(instance_id="adv-src") as sb:
            sb.copy_in(calc_src[1], ".")
            g = _grade(calc_src, edits, sandbox=sb)
        assert g.resolved is expected, (edits if isinstance(edits, dict) else "gold", g.reason)


@pytest.mark.docker
def test_hanging_patch_in_docker(calc, docker_provider) -> None:
    inst, repo = calc
    artifacts: dict[str, str] = {}
    with docker_provider.create(instance_id="adv-hang") as sb:
        sb.copy_in(repo, ".")
        g = grade_patch(inst, diff_of(repo, {"calc.py": HANG}), sb, timeout_s=5, artifacts=artifacts)
    assert not g.resolved and g.reason.startswith("GRADE_TIMEOUT"), g.reason
    assert "Test Exit Code" in artifacts["test_output.txt"]



def test_script_killed_by_the_memory_limit_is_an_oom_grade() -> None:
    from harness.grading import grade_from_output

    out = ">>>>> Applied git-apply\n>>>>> Start Test Output\ntests/test_calc.py ."
    g = grade_from_output(f2p=["t::a"], p2p=[], stdout=out, junit_text=None, touched_tests=False, oom_killed=True)
    assert g is not None and not g.resolved and g.reason.startswith("TESTS_OOM_KILLED")


HOG = "def add(a, b):\n    x = bytearray(1 << 30)\n    return len(x)\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.mark.docker
def test_memory_hog_patch_in_docker_is_an_oom_grade(calc, docker_provider) -> None:
    from harness.sandbox import SandboxSpec

    inst, repo = calc
    artifacts: dict[str, str] = {}
    with docker_provider.create(SandboxSpec(mem_bytes=256 << 20), instance_id="adv-oom") as sb:
        sb.copy_in(repo, ".")
        g = grade_patch(inst, diff_of(repo, {"calc.py": HOG}), sb, timeout_s=60, artifacts=artifacts)
    assert not g.resolved and g.reason.startswith("TESTS_OOM_KILLED"), g.reason
    assert "test_output.txt" in artifacts
