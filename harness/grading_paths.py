"""Which files of a candidate patch grading keeps, and how the task's test command is run (pure; see
``harness.grading``).

The agent may change *source*: any path that is not in one of the classes below. Everything else it added or
changed is restored to base (or deleted when base has no such file) before the hidden tests run, and the grade is
flagged ``tests_touched``:

- test files (``harness.grading.is_test_path``: ``test_*.py``, ``*_test.py``, anything under ``tests/``,
  ``test/`` or ``testing/``, which includes a ``tests/__init__.py`` that would run code before the tests);
- pytest configuration and packaging files by name, anywhere: ``conftest.py``, ``pytest.ini``, ``.pytest.ini``,
  ``pytest.toml``, ``.pytest.toml``, ``tox.ini``, ``setup.cfg``, ``setup.py`` (``pyproject.toml`` is handled by the
  eval script: restored only when its ``[tool.pytest*]`` table changed, since the grader never reads it anyway);
- interpreter start-up hooks: ``sitecustomize.py``, ``usercustomize.py``, ``*.pth`` files;
- package metadata that can register pytest plugins through entry points: anything under a ``*.dist-info`` or
  ``*.egg-info`` directory, ``*.egg-link`` files;
- git metadata files (``.gitattributes``, ``.gitmodules``, ``.gitignore`` is kept: it only affects the diff);
- bytecode: ``*.pyc``, ``*.pyo`` and anything under ``__pycache__/`` (a sourceless or unchecked-hash ``.pyc`` is
  imported instead of, or without, the source the agent shows).

Independently, a NEW top-level entry on a ``sys.path`` root (the repository root, a ``PYTHONPATH`` directory the
test command sets, a directory pytest inserts for a test file) that provides a module named like the test runner,
a standard-library module or anything the test interpreter imports from outside the repository (its
site-packages: ``attr/``, ``argparse.so``, ...) is removed (``shadowing_entries``): it would be imported instead
of the real module. The paths come from the repository's state after the patch (``harness.grading_apply``), never
from the patch text.

Not covered: code in the source the agent may change runs inside the pytest process when the tests import it and
can still tamper with that process; that needs a process boundary between the library under test and pytest.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterable

_FOREIGN_NAMES = frozenset({
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg", "setup.py",
    "sitecustomize.py", "usercustomize.py", ".gitattributes", ".gitmodules",
})
_RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "exceptiongroup",
                             "tomli", "sitecustomize", "usercustomize"})
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def is_test_path(path: str) -> bool:
    """Test modules by pytest's default naming, or anything under a ``tests``/``test``/``testing`` directory."""
    name = path.rsplit("/", 1)[-1]
    parts = path.split("/")[:-1]
    return (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py") or any(
        p in ("tests", "test", "testing") for p in parts
    )


def is_agent_source(path: str) -> bool:
    """True when grading keeps the agent's version of ``path`` (module docstring: the classes it restores)."""
    name = path.rsplit("/", 1)[-1]
    parts = path.split("/")
    if is_test_path(path) or name in _FOREIGN_NAMES or name.endswith((".pth", ".egg-link", ".pyc", ".pyo")):
        return False
    if "__pycache__" in parts[:-1]:
        return False
    return not any(p.endswith((".dist-info", ".egg-info")) for p in parts[:-1])


def foreign_paths(touched: Iterable[str]) -> list[str]:
    """The touched paths grading restores to base (everything but source and ``pyproject.toml``), in order."""
    return [p for p in touched if not is_agent_source(p) and p != "pyproject.toml"]


def split_env_assignments(test_cmd: str) -> tuple[dict[str, str], list[str]]:
    """(leading ``NAME=value`` assignments, the rest of the command's words), e.g. SWE-bench's
    ``PYTHONPATH=src python -m pytest``. Raises ValueError when the command does not parse as shell words or has
    no command after the assignments."""
    try:
        words = shlex.split(test_cmd)
    except ValueError as exc:
        raise ValueError(f"test_cmd {test_cmd!r} does not parse as shell words ({exc}); fix: balance its quotes") from exc
    env: dict[str, str] = {}
    while words and _ASSIGN.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise ValueError(f"test_cmd {test_cmd!r} has no command after its environment assignments; "
                         "fix: write e.g. 'PYTHONPATH=src python -m pytest'")
    return env, words


def runnable_test_cmd(test_cmd: str) -> str:
    """The command as it can follow ``timeout``: leading assignments go through ``env`` (``timeout`` runs a
    program, not a shell line, so ``timeout 60 A=1 python`` fails with exit 127)."""
    env, words = split_env_assignments(test_cmd)
    if not env:
        return test_cmd
    return " ".join(["env", *(shlex.quote(f"{k}={v}") for k, v in env.items()), *map(shlex.quote, words)])


def pythonpath_roots(test_cmd: str) -> list[str]:
    """Repository-relative directories the command's own ``PYTHONPATH=`` assignment puts on ``sys.path``."""
    env, _ = split_env_assignments(test_cmd)
    roots = []
    for entry in env.get("PYTHONPATH", "").split(":"):
        entry = entry.strip().removeprefix("./").rstrip("/")
        if entry and entry != "." and not entry.startswith(("/", "$", "..")):
            roots.append(entry)
    return roots


_MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyw", ".so", ".pyd")


def module_name_of(entry: str, is_dir: bool) -> str | None:
    """The top-level module name an entry on ``sys.path`` provides: a directory's name (package or namespace), or
    a file's name up to its first dot when it ends like something Python imports (``x.py``, ``x.pyc``,
    ``x.cpython-311-x86_64-linux-gnu.so``, ...); None otherwise."""
    if is_dir or "." not in entry:  # a suffix-less file may be a symbolic link to a package directory
        return entry if entry.isidentifier() else None
    stem = entry.split(".", 1)[0]
    return stem if entry.endswith(_MODULE_SUFFIXES) and stem.isidentifier() else None


def shadow_candidate_in(path: str, roots: Iterable[str] = (), modules: Iterable[str] = ()) -> str | None:
    """The entry (a path) through which ``path`` could shadow a module the tests or the test runner import, or
    None: the first component of ``path`` at the repository root or under one of ``roots`` (``sys.path``
    directories), when it provides a module named like the test runner, a standard-library module or one of
    ``modules`` (the interpreter's own importable names)."""
    known = set(modules)
    for root in ("", *roots):
        prefix = f"{root}/" if root else ""
        if not path.startswith(prefix):
            continue
        top, sep, _ = path[len(prefix):].partition("/")
        name = module_name_of(top, bool(sep))
        if name and (name in _RUNNER_MODULES or name in sys.stdlib_module_names or name in known):
            return prefix + top
    return None


def shadow_candidates(touched: Iterable[str], roots: Iterable[str] = ()) -> list[str]:
    """Sorted distinct ``shadow_candidate_in`` entries of the touched paths (runner and standard-library names)."""
    return shadowing_entries(touched, roots, ())


def shadowing_entries(new_paths: Iterable[str], roots: Iterable[str], modules: Iterable[str]) -> list[str]:
    """Sorted distinct entries through which the NEW paths could shadow an importable module (``modules``: what
    the test interpreter imports from outside the repository; the runner's and the standard library's names
    always count). The grader deletes such an entry unless it exists at base."""
    roots, known = list(roots), frozenset(modules)
    return sorted({s for s in (shadow_candidate_in(p, roots, known) for p in new_paths) if s})
