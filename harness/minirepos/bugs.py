"""Bug families as source-level edits found through the AST (pure functions).

``enumerate_edits(source, mode="plant")`` lists the single-site bugs that can be planted in a module, one
``Edit`` per (site, variant), each tagged with its family. ``mode="repair"`` lists the wider set of inverse
edits a repairer tries (every operator for an operator, both directions of an off-by-one, both directions of a
constant change, and so on); ``ScriptedExpert`` uses it on code it has read. An edit replaces whole source lines
``[start, end]`` (1-based, inclusive) by ``new`` (which may be empty: the lines are deleted), so it maps directly
onto an exact search/replace of those lines.

Families (``BUG_FAMILIES``): wrong operator, off-by-one in a range/slice/index, wrong comparison, swapped
arguments, wrong constant, missing edge case (a guard clause removed), wrong variable returned, wrong string
formatting, wrong boolean logic, wrong builtin. Not covered: multi-site bugs, bugs spanning several functions,
bugs inside multi-line expressions (only single-line nodes are edited, except guard clauses).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

BugFamily = Literal[
    "wrong_operator",
    "off_by_one",
    "wrong_comparison",
    "swapped_arguments",
    "wrong_constant",
    "missing_edge_case",
    "wrong_variable_returned",
    "wrong_string_format",
    "wrong_boolean_logic",
    "wrong_builtin",
]
BUG_FAMILIES: tuple[str, ...] = BugFamily.__args__  # type: ignore[attr-defined]
Mode = Literal["plant", "repair"]


@dataclass(frozen=True)
class Edit:
    """Replace lines ``start..end`` (1-based, inclusive) by ``new``; ``function`` is None at module level."""

    family: str
    function: str | None
    start: int
    end: int
    old: str
    new: str
    note: str

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        return "".join(lines[: self.start - 1]) + self.new + "".join(lines[self.end :])


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%"}
_PLANT_OPS = {"+": ["-"], "-": ["+"], "*": ["/"], "/": ["*"], "//": ["/"], "%": ["//"]}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_PLANT_CMP = {"<": ["<="], "<=": ["<"], ">": [">="], ">=": [">"], "==": ["!="], "!=": ["=="]}
_BUILTINS = {"min": "max", "max": "min", "any": "all", "all": "any"}
_METHODS = {"ljust": "rjust", "rjust": "ljust", "upper": "lower", "lower": "upper", "lstrip": "rstrip"}
_SEPARATORS = {", ": ",", ",": ", ", "-": "_", "_": "-", "": " ", " ": ""}


def _alternatives(table: dict[str, list[str]], token: str, mode: Mode) -> list[str]:
    """Plant: the table's mutations of ``token``. Repair: every other token, those that ``table`` would turn into
    ``token`` first (the likeliest originals of a planted bug), then the rest in table order."""
    if mode == "plant":
        return table.get(token, [])
    inverse = [t for t, outs in table.items() if token in outs]
    return inverse + [t for t in table if t != token and t not in inverse]


class _Collector:
    """Walks one module and records edits; ``lines`` keep their newline characters."""

    def __init__(self, source: str, mode: Mode) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.mode = mode
        self.edits: list[Edit] = []
        self.function: str | None = None

    # -- helpers ---------------------------------------------------------------------------------------------
    def seg(self, node: ast.AST) -> str:
        if self.one_line(node):  # fast path; col offsets are UTF-8 byte offsets
            raw = self.lines[node.lineno - 1].encode()  # type: ignore[attr-defined]
            return raw[node.col_offset : node.end_col_offset].decode()  # type: ignore[attr-defined]
        return ast.get_source_segment(self.source, node) or ""

    def one_line(self, node: ast.AST) -> bool:
        return getattr(node, "lineno", 0) == getattr(node, "end_lineno", -1)

    def replace_cols(self, lineno: int, c0: int, c1: int, text: str, family: str, note: str) -> None:
        line = self.lines[lineno - 1]
        raw = line.encode()  # AST column offsets count UTF-8 bytes
        new_line = (raw[:c0] + text.encode() + raw[c1:]).decode()
        if new_line != line:
            self.edits.append(Edit(family, self.function, lineno, lineno, line, new_line, note))

    def token_between(self, lineno: int, c0: int, c1: int, family: str, table: dict[str, list[str]]) -> None:
        """Replace the operator token found between columns c0 and c1 of a line."""
        gap = self.lines[lineno - 1].encode()[c0:c1].decode()
        token = gap.strip().strip("()").strip()
        if not token or gap.count(token) != 1:
            return
        at = c0 + len(gap[: gap.index(token)].encode())
        for alt in _alternatives(table, token, self.mode):
            self.replace_cols(lineno, at, at + len(token), alt, family, f"{token} -> {alt}")

    def shift(self, node: ast.expr, family: str) -> None:
        """Off-by-one variants of an integer-valued expression (bounds of ranges, slices, indexes)."""
        if not self.one_line(node):
            return
        text = self.seg(node)
        outs: list[str] = []
        if isinstance(node, ast.Constant) and type(node.value) is int:
            outs = [str(node.value + 1), str(node.value - 1)]
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            outs = [f"-{node.operand.value + 1}", f"-{node.operand.value - 1}" if node.operand.value > 1 else "-2"]
        else:
            m = re.fullmatch(r"(.+?) ([+-]) 1", text)
            if m:
                outs.append(m.group(1))
            if self.mode == "repair" or not m:
                outs += [f"{text} - 1", f"{text} + 1"]
        for out in dict.fromkeys(outs):
            if self.mode == "plant" and out.startswith("-") and isinstance(node, ast.Constant):
                continue
            self.replace_cols(node.lineno, node.col_offset, node.end_col_offset, out, family, f"{text} -> {out}")

    # -- visitors --------------------------------------------------------------------------------------------
    def visit(self, node: ast.AST, in_fstring: bool = False) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_fstring or isinstance(node, ast.JoinedStr)
            if not inside:
                self.visit_node(child)
            self.visit(child, inside)

    def visit_node(self, node: ast.AST) -> None:
        name = type(node).__name__
        handler = getattr(self, f"on_{name}", None)
        if handler is not None:
            handler(node)

    def on_BinOp(self, node: ast.BinOp) -> None:
        if not self.one_line(node) or type(node.op) not in _OPS:
            return
        if any(isinstance(x, (ast.JoinedStr, ast.List)) or (isinstance(x, ast.Constant) and isinstance(x.value, str))
               for x in (node.left, node.right)):
            return
        table = _PLANT_OPS
        self.token_between(node.lineno, node.left.end_col_offset, node.right.col_offset, "wrong_operator", table)

    def on_AugAssign(self, node: ast.AugAssign) -> None:
        if not self.one_line(node) or type(node.op) not in _OPS:
            return
        table = {k + "=": [v + "=" for v in vs] for k, vs in _PLANT_OPS.items()}
        self.token_between(node.lineno, node.target.end_col_offset, node.value.col_offset, "wrong_operator", table)

    def on_Compare(self, node: ast.Compare) -> None:
        if not self.one_line(node) or len(node.ops) != 1 or type(node.ops[0]) not in _CMP:
            return
        table = _PLANT_CMP
        self.token_between(node.lineno, node.left.end_col_offset, node.comparators[0].col_offset,
                           "wrong_comparison", table)

    def on_BoolOp(self, node: ast.BoolOp) -> None:
        if not self.one_line(node) or len(node.values) != 2:
            return
        table = {"and": ["or"], "or": ["and"]}
        self.token_between(node.lineno, node.values[0].end_col_offset, node.values[1].col_offset,
                           "wrong_boolean_logic", table)

    def on_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not) and self.one_line(node):
            inner = self.seg(node.operand)
            self.replace_cols(node.lineno, node.col_offset, node.end_col_offset, inner, "wrong_boolean_logic",
                              "dropped not")

    def on_If(self, node: ast.If) -> None:
        if self.mode == "repair" and self.one_line(node.test) and not isinstance(node.test, ast.UnaryOp):
            text = self.seg(node.test)
            self.replace_cols(node.test.lineno, node.test.col_offset, node.test.end_col_offset, f"not {text}",
                              "wrong_boolean_logic", "added not")
        guard = (not node.orelse and len(node.body) == 1 and isinstance(node.body[0], (ast.Return, ast.Raise))
                 and self.function is not None and node in self._func_node.body and self.edge_test(node.test))
        if guard and self.mode == "plant":
            start, end = node.lineno, node.end_lineno or node.lineno
            old = "".join(self.lines[start - 1 : end])
            self.edits.append(Edit("missing_edge_case", self.function, start, end, old, "", "removed guard"))

    def edge_test(self, test: ast.expr) -> bool:
        """An edge-case test on a parameter: ``not p``, ``p is None``, ``p <= 0``, ``p == 0``, ``len(p) == 0``."""
        params = {a.arg for a in self._func_node.args.args}

        def param(e: ast.expr) -> bool:
            if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1:
                e = e.args[0]
            return isinstance(e, ast.Name) and e.id in params

        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return param(test.operand)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and param(test.left):
            right, op = test.comparators[0], test.ops[0]
            if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
                return True
            return (isinstance(op, (ast.LtE, ast.Eq)) and isinstance(right, ast.Constant)
                    and type(right.value) is int and right.value == 0)
        return False

    def on_Call(self, node: ast.Call) -> None:
        if not self.one_line(node):
            return
        func = node.func
        if isinstance(func, ast.Name) and func.id == "range" and node.args:
            self.shift(node.args[-1] if len(node.args) > 1 else node.args[0], "off_by_one")
        if isinstance(func, ast.Name) and func.id in _BUILTINS:
            alt = _BUILTINS[func.id]
            self.replace_cols(func.lineno, func.col_offset, func.end_col_offset, alt, "wrong_builtin",
                              f"{func.id} -> {alt}")
        if isinstance(func, ast.Attribute) and func.attr in _METHODS:
            at = func.end_col_offset - len(func.attr)
            self.replace_cols(func.lineno, at, func.end_col_offset, _METHODS[func.attr], "wrong_string_format",
                              f".{func.attr} -> .{_METHODS[func.attr]}")
        if (isinstance(func, ast.Attribute) and func.attr == "join" and isinstance(func.value, ast.Constant)
                and isinstance(func.value.value, str) and func.value.value in _SEPARATORS):
            sep = _SEPARATORS[func.value.value]
            v = func.value
            self.replace_cols(v.lineno, v.col_offset, v.end_col_offset, repr(sep).replace("'", '"'),
                              "wrong_string_format", f"join separator {v.value!r} -> {sep!r}")
        self.swap_args(node)

    def swap_args(self, node: ast.Call) -> None:
        args = node.args
        if len(args) < 2 or any(isinstance(a, ast.Starred) for a in args[:2]):
            return
        a, b = self.seg(args[0]), self.seg(args[1])
        if a == b or isinstance(node.func, ast.Name) and node.func.id in ("max", "min", "range", "zip"):
            return
        line = self.lines[node.lineno - 1]
        sep = line[args[0].end_col_offset : args[1].col_offset]
        self.replace_cols(node.lineno, args[0].col_offset, args[1].end_col_offset, b + sep + a,
                          "swapped_arguments", f"swapped {a} and {b}")

    def on_Subscript(self, node: ast.Subscript) -> None:
        sl = node.slice
        if isinstance(sl, ast.Slice):
            for bound in (sl.lower, sl.upper):
                if bound is not None:
                    self.shift(bound, "off_by_one")
        elif isinstance(sl, ast.Constant) and type(sl.value) is int or (
            isinstance(sl, ast.UnaryOp) and isinstance(sl.operand, ast.Constant)
        ):
            self.shift(sl, "off_by_one")

    def on_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if type(value) not in (int, float) or not self.one_line(node):
            return
        outs: list[str] = []
        if type(value) is int:
            outs = [str(value + 1)] + ([str(value - 1)] if value >= 2 else []) + ([str(value * 10)] if value else [])
            if self.mode == "repair" and value and value % 10 == 0:
                outs.append(str(value // 10))
            if self.mode == "repair" and value >= 1:
                outs.append(str(value - 1))
        else:
            doubled, tenth = round(value * 2, 6), round(value / 10, 6)
            outs = [repr(doubled)] if round(doubled / 2, 6) == value else []
            outs += [repr(tenth)] if round(tenth * 10, 6) == value else []
            if self.mode == "repair":
                outs += [repr(round(value / 2, 6)), repr(round(value * 10, 6))]
        for out in dict.fromkeys(outs):
            self.replace_cols(node.lineno, node.col_offset, node.end_col_offset, out, "wrong_constant",
                              f"{value!r} -> {out}")

    def on_Return(self, node: ast.Return) -> None:
        if not isinstance(node.value, ast.Name) or self.function is None:
            return
        if node.value.id not in self.local_names(node.lineno + 1):
            return  # returns a module constant or a global: not a "wrong local variable" site
        for other in self.local_names(node.lineno):
            if other != node.value.id:
                v = node.value
                self.replace_cols(v.lineno, v.col_offset, v.end_col_offset, other, "wrong_variable_returned",
                                  f"return {v.id} -> return {other}")

    def on_JoinedStr(self, node: ast.JoinedStr) -> None:
        if not self.one_line(node):
            return
        text = self.seg(node)
        outs: list[str] = []
        for m in re.finditer(r":(\+?)(0?)(\d*)(\.?)(\d*)([df])\}", text):
            sign, zero, width, dot, prec, kind = m.groups()
            variants = []
            if prec:
                variants += [f":{sign}{zero}{width}.{int(prec) + 1}{kind}}}"]
                variants += [f":{sign}{zero}{width}.{int(prec) - 1}{kind}}}"] if int(prec) > 0 else []
            if zero or (self.mode == "repair" and width):
                variants.append(f":{sign}{'' if zero else '0'}{width}{dot}{prec}{kind}}}")
            if sign or self.mode == "repair":
                variants.append(f":{'' if sign else '+'}{zero}{width}{dot}{prec}{kind}}}")
            outs += [text[: m.start()] + v + text[m.end() :] for v in variants]
        groups = re.findall(r"\{[^{}]*\}", text)
        if len(groups) >= 2 and groups[0] != groups[1]:
            first, second = text.index(groups[0]), text.index(groups[1], text.index(groups[0]) + len(groups[0]))
            outs.append(text[:first] + groups[1] + text[first + len(groups[0]) : second] + groups[0]
                        + text[second + len(groups[1]) :])
        for out in dict.fromkeys(outs):
            self.replace_cols(node.lineno, node.col_offset, node.end_col_offset, out, "wrong_string_format",
                              "changed f-string")

    def local_names(self, before: int) -> list[str]:
        func = self._func_node
        names = [a.arg for a in func.args.args]
        for sub in ast.walk(func):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.lineno < before:
                names.append(sub.id)
        return list(dict.fromkeys(names))

    def run(self, only: set[str] | None) -> list[Edit]:
        tree = ast.parse(self.source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                if only is not None and node.name not in only:
                    continue
                self.function, self._func_node = node.name, node
                body = node.body[1:] if _has_docstring(node) else node.body
                for stmt in body:
                    self.visit_node(stmt)
                    self.visit(stmt)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and only is None:
                self.function = None
                self.on_Constant(node.value)
        return self.edits


def _has_docstring(node: ast.FunctionDef) -> bool:
    first = node.body[0] if node.body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def enumerate_edits(source: str, *, mode: Mode = "plant", functions: set[str] | None = None,
                    check_compiles: bool = True) -> list[Edit]:
    """All single-site edits of ``source`` (module constants included unless ``functions`` restricts the scope).

    Each returned edit differs from ``source`` and (unless ``check_compiles=False``, for callers that compile the
    result anyway) still compiles; order is deterministic (source order, then variant order).
    """
    out: list[Edit] = []
    seen: set[tuple[int, int, str]] = set()
    for edit in _Collector(source, mode).run(functions):
        key = (edit.start, edit.end, edit.new)
        if key in seen:
            continue
        seen.add(key)
        if check_compiles:
            try:
                compile(edit.apply(source), "<mutant>", "exec")
            except SyntaxError:
                continue
        out.append(edit)
    return out


def module_constants_used(source: str, function: str) -> set[str]:
    """Names of module-level constants (``NAME = <literal>``) that ``function`` reads."""
    tree = ast.parse(source)
    consts = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in consts}
    return set()
