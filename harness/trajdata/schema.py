"""Data contracts of imported trajectory datasets (written to disk, read by training): records and the card.

A dataset directory holds ``records.jsonl`` (one :class:`TrajectoryRecord` per line), ``card.json``
(:class:`DatasetCard`) and ``card.md`` (the same card for people). The trajectory itself is the project's
``harness.schema.Trajectory``; a record adds where it came from (:class:`Provenance`) and what the log says about its
outcome (:class:`RecordOutcome`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.schema import Trajectory

DATASET_VERSION = 1
SourceFormat = Literal["openai_jsonl", "inspect_json", "inspect_eval", "tgsuite_run"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Provenance(_Frozen):
    """Where a record came from: the file, the place in it, and the id the source gave it."""

    source_format: SourceFormat
    path: str
    locator: str = Field(description="line N (JSONL), sample ID epoch N (Inspect), or the episode attempt directory")
    source_id: str | None = None
    source_sha256: str = Field(description="sha256 of the source file (of result.json for a tgsuite episode)")
    model: str | None = None


class RecordOutcome(_Frozen):
    """What the log says about the episode's outcome; ``None`` = the log does not say."""

    resolved: bool | None = None
    reward: float | None = None
    code_runs: bool | None = None
    infra_error: str | None = None
    feedback_rating: float | None = Field(None, ge=-1.0, le=1.0)
    truncated: str | None = Field(None, description="why the log says the episode was cut short, if it does")
    status: str | None = None


class TrajectoryRecord(_Frozen):
    """One imported episode, normalised to the project's trajectory schema, with its provenance."""

    record_id: str = Field(description="sha256 (16 hex) of the provenance: stable across re-imports")
    trajectory: Trajectory
    outcome: RecordOutcome = RecordOutcome()
    provenance: Provenance


class SkipCount(_Frozen):
    """Records an importer skipped (``--skip-invalid``, or a kind of entry that holds no trajectory)."""

    reason: str
    count: int
    examples: list[str] = Field(default_factory=list, description="up to 5 locators, with the error")


class SourceSummary(_Frozen):
    path: str
    source_format: SourceFormat
    sha256: str
    records: int
    skipped: list[SkipCount] = Field(default_factory=list)


class FilterCount(_Frozen):
    """What one filter did: records in, records removed, and up to 5 removed record ids with the reason."""

    name: str
    description: str
    params: dict[str, float | int | str | bool | None] = Field(default_factory=dict)
    n_in: int
    removed: int
    unchecked: int = Field(0, description="records the filter could not judge (kept, counted)")
    examples: list[str] = Field(default_factory=list)


class DatasetCard(_Frozen):
    version: int = DATASET_VERSION
    name: str
    created_at: str
    sources: list[SourceSummary]
    n_imported: int
    n_records: int
    filters: list[FilterCount] = Field(default_factory=list)
    task_set: str | None = None
    task_set_sha256: str | None = None
    seed: int = 0
    records_sha256: str = ""
    notes: list[str] = Field(default_factory=list)
