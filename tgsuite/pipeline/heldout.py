"""The held-out design of a preset: the stratified primary set, its generalization tier, and the dev seed.

``HeldoutDesign`` is the preset field (``Preset.heldout``); ``write_heldout`` generates both task sets
(``harness.minirepos.primary``) against the preset's training set, so the pipeline (stage ``tasks_heldout``) and
``tgsuite tasks make-mini --preset NAME`` write the same bytes. New module names are made-up words of the probe pool
of ``repro.pretrain.words``: no training data (pretraining, SFT's renamed modules) ever uses one, and none is a
name of the mini world.

Seeds. ``seed`` is the preregistered held-out seed: the primary set the plan freezes and every reported number are
built from it, and nothing is tuned on it. ``dev_seed`` builds a set of the same design for tuning
(``tgsuite tasks make-mini --preset mini --dev``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tgsuite.pipeline.records import TaskSetOutputs


class HeldoutDesign(BaseModel):
    """The primary held-out set: ``repos`` repositories from the training template families with new names, each
    with ``twin_per_repo`` tasks whose fix has a twin in the training set and ``no_twin_per_repo`` tasks whose fix
    has none; plus a generalization tier of ``generalization_repos`` × ``generalization_tasks_per_repo`` tasks from
    unseen templates (a task set of its own, never in a primary endpoint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = Field(description="the preregistered held-out seed: never used for a choice")
    dev_seed: int = Field(description="the seed of the tuning set (same design, other repositories)")
    repos: int = Field(ge=1)
    twin_per_repo: int = Field(ge=0)
    no_twin_per_repo: int = Field(ge=0)
    generalization_repos: int = Field(0, ge=0, description="0 = no generalization tier")
    generalization_tasks_per_repo: int = Field(5, ge=1)
    generalization_seeds: tuple[int, ...] | None = Field(
        None, description="training seeds whose checkpoints the tier evaluates (with the SFT start); None = every "
        "seed; each must be one of the preset's seeds")

    @model_validator(mode="after")
    def _distinct(self) -> HeldoutDesign:
        if self.seed == self.dev_seed:
            raise ValueError(f"heldout: seed and dev_seed must differ (both {self.seed}): tuning on the "
                             "preregistered held-out set is what the dev seed prevents")
        if self.twin_per_repo + self.no_twin_per_repo < 1:
            raise ValueError("heldout: twin_per_repo + no_twin_per_repo must be at least 1")
        return self

    @property
    def strata(self) -> dict[str, int]:
        """Tasks per stratum of the primary set."""
        return {"twin": self.repos * self.twin_per_repo, "no_twin": self.repos * self.no_twin_per_repo}

    @property
    def n_tasks(self) -> int:
        return sum(self.strata.values())


def probe_module_name(rng: random.Random) -> str:
    """A made-up word no training data uses (``repro.pretrain.words`` probe pool)."""
    from repro.pretrain.words import draw

    return draw(rng, "probe")


def train_signatures_of(train_tasks: Path | None, *, repos: int, tasks_per_repo: int, seed: int) -> frozenset[Any]:
    """The training set's fix signatures: read from ``train_tasks`` (a task set folder) when given, else the
    training set regenerated in memory from its (deterministic) arguments."""
    from harness.minirepos.generator import generate
    from harness.minirepos.primary import training_signatures
    from harness.tasks import load_task_set

    if train_tasks is not None:
        ts = load_task_set(train_tasks)
        bad = [i.instance_id for i in ts.instances if i.split != "train"]
        if bad:
            raise ValueError(f"{train_tasks}: {len(bad)} instance(s) are not split 'train' (e.g. {bad[0]}); the "
                             "strata need the training set the model was trained on")
        return training_signatures(ts.instances)
    train, _ = generate(split="train", repos=repos, tasks_per_repo=tasks_per_repo, seed=seed)
    return training_signatures(train)


def write_heldout(design: HeldoutDesign, signatures: frozenset[Any], out: Path, generalization_out: Path | None, *,
                  dev: bool = False, overwrite: bool = True) -> TaskSetOutputs:
    """Write the primary set to ``out`` and the generalization tier to ``generalization_out`` (when the design has
    one); ``dev`` uses ``dev_seed``. Returns the stage outputs: paths, sha256, name, n, strata (and
    ``generalization``: the tier's sha256, name, n)."""
    from harness.minirepos.primary import PrimaryDesign, generate_generalization, generate_primary
    from harness.tasks import load_task_set, write_task_set

    seed = design.dev_seed if dev else design.seed
    used: set[str] = set()
    prim = PrimaryDesign(repos=design.repos, twin_per_repo=design.twin_per_repo,
                         no_twin_per_repo=design.no_twin_per_repo, seed=seed)
    instances, snaps = generate_primary(prim, signatures, probe_module_name, used_names=used)
    write_task_set(out, instances, snaps, overwrite=overwrite)
    ts = load_task_set(out)
    strata: dict[str, int] = {}
    for inst in ts.instances:
        strata[inst.stratum] = strata.get(inst.stratum, 0) + 1
    rec: dict[str, Any] = {"paths": {"tasks": str(out / "tasks.jsonl")}, "sha256": ts.sha256, "name": ts.name,
                           "n": len(ts.instances), "strata": strata, "seed": seed, "dev": dev}
    if design.generalization_repos and generalization_out is not None:
        gen, gsnaps = generate_generalization(repos=design.generalization_repos,
                                              tasks_per_repo=design.generalization_tasks_per_repo, seed=seed,
                                              used_names=used)
        write_task_set(generalization_out, gen, gsnaps, overwrite=overwrite)
        gts = load_task_set(generalization_out)
        rec["paths"]["generalization"] = str(generalization_out / "tasks.jsonl")
        rec["generalization"] = {"sha256": gts.sha256, "name": gts.name, "n": len(gts.instances)}
    return TaskSetOutputs.model_validate(rec)
