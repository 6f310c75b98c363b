"""On-disk contract of a report folder: ``summary.json`` (for CI and pull-request bots).

Folder layout written by :func:`reports.build.build_report`::

    <out>/index.html              self-contained (inline CSS/SVG/JS, no network), opens from file://
    <out>/trajectories/*.html     one page per episode, for at most ``max_trajectory_pages`` episodes
    <out>/summary.json            this model
    <out>/summary.md              the same, as Markdown for a pull-request comment
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

REPORT_SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CriterionSummary(_Frozen):
    endpoint: str
    kind: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    lower_one_sided: float | None
    bar: float
    alpha_one_sided: float
    verdict: Literal["pass", "fail", "not_evaluated"]
    sensitivity_agree: bool | None = None


class ReportSummary(_Frozen):
    schema_version: int = REPORT_SCHEMA_VERSION
    verdict: Literal["SHIP", "NO-SHIP", "INCONCLUSIVE"]
    reasons: list[str]
    plan_name: str
    plan_version: str
    protocol_hash: str
    protocol_hash_verified: bool | None  # None when no frozen protocol was given to compare against
    estimand: str
    arms: dict[str, str]
    criteria: list[CriterionSummary]
    coverage: float
    coverage_ok: bool
    n_deviations: int
    n_episodes: int
    n_trajectory_pages: int
    warnings: list[str] = Field(default_factory=list)
    generated_at: str
    files: list[str]
