"""Module templates for the mini task family: the data model and the registry.

A ``ModuleTemplate`` is the source of one realistic Python module (docstrings, 20-120 lines, standard library
only, no ``while`` loops so that every mutant terminates; the generated code has no docstrings, see
``strip_docstrings``) plus call cases per function. Expected values are never
written by hand: the generator executes the clean module to get them, and executes each mutant to see which
cases detect the planted bug. ``$NAME`` placeholders (``string.Template``) are filled per repository from
``params`` so that repositories built from the same template differ in their constants.

Two disjoint pools:

- ``train``: used by the train split and by the held-out ``seen_templates`` tier;
- ``unseen``: used only by the held-out ``unseen_templates`` tier. No function name or module name of an unseen
  template occurs in any train template (``check_pools_disjoint`` proves it; a test calls it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from string import Template
from typing import Literal

Pool = Literal["train", "unseen"]


@dataclass(frozen=True)
class ModuleTemplate:
    """One module: ``module`` is the file stem, ``cases`` maps function name -> argument lists (Python source)."""

    key: str
    module: str
    pool: Pool
    domain: str
    source: str
    cases: dict[str, tuple[str, ...]]
    params: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def render(self, values: dict[str, str]) -> str:
        """Source with ``$NAME`` placeholders filled (every placeholder must be given) and without
        docstrings (``strip_docstrings``)."""
        return strip_docstrings(Template(self.source).substitute(values))

    def summary(self) -> str:
        """The first line of the template's module docstring (what the repository's README says of the module)."""
        tree = ast.parse(Template(self.source).substitute({k: v[0] for k, v in self.params.items()}))
        return (ast.get_docstring(tree) or "").partition("\n")[0]

    def function_names(self) -> list[str]:
        """Top-level function names, in source order."""
        tree = ast.parse(self.render({k: v[0] for k, v in self.params.items()}))
        return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]


def strip_docstrings(source: str) -> str:
    """``source`` without docstrings (module, class, function; whole lines removed, and the blank lines after the
    module docstring). The templates keep their docstrings as documentation for maintainers (the README of a
    generated repository lists each module's first docstring line); the code an agent reads does not carry them
    (issue #20: they were a large share of every ``read_file`` of a module). A docstring that shares a line with
    code, or is a body's only statement, is an error naming it."""
    tree = ast.parse(source)
    drop: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if ast.get_docstring(node) is None:
            continue
        doc, name = node.body[0], getattr(node, "name", "<module>")
        end = doc.end_lineno or doc.lineno
        if len(node.body) == 1 or getattr(node, "lineno", 0) == doc.lineno or node.body[1].lineno == end:
            raise ValueError(f"template {name!r}: its docstring must be on lines of its own and be followed by code")
        drop.update(range(doc.lineno, end + 1))
    lines = source.splitlines(keepends=True)
    kept = [line for k, line in enumerate(lines, start=1) if k not in drop]
    return "".join(kept).lstrip("\n")


def all_templates() -> list[ModuleTemplate]:
    """Every template of both pools, in a fixed order."""
    from harness.minirepos.templates_train import TRAIN_TEMPLATES_A
    from harness.minirepos.templates_train_b import TRAIN_TEMPLATES_B
    from harness.minirepos.templates_unseen import UNSEEN_TEMPLATES

    return [*TRAIN_TEMPLATES_A, *TRAIN_TEMPLATES_B, *UNSEEN_TEMPLATES]


def templates_for(pool: Pool) -> list[ModuleTemplate]:
    """The templates of one pool, in a fixed order."""
    return [t for t in all_templates() if t.pool == pool]


def check_pools_disjoint() -> None:
    """Raise ValueError if an unseen template shares a module or function name with any train template."""
    train, unseen = templates_for("train"), templates_for("unseen")
    train_funcs = {f for t in train for f in t.function_names()}
    train_modules = {t.module for t in train} | {t.key for t in train}
    for t in unseen:
        clash = set(t.function_names()) & train_funcs
        if clash or t.module in train_modules or t.key in train_modules:
            raise ValueError(f"unseen template {t.key!r} overlaps the train pool: {sorted(clash) or t.module}")
    keys = [t.key for t in all_templates()]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate template keys: {keys}")
