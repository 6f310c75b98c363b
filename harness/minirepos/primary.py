"""The primary held-out set of the mini world, stratified by fix twins, and its generalization tier.

Why. A model trained by SFT on the mini train split resolves held-out tasks whose gold fix it has seen fixed in
training (a "twin": a training task whose gold patch removes and adds the same line texts), and almost never the
others. How many twins a held-out set holds depends on the task seed, so an unstratified coding rate measured the
seed as much as the model. Here the primary set holds a FIXED number of tasks per stratum:

- ``twin``: the gold fix's changed lines (``fix_signature``) equal those of a task of the training set;
- ``no_twin``: no training task's do (repair beyond recall).

Every primary repository is built from the TRAIN template families (template tier ``seen_templates``), with a
held-out repository name (the held-out half of the name space, ``render.repo_name``) and new module names drawn by
``module_namer`` (the pipeline passes made-up words of a pool no training data uses); each repository contributes
exactly ``twin_per_repo`` twin and ``no_twin_per_repo`` no-twin tasks, so the strata are balanced within every
repository (a repository lacking either is skipped, deterministically). Repositories from the UNSEEN template
pool form the ``generalization`` tier: a task set of its own, reported, never part of a primary endpoint.

The training set is deterministic given (train repos, tasks per repo, task seed): ``training_signatures`` takes
its instances. Everything here is deterministic in its arguments.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from harness.minirepos.generator import ModuleNamer, build_task, plan_repo, plant_bugs
from harness.schema import Stratum, TaskInstance

PRIMARY_VERSION = "primary@v1"
FixSignature = tuple[tuple[str, ...], tuple[str, ...]]


def fix_signature(patch: str) -> FixSignature:
    """(removed line texts, added line texts) of a unified diff, each stripped and sorted: what a fix changes,
    wherever the lines sit and whatever the file is called."""
    removed, added = [], []
    for line in patch.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            removed.append(line[1:].strip())
        elif line.startswith("+"):
            added.append(line[1:].strip())
    return tuple(sorted(removed)), tuple(sorted(added))


def training_signatures(train: Iterable[TaskInstance]) -> frozenset[FixSignature]:
    """The fix signatures of a training set's gold patches."""
    return frozenset(fix_signature(t.patch) for t in train)


def stratum_of(inst: TaskInstance, train_signatures: frozenset[FixSignature]) -> Stratum:
    return "twin" if fix_signature(inst.patch) in train_signatures else "no_twin"


@dataclass(frozen=True)
class PrimaryDesign:
    """``repos`` repositories × (``twin_per_repo`` + ``no_twin_per_repo``) tasks, from held-out seed ``seed``;
    ``candidates`` bugs are planted per repository to choose from; at most ``max_scan`` repositories are tried."""

    repos: int
    twin_per_repo: int
    no_twin_per_repo: int
    seed: int
    candidates: int = 12
    max_scan: int = 400

    def __post_init__(self) -> None:
        if self.repos < 1 or self.twin_per_repo < 0 or self.no_twin_per_repo < 0:
            raise ValueError(f"PrimaryDesign: repos must be >= 1 and the per-stratum counts >= 0, got {self}")
        if self.twin_per_repo + self.no_twin_per_repo < 1:
            raise ValueError("PrimaryDesign: twin_per_repo + no_twin_per_repo must be at least 1")
        if self.candidates < self.twin_per_repo + self.no_twin_per_repo:
            raise ValueError("PrimaryDesign: candidates must be at least twin_per_repo + no_twin_per_repo")

    @property
    def sizes(self) -> dict[str, int]:
        return {"twin": self.repos * self.twin_per_repo, "no_twin": self.repos * self.no_twin_per_repo}


Generated = tuple[list[TaskInstance], dict[str, dict[str, bytes]]]


def generate_primary(design: PrimaryDesign, train_signatures: frozenset[FixSignature],
                     module_namer: ModuleNamer, *, used_names: set[str] | None = None) -> Generated:
    """The stratified primary set: instances (``stratum`` set, ``extra["primary"]`` records the design) and
    snapshots. Raises ValueError naming the fix when ``max_scan`` repositories cannot fill the design."""
    used = used_names if used_names is not None else set()
    want = {"twin": design.twin_per_repo, "no_twin": design.no_twin_per_repo}
    instances: list[TaskInstance] = []
    snapshots: dict[str, dict[str, bytes]] = {}
    accepted = 0
    for index in range(design.max_scan):
        if accepted == design.repos:
            break
        rng = random.Random(f"{PRIMARY_VERSION}:primary:{design.seed}:{index}")
        trial = set(used)
        repo = plan_repo(rng, "heldout", index, trial, tier="seen_templates", module_namer=module_namer)
        picked: dict[str, list[tuple[TaskInstance, dict[str, bytes]]]] = {"twin": [], "no_twin": []}
        for number, bug in enumerate(plant_bugs(rng, repo, design.candidates), start=1):
            inst, files = build_task(rng, repo, bug, number, "heldout")
            stratum = stratum_of(inst, train_signatures)
            if len(picked[stratum]) < want[stratum]:
                picked[stratum].append((inst, files))
        if any(len(picked[s]) < want[s] for s in want):
            continue
        used |= trial
        accepted += 1
        meta = {"version": PRIMARY_VERSION, "seed": design.seed, "twin_per_repo": design.twin_per_repo,
                "no_twin_per_repo": design.no_twin_per_repo}
        for stratum, pairs in picked.items():
            for inst, files in pairs:
                rec = inst.model_copy(update={"stratum": stratum, "extra": {**inst.extra, "primary": meta}})
                instances.append(rec)
                snapshots[rec.instance_id] = files
    if accepted < design.repos:
        raise ValueError(f"only {accepted} of {design.repos} repositories in the first {design.max_scan} held-out "
                         f"candidates have {design.twin_per_repo} twin and {design.no_twin_per_repo} no-twin bugs "
                         "against this training set; lower twin_per_repo / no_twin_per_repo, or train on more tasks")
    instances.sort(key=lambda i: (i.repo, i.stratum, i.instance_id))
    return instances, snapshots


def generate_generalization(*, repos: int, tasks_per_repo: int, seed: int,
                            used_names: set[str] | None = None) -> Generated:
    """Repositories from the UNSEEN template pool (template and function names no training task uses), stratum
    ``generalization``: the separately reported tier."""
    if repos < 1 or tasks_per_repo < 1:
        raise ValueError("generalization: repos and tasks_per_repo must be at least 1")
    used = used_names if used_names is not None else set()
    instances: list[TaskInstance] = []
    snapshots: dict[str, dict[str, bytes]] = {}
    for index in range(repos):
        rng = random.Random(f"{PRIMARY_VERSION}:generalization:{seed}:{index}")
        repo = plan_repo(rng, "heldout", index, used, tier="unseen_templates")
        for number, bug in enumerate(plant_bugs(rng, repo, tasks_per_repo), start=1):
            inst, files = build_task(rng, repo, bug, number, "heldout")
            instances.append(inst.model_copy(update={"stratum": "generalization"}))
            snapshots[inst.instance_id] = files
    return instances, snapshots
