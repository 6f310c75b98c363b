"""The mini task family: generated small Python repositories with one planted bug per task.

Public entry points: ``make_mini`` (generate and write a task set folder) and ``generator.generate`` (in memory).
Modules: ``templates*`` (module sources and call cases), ``bugs`` (bug families as AST-located edits),
``evaluate`` (runs generator-authored code to get expected values and detect bugs), ``render`` (names, tests,
diffs, problem statements), ``generator`` (repositories, tasks, splits and tiers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.minirepos.generator import GENERATOR_VERSION, MiniSplit, generate
from harness.tasks import SnapshotFormat, write_task_set

__all__ = ["GENERATOR_VERSION", "MiniSummary", "generate", "make_mini"]


@dataclass(frozen=True)
class MiniSummary:
    out: Path
    tasks: int
    repos: int
    requested: int
    families: dict[str, int]
    tiers: dict[str, int]


def make_mini(out: str | Path, *, split: MiniSplit, repos: int, tasks_per_repo: int, seed: int,
              overwrite: bool = False, snapshot_format: SnapshotFormat = "dir") -> MiniSummary:
    """Generate a mini task set and write it to ``out`` (``tasks.jsonl`` + ``snapshots/``)."""
    instances, snapshots = generate(split=split, repos=repos, tasks_per_repo=tasks_per_repo, seed=seed)
    path = write_task_set(out, instances, snapshots, overwrite=overwrite, snapshot_format=snapshot_format)
    families: dict[str, int] = {}
    tiers: dict[str, int] = {}
    for inst in instances:
        families[inst.bug_family or "?"] = families.get(inst.bug_family or "?", 0) + 1
        tiers[inst.template_tier] = tiers.get(inst.template_tier, 0) + 1
    return MiniSummary(path, len(instances), len({i.repo for i in instances}), repos * tasks_per_repo,
                       dict(sorted(families.items())), dict(sorted(tiers.items())))
