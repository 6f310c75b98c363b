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

from harness.minirepos.template_model import ModuleTemplate, Pool, strip_docstrings
from harness.minirepos.templates_train import TRAIN_TEMPLATES_A
from harness.minirepos.templates_train_b import TRAIN_TEMPLATES_B
from harness.minirepos.templates_unseen import UNSEEN_TEMPLATES

__all__ = ["ModuleTemplate", "Pool", "all_templates", "check_pools_disjoint", "strip_docstrings", "templates_for"]


def all_templates() -> list[ModuleTemplate]:
    """Every template of both pools, in a fixed order."""
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
