"""Execute a generated module on its call cases, in-process, to get expected values and detect bugs.

Only generator-authored code runs here (templates and their planted mutants: standard library only, no loops
without a bound), so in-process ``exec`` is acceptable; this module is not a sandbox and must never run code
from a task set written by someone else.

A case's outcome is ``("ok", value)`` or ``("raise", "ExcType: message")``. A mutant *detects* a case when the
test ``assert f(args) == expected`` would fail on it: it raises, or its value is unequal and not merely a
floating-point rounding neighbour (those cases are ``ambiguous`` and kept out of the hidden tests).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

Verdict = Literal["same", "detects", "ambiguous"]


@dataclass(frozen=True)
class CaseResult:
    function: str
    index: int
    args: str
    kind: Literal["ok", "raise"]
    value: Any
    error: str = ""

    def call(self) -> str:
        return f"{self.function}({self.args})"


@lru_cache(maxsize=4096)
def _compiled_calls(function: str, args: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(compile(f"{function}({a})", "<case>", "eval") for a in args)


def run_cases(source: str, module_name: str, cases: dict[str, tuple[str, ...]]) -> list[CaseResult]:
    """Run every case against ``source``; a module that fails to import raises ``RuntimeError``."""
    namespace: dict[str, Any] = {"__name__": module_name}
    try:
        exec(compile(source, f"<{module_name}>", "exec"), namespace)
    except Exception as exc:  # noqa: BLE001 - the mutant may be broken at import time
        raise RuntimeError(f"{module_name} does not import: {type(exc).__name__}: {exc}") from exc
    out: list[CaseResult] = []
    for function, arg_list in cases.items():
        for i, (args, code) in enumerate(zip(arg_list, _compiled_calls(function, arg_list), strict=True), start=1):
            try:
                value = eval(code, namespace)  # noqa: S307 - generator-authored code only
            except Exception as exc:  # noqa: BLE001
                out.append(CaseResult(function, i, args, "raise", None, f"{type(exc).__name__}: {exc}"))
                continue
            out.append(CaseResult(function, i, args, "ok", value))
    return out


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
    if isinstance(a, (list, tuple)) and type(a) is type(b) and len(a) == len(b):
        return all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return all(_close(a[k], b[k]) for k in a)
    return False


def compare(clean: CaseResult, mutant: CaseResult) -> Verdict:
    """How the clean expectation fares against the mutant's outcome."""
    if mutant.kind == "raise":
        return "detects"
    try:
        equal = bool(mutant.value == clean.value)
    except Exception:  # noqa: BLE001
        return "detects"
    if equal:
        return "same"
    return "ambiguous" if _close(clean.value, mutant.value) else "detects"


@lru_cache(maxsize=65536)
def _read_back(text: str) -> Any:
    return ast.literal_eval(text)


def literal(value: object) -> str:
    """``repr`` of a value that must read back as an equal literal (raises ``ValueError`` otherwise)."""
    text = repr(value)
    try:
        back = _read_back(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"value {text} is not a Python literal") from exc
    if back != value or type(back) is not type(value):
        raise ValueError(f"value {text} does not round-trip")
    return text
