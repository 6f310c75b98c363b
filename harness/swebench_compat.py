"""SWE-bench's own per-repository test-log parsers (the ``swebench`` package, 5.0.2), without its heavy imports.

``parser_name(repo)`` names the parser SWE-bench uses for a repository (``MAP_REPO_TO_PARSER_PY``: Django's
``test_x (module.Class) ... ok`` runner output, sympy's ``bin/test``, pytest's ``-rA`` summary for most others);
``parse_log(repo, text)`` runs it on a test log and returns ``{test id: harness.schema.TestStatus}``;
``swebench_resolved(f2p, p2p, statuses)`` is SWE-bench's "fully resolved" rule on those statuses.
``log_parser_names()`` / ``parse_log_as(name, text)``: the same parsers by their own name (``django``, ``sympy``,
``pytest``, ...: ``parse_log_<name>``), which a task names in ``TaskInstance.test_log_parser`` to be graded from
its test command's output (``harness.grading``) instead of pytest's JUnit report.

Only ``swebench.harness.log_parsers.python`` is imported, with its two small dependencies
(``swebench.harness.constants``, ``swebench.types``; stdlib only). The package's ``swebench.harness`` and
``swebench.harness.log_parsers`` ``__init__`` modules would import docker, modal, unidiff and every language's
parsers, so they are replaced in ``sys.modules`` by empty packages with the real ``__path__`` when they are not
already imported (a process that imported the full package keeps it). Install with
``pip install --no-deps swebench==5.0.2`` (no dependency is needed for this module).

Status mapping: PASSED → passed, FAILED → failed, ERROR → error, SKIPPED → skipped, XFAIL → passed (SWE-bench
counts an expected failure as a pass).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.schema import TestStatus

if TYPE_CHECKING:
    from swebench.types import TestSpec

SWEBENCH_VERSION = "5.0.2"
STATUS_MAP: dict[str, TestStatus] = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                                     "XFAIL": "passed"}
_LIGHT_PACKAGES = ("swebench.harness", "swebench.harness.log_parsers")


class SwebenchUnavailable(RuntimeError):
    """The swebench package is not installed (or not the version whose parsers this module knows)."""


@cache
def parsers() -> Any:
    """``swebench.harness.log_parsers.python``, imported without its package ``__init__`` chain (module docstring)."""
    spec = importlib.util.find_spec("swebench")
    if spec is None or not spec.submodule_search_locations:
        raise SwebenchUnavailable(f"the swebench package is not installed; fix: pip install --no-deps "
                                  f"swebench=={SWEBENCH_VERSION}")
    root = Path(list(spec.submodule_search_locations)[0])
    for name in _LIGHT_PACKAGES:
        if name not in sys.modules:
            shell = types.ModuleType(name)
            shell.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
            shell.__package__ = name
            sys.modules[name] = shell
    from swebench.harness.log_parsers import python as module  # noqa: PLC0415 - after the shells are in place

    return module


def parser_name(repo: str) -> str | None:
    """The name of SWE-bench's log parser for ``owner/name`` (e.g. ``parse_log_django``), None when it has none."""
    fn = parsers().MAP_REPO_TO_PARSER_PY.get(repo)
    return None if fn is None else fn.__name__


_PREFIX = "parse_log_"


def log_parser_names() -> list[str]:
    """The names ``parse_log_as`` accepts: every ``parse_log_<name>`` function of swebench's Python parsers."""
    module = parsers()
    return sorted(n[len(_PREFIX):] for n in dir(module) if n.startswith(_PREFIX) and callable(getattr(module, n)))


def parse_log_as(name: str, text: str, *, instance_id: str = "", f2p: Iterable[str] = (),
                 p2p: Iterable[str] = ()) -> dict[str, TestStatus]:
    """Test id → status from a test log by swebench's ``parse_log_<name>``; ValueError naming the known names."""
    fn = getattr(parsers(), _PREFIX + name, None) if name.isidentifier() else None
    if fn is None or not callable(fn):
        raise ValueError(f"unknown test log parser {name!r}; fix: one of {', '.join(log_parser_names())} "
                         "(swebench's parse_log_<name>), or 'junit' for pytest's JUnit report")
    return _run(fn, text, "", instance_id, list(f2p), list(p2p))


LogParser = Callable[[str, "TestSpec"], dict[str, str]]  # swebench's parse_log_<name>: log text -> id -> status


def _run(fn: LogParser, text: str, repo: str, instance_id: str, f2p: list[str], p2p: list[str]) -> dict[str, TestStatus]:
    raw = fn(text, _spec(repo, instance_id, f2p, p2p))
    unknown = sorted({s for s in raw.values() if s not in STATUS_MAP})
    if unknown:
        raise ValueError(f"swebench's {fn.__name__} returned unknown statuses {unknown}; fix: extend STATUS_MAP")
    return {test: STATUS_MAP[s] for test, s in raw.items()}


def _spec(repo: str, instance_id: str, f2p: list[str], p2p: list[str]) -> TestSpec:
    from swebench.types import TestSpec  # noqa: PLC0415 - loaded by parsers()

    return TestSpec(instance_id=instance_id, image="", eval_script_list=[], repo=repo, version="",
                    FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p)


def parse_log(repo: str, text: str, *, instance_id: str = "", f2p: Iterable[str] = (),
              p2p: Iterable[str] = ()) -> dict[str, TestStatus]:
    """Test id → status from a test log, by SWE-bench's parser for ``repo``; raises KeyError naming the fix when
    SWE-bench has no parser for it."""
    fn = parsers().MAP_REPO_TO_PARSER_PY.get(repo)
    if fn is None:
        raise KeyError(f"swebench {SWEBENCH_VERSION} has no log parser for {repo!r}; fix: grade it with pytest's "
                       "JUnit report (the default) or name a parser for it")
    return _run(fn, text, repo, instance_id, list(f2p), list(p2p))


def swebench_resolved(f2p: Iterable[str], p2p: Iterable[str], statuses: dict[str, TestStatus]) -> bool:
    """SWE-bench 5.0.2's FULL resolution (``harness.grading``: ``test_passed`` for FAIL_TO_PASS, ``test_maintained``
    for PASS_TO_PASS): every FAIL_TO_PASS passed (a skipped one is a failure), every PASS_TO_PASS passed or skipped
    (missing fails). Not reproduced: its prefix match for the truncated parametrised ids of SWE-bench Verified."""
    f2p_ok = all(statuses.get(t) == "passed" for t in f2p)
    p2p_ok = all(statuses.get(t) in ("passed", "skipped") for t in p2p)
    return f2p_ok and p2p_ok


__all__ = ["STATUS_MAP", "SWEBENCH_VERSION", "SwebenchUnavailable", "log_parser_names", "parse_log", "parse_log_as",
           "parser_name", "parsers", "swebench_resolved"]
