"""Text the generator writes: repository names, test files, unified diffs and issue-style problem statements.

All functions are pure; randomness comes from the ``rng`` argument only.
"""

from __future__ import annotations

import difflib
import hashlib
import random
from collections.abc import Sequence

from harness.minirepos.evaluate import CaseResult, literal

_ORGS = ("acme-labs", "northwind", "bluebird-dev", "kestrel-io", "harbor-works", "fjord-tools", "lumen-co",
         "quarry-hq", "tidal-soft", "orchard-eng", "copper-kettle", "sable-systems")
_ADJ = ("brisk", "calm", "clever", "dusty", "eager", "fancy", "gentle", "humble", "jolly", "keen", "lively",
        "mellow", "nimble", "proud", "quiet", "rapid", "shiny", "sturdy", "tidy", "vivid", "witty", "zesty",
        "amber", "bold", "crisp", "dapper", "golden", "hazel", "ivory", "lunar")
_NOUN = ("otter", "falcon", "ledger", "lantern", "harbor", "meadow", "pebble", "quill", "raven", "spruce",
         "thimble", "walnut", "beacon", "cobalt", "dune", "ember", "fern", "glacier", "heron", "juniper", "kiln",
         "lagoon", "maple", "nectar", "orbit", "prism", "ridge", "saffron", "tundra", "willow")


def name_parts() -> tuple[str, ...]:
    """Every organisation, adjective and noun a repository name can be built from."""
    return (*_ORGS, *_ADJ, *_NOUN)


def split_of(full_name: str) -> str:
    """``train`` or ``heldout``: the half of the name space a full ``org/adjective-noun`` name belongs to."""
    return _split_of(full_name)


def _split_of(full_name: str) -> str:
    """Repository names are partitioned between splits by a hash bit, so splits never share a repository."""
    return "train" if hashlib.sha256(full_name.encode()).digest()[0] % 2 == 0 else "heldout"


def repo_name(rng: random.Random, split: str, used: set[str]) -> str:
    """A fresh ``org/adjective-noun[-n]`` name belonging to ``split``'s half of the name space."""
    for attempt in range(10_000):
        suffix = f"-{attempt // 500 + 1}" if attempt >= 500 else ""
        name = f"{rng.choice(_ORGS)}/{rng.choice(_ADJ)}-{rng.choice(_NOUN)}{suffix}"
        if name not in used and _split_of(name) == ("train" if split == "train" else "heldout"):
            used.add(name)
            return name
    raise RuntimeError("repository name space exhausted")


def package_name(repo: str) -> str:
    return repo.split("/", 1)[1].replace("-", "_")


def unified_diff(path: str, old: str, new: str) -> str:
    """A ``git apply``-able diff of one file (``old == ""`` means the file is created)."""
    if old == new:
        return ""
    if not old:
        lines = new.splitlines(keepends=True)
        head = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        return head + f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + ln for ln in lines)
    body = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                fromfile=f"a/{path}", tofile=f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def test_name(case: CaseResult) -> str:
    return f"test_{case.function}_case{case.index}"


def render_test_file(module_path: str, functions: Sequence[str], cases: Sequence[CaseResult],
                     extra: Sequence[tuple[str, CaseResult]] = ()) -> str:
    """A pytest module asserting ``f(args) == expected`` for each (clean-run) case (no docstring: the file name
    and the import say what it tests).

    ``extra`` adds (test name, case) pairs, e.g. the regression test for the reported issue.
    """
    used = sorted({c.function for c in cases} | {c.function for _, c in extra})
    lines = [f"from {module_path} import {', '.join(used)}", ""]
    for name, case in [*((test_name(c), c) for c in cases), *extra]:
        lines += ["", f"def {name}():", f"    assert {case.call()} == {literal(case.value)}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _show_outcome(case: CaseResult) -> str:
    if case.kind == "raise":
        return case.error
    try:
        return literal(case.value)
    except ValueError:
        return repr(case.value)


def problem_statement(rng: random.Random, *, package: str, module: str, reported: CaseResult,
                      observed: CaseResult, caller_note: str = "") -> str:
    """An issue in a user's words: what they called, what they got, what they expected. Never the fix."""
    call, expected, got = reported.call(), literal(reported.value), _show_outcome(observed)
    func = reported.function
    raised = observed.kind == "raise"
    titles = (
        [f"`{func}` crashes with {observed.error.split(':')[0]}", f"{func}() raises an exception for valid input"]
        if raised
        else [f"`{func}` returns the wrong result", f"Unexpected output from {func}()",
              f"{func} gives {got} instead of {expected}"]
    )
    openers = [
        f"I'm using `{package}.{module}` and ran into this:",
        f"While updating our app to the latest `{package}` I noticed a problem in `{module}`.",
        f"Looks like a regression in `{package}/{module}.py`.",
        "Minimal reproduction below.",
    ]
    snippet = f">>> from {package}.{module} import {func}\n>>> {call}\n"
    snippet += f"Traceback (most recent call last):\n  ...\n{observed.error}" if raised else got
    closers = [
        f"I expected `{expected}` here.",
        f"The documented behaviour suggests the result should be `{expected}`.",
        f"It should return `{expected}`.",
    ]
    parts = [f"# {rng.choice(titles)}", "", rng.choice(openers), "", "```python", snippet, "```", "",
             rng.choice(closers)]
    if caller_note:
        parts += ["", caller_note]
    return "\n".join(parts) + "\n"


def readme(repo: str, package: str, modules: Sequence[tuple[str, str]]) -> str:
    """README for a generated repository; ``modules`` are (module, first docstring line)."""
    lines = [f"# {repo.split('/', 1)[1]}", "", f"`{package}` is a small utility package maintained by "
             f"{repo.split('/', 1)[0]}.", "", "## Modules", ""]
    lines += [f"- `{package}/{m}.py`: {doc}" for m, doc in modules]
    lines += ["", "## Development", "", "Run the test suite with:", "", "```", "python -m pytest", "```", ""]
    return "\n".join(lines)


def pyproject(package: str) -> str:
    return (f'[project]\nname = "{package.replace("_", "-")}"\nversion = "0.3.1"\nrequires-python = ">=3.9"\n\n'
            '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["."]\n')


GITIGNORE = "__pycache__/\n*.pyc\n"  # pytest makes .pytest_cache self-ignoring
