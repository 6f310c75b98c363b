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
        """Source with ``$NAME`` placeholders filled (every placeholder must be given)."""
        return Template(self.source).substitute(values)

    def function_names(self) -> list[str]:
        """Top-level function names, in source order."""
        tree = ast.parse(self.render({k: v[0] for k, v in self.params.items()}))
        return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
