"""The typed records of ``tgsuite reproduce``: the run's folders (:class:`Paths`) and the outputs of every stage.

A stage function returns one of the ``*Outputs`` models below; ``StageRunner.run(name, inputs, fn, Outputs)``
writes it as the ``outputs`` of ``<out>/stages/<name>.json`` and, when the stage is skipped, reads the record back
through the same model, so a record that no longer fits fails there, naming the file and the field
(``StageRecordError``), instead of as a ``KeyError`` stages later.

Hashes. Downstream stages hash upstream outputs (``canonical_hash(record)``). A record hashes as the JSON it is
stored as: ``model_dump(mode="json", exclude_unset=True)``, which for a record read back from disk is that JSON
exactly (no field is added, defaulted or coerced: the fields here are strings, ints, bools and free-form dicts), so
run directories written when the records were plain dicts keep their stage hashes. ``outputs.paths`` lists the
files whose existence makes a finished stage fresh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class Paths(BaseModel):
    """Where a reproduction keeps its task sets, models, protocol, runs, analysis and report (``Paths.under(out)``);
    derive variants with ``model_copy(update={...})`` (e.g. ``sft_model`` once the SFT stage has run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    train_tasks: Path
    heldout_tasks: Path
    generalization_tasks: Path  # the unseen-template tier (Preset.heldout)
    sft: Path
    sft_model: Path  # the model RL starts from (a shipped coder's folder: stage_sft_start)
    frozen: Path
    train: Path
    eval: Path
    analysis: Path
    report: Path

    @classmethod
    def under(cls, out: Path) -> Paths:
        return cls(train_tasks=out / "tasks" / "train", heldout_tasks=out / "tasks" / "heldout",
                   generalization_tasks=out / "tasks" / "generalization", sft=out / "sft",
                   sft_model=out / "sft" / "model", frozen=out / "protocol" / "frozen.json", train=out / "train",
                   eval=out / "eval", analysis=out / "analysis" / "analysis.json", report=out / "report")


class Record(BaseModel):
    """A stage's outputs (or a part of them): frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ImagesOutputs(Record):
    image: str | None  # the base image's tag; None without Docker
    digest: str | None = None


class TaskFiles(Record):
    tasks: str
    generalization: str | None = None


class TaskSetRef(Record):
    sha256: str
    name: str
    n: int


class TaskSetOutputs(Record):
    """A written task set (``stage_tasks``; ``write_heldout`` adds the strata, its seed and the generalization
    tier)."""

    paths: TaskFiles
    sha256: str
    name: str
    n: int
    strata: dict[str, int] | None = None
    seed: int | None = None
    dev: bool | None = None
    generalization: TaskSetRef | None = None


class ValidationFiles(Record):
    validation: str


class ValidateOutputs(Record):
    paths: ValidationFiles
    n_valid: int


class ModelFiles(Record):
    model: str


class SftReport(BaseModel):
    """The SFT model's report: ``repro.sft.SFTReport`` as JSON (trained here) or the shipped coder's manifest
    summary (``stage_sft_start``); the pipeline reads ``model_dir``, the rest is kept as written."""

    model_config = ConfigDict(frozen=True, extra="allow")

    model_dir: str


class SftOutputs(Record):
    paths: ModelFiles
    report: SftReport


class FrozenFiles(Record):
    frozen: str


class FreezeOutputs(Record):
    paths: FrozenFiles
    sha256: str
    frozen_at: str


class CheckpointFiles(Record):
    checkpoint: str


class CheckpointRecord(BaseModel):
    """``repro.checkpoint.CheckpointInfo`` as JSON (not imported: it loads torch); kept as written."""

    model_config = ConfigDict(frozen=True, extra="allow")

    path: str
    step: int
    sha256: str


class TrainOutputs(Record):
    paths: CheckpointFiles
    checkpoint: CheckpointRecord | None = None


class ManifestFiles(Record):
    manifest: str


class EvalOutputs(Record):
    paths: ManifestFiles
    finished_at: str
    n: int  # episodes
    scored: int
    resolved: int
    behaviour_ok: int


class AnalysisFiles(Record):
    analysis: str


class AnalyzeOutputs(Record):
    paths: AnalysisFiles
    decision: str
    reasons: list[str]
    # of analysis.json as written, so a re-analysis with the same verdict and reasons (a study adding its exploratory
    # results) changes this record and re-renders the report; None in records written before the field existed
    sha256: str | None = None


class ReportFiles(Record):
    index: str


class ReportOutputs(Record):
    paths: ReportFiles
    summary: dict[str, Any]  # reports.build's summary as JSON


class UnseenTasksOutputs(Record):
    """The behaviour-tier study's task set (``tgsuite.pipeline.tiers.write_unseen_tasks``)."""

    paths: TaskFiles
    sha256: str
    name: str
    instance_ids: list[str]
    repos: list[str]
