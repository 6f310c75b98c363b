"""The data model of a mini-repository module template (``harness.minirepos.templates`` is the registry).

The template pools (``templates_train``, ``templates_train_b``, ``templates_unseen``) import this module; the
registry imports the pools; nothing imports back.
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
