"""Repair reasoning for ``ScriptedExpert``: from code and failing tests it has READ to a ranked list of fixes.

Nothing here sees a gold patch or a hidden test. Inputs are the text of a module and of a visible test file (as
returned by ``read_file``) and the names of the tests that failed (as printed by ``run_tests``). Steps:

1. ``failing_asserts``: the ``assert f(args) == expected`` lines of the failing tests (pure, via ``ast``);
2. ``implicated_functions``: the reported function, the module functions it calls (transitively), and module
   constants they read;
3. ``repair_candidates``: inverse bug-family edits (``bugs.enumerate_edits(mode="repair")``) on those lines plus
   guard clauses for edge-case inputs seen in the failing asserts (``if not items: return <expected>``);
4. ``screen``: runs the visible test file against each candidate module in ONE ``python3 -I`` process inside a
   fresh sandbox (an alarm per candidate) and returns how many tests pass. Repository code never runs on the
   host: the sandbox comes from the caller (``ScriptedExpert(screen_sandbox=...)``; the runner passes its own
   sandbox factory, so ``--sandbox docker`` screens in a container), ``LocalSandbox`` by default.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from harness.minirepos.bugs import Edit, enumerate_edits, module_constants_used
from harness.sandbox import Sandbox

_FAMILY_ORDER = ("wrong_comparison", "wrong_operator", "off_by_one", "wrong_boolean_logic", "wrong_builtin",
                 "swapped_arguments", "wrong_variable_returned", "wrong_string_format", "missing_edge_case",
                 "wrong_constant")


@dataclass(frozen=True)
class AssertCase:
    test: str
    function: str
    args: tuple[str, ...]
    expected: str


def failing_asserts(test_source: str, failing_tests: list[str]) -> list[AssertCase]:
    """``assert f(args) == expected`` statements of the named test functions, in test order."""
    tree = ast.parse(test_source)
    out: list[AssertCase] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name not in failing_tests:
            continue
        for stmt in ast.walk(node):
            if (isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1
                    and isinstance(stmt.test.ops[0], ast.Eq) and isinstance(stmt.test.left, ast.Call)
                    and isinstance(stmt.test.left.func, ast.Name)):
                call = stmt.test.left
                out.append(AssertCase(node.name, call.func.id,
                                      tuple(ast.get_source_segment(test_source, a) or "" for a in call.args),
                                      ast.get_source_segment(test_source, stmt.test.comparators[0]) or ""))
    return out


def implicated_functions(source: str, function: str) -> list[str]:
    """``function`` and the module functions it calls, transitively (breadth first)."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    order, queue = [], [function]
    while queue:
        name = queue.pop(0)
        if name in order or name not in defs:
            continue
        order.append(name)
        for node in ast.walk(defs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defs:
                queue.append(node.func.id)
    return order


def is_edge_input(arg: str) -> bool:
    """An argument (source text) that is an edge case: empty container or string, zero, None."""
    return arg.strip() in ("[]", "{}", "()", "''", '""', "0", "0.0", "None", "set()")


def _plain_default(expected: str) -> bool:
    """A value a guard clause may return: a scalar literal (number, string, bool, None) or an empty container."""
    try:
        value = ast.literal_eval(expected)
    except (ValueError, SyntaxError):
        return False
    return value is None or isinstance(value, (int, float, str, bool)) or value in ([], {}, (), "")


def guard_candidates(source: str, cases: list[AssertCase]) -> list[Edit]:
    """Guard clauses for edge-case arguments of failing asserts, inserted after the function's docstring."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    lines = source.splitlines(keepends=True)
    out: list[Edit] = []
    for case in cases:
        node = defs.get(case.function)
        if node is None:
            continue
        params = [a.arg for a in node.args.args]
        body = node.body[1:] if isinstance(node.body[0], ast.Expr) and len(node.body) > 1 else node.body
        first = body[0]
        indent = lines[first.lineno - 1][: first.col_offset]
        if not _plain_default(case.expected):
            continue  # a guard returning e.g. ['q'] would hard-code the test's answer, not handle the edge case
        for param, arg in zip(params, case.args, strict=False):
            if not is_edge_input(arg):
                continue
            if arg.strip() in ("0", "0.0"):
                conds = [f"{param} <= 0", f"{param} == 0", f"not {param}"]
            elif arg.strip() == "None":
                conds = [f"{param} is None", f"not {param}"]
            else:
                conds = [f"not {param}", f"len({param}) == 0"]
            for cond in conds:
                guard = f"{indent}if {cond}:\n{indent}    return {case.expected}\n"
                old = lines[first.lineno - 1]
                out.append(Edit("missing_edge_case", case.function, first.lineno, first.lineno, old, guard + old,
                                f"added guard: if {cond}: return {case.expected}"))
    return out


def _compiles(source: str) -> bool:
    try:
        compile(source, "<mutant>", "exec")
    except SyntaxError:
        return False
    return True


def repair_candidates(source: str, function: str, cases: list[AssertCase]) -> list[Edit]:
    """Ranked candidate fixes for a bug reported on ``function`` (see the module docstring)."""
    funcs = implicated_functions(source, function)
    edits = enumerate_edits(source, mode="repair", functions=set(funcs))
    consts = set().union(*(module_constants_used(source, f) for f in funcs)) if funcs else set()
    const_lines = {i + 1 for i, ln in enumerate(source.splitlines()) if ln.split("=")[0].strip() in consts}
    for e in enumerate_edits(source, mode="repair", check_compiles=False):  # filter first, compile the few kept
        if e.function is None and e.start in const_lines and _compiles(e.apply(source)):
            edits.append(e)
    edits += guard_candidates(source, cases)
    rank_f = {f: i for i, f in enumerate(funcs)}
    rank_fam = {f: i for i, f in enumerate(_FAMILY_ORDER)}
    return sorted(edits, key=lambda e: (rank_f.get(e.function or "", len(funcs)), rank_fam.get(e.family, 99)))


_SCREEN = r"""
import json, signal, sys, types
job = json.loads(sys.stdin.read())
pkg, _, mod = job["module"].rpartition(".")
def alarm(*_):
    raise TimeoutError("candidate took too long")
signal.signal(signal.SIGALRM, alarm)
results = []
for src in job["candidates"]:
    passed = 0
    try:
        signal.alarm(2)
        for name in list(sys.modules):
            if name == job["module"] or name == pkg:
                del sys.modules[name]
        parent = types.ModuleType(pkg); parent.__path__ = []
        sys.modules[pkg] = parent
        module = types.ModuleType(job["module"])
        sys.modules[job["module"]] = module
        setattr(parent, mod, module)
        exec(compile(src, job["module"], "exec"), module.__dict__)
        ns = {"__name__": "screen_tests"}
        exec(compile(job["tests"], "tests", "exec"), ns)
        for name, fn in list(ns.items()):
            if name.startswith("test_") and callable(fn):
                try:
                    fn()
                    passed += 1
                except Exception:
                    pass
    except BaseException:
        passed = -1
    finally:
        signal.alarm(0)
    results.append(passed)
print(json.dumps(results))
"""


SandboxOpener = Callable[[], Sandbox]


def local_screen_sandbox() -> Sandbox:
    """The default place to screen: a fresh ``harness.sandbox_local.LocalSandbox`` (a temp directory, rlimits, a
    scrubbed environment; not isolated, see ``harness.sandbox``). Evaluation passes its own opener, which gives
    a Docker sandbox under ``--sandbox docker``."""
    from harness.sandbox_local import LocalSandbox

    return LocalSandbox()


@lru_cache(maxsize=256)
def _screen_cached(module: str, candidates: tuple[str, ...], tests: str,
                   open_sandbox: SandboxOpener) -> tuple[int, ...] | None:
    job = json.dumps({"module": module, "candidates": list(candidates), "tests": tests})
    timeout = 30 + 2 * len(candidates)
    with open_sandbox() as sb:
        res = sb.exec(["python3", "-I", "-c", _SCREEN], input=job.encode(), timeout=timeout)
    if res.timed_out or res.returncode != 0 or res.truncated:
        return None
    try:
        out = tuple(json.loads(res.stdout))
    except (json.JSONDecodeError, TypeError, ValueError):
        return None
    return out if len(out) == len(candidates) and all(isinstance(n, int) for n in out) else None


def screen(module: str, candidates: list[str], tests: str, *,
           sandbox: SandboxOpener = local_screen_sandbox) -> list[int] | None:
    """Number of test functions in ``tests`` passing with each candidate module source (-1: broken); None if the
    screening process itself failed. ``module`` is the dotted import name the tests use.

    The candidates and the tests are repository code: they run in a FRESH sandbox from ``sandbox()`` (closed
    afterwards; nothing they write survives), never in the harness process or another host process.
    ``SandboxUnavailable`` propagates (an infrastructure error of the episode)."""
    out = _screen_cached(module, tuple(candidates), tests, sandbox)
    return list(out) if out is not None else None


def is_plant_inverse(current: str, edit: Edit) -> bool:
    """True when ``current`` is one planted bug away from ``edit.apply(current)``: the repair undoes an edit of a
    known bug family, which makes it a likelier fix than an arbitrary change that happens to pass the tests."""
    repaired = edit.apply(current)
    scope = {edit.function} if edit.function else None
    return any(p.apply(repaired) == current for p in enumerate_edits(repaired, functions=scope, check_compiles=False))


def unique_replacement(text: str, edit: Edit) -> tuple[str, str]:
    """(old, new) for an exact search/replace of ``edit`` in ``text``, with context lines added until unique."""
    lines = text.splitlines(keepends=True)
    lo, hi = edit.start - 1, edit.end
    while True:
        old = "".join(lines[lo:hi])
        if text.count(old) == 1 or (lo == 0 and hi == len(lines)):
            break
        lo, hi = max(0, lo - 1), min(len(lines), hi + 1)
    new = "".join(lines[lo : edit.start - 1]) + edit.new + "".join(lines[edit.end : hi])
    return old, new
