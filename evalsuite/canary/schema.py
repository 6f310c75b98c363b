"""Data crossing evalsuite.canary's boundary: logged episode rows in, look results out (pydantic, frozen, strict).

Input rows are validated in strict mode: a boolean must be JSON ``true``/``false`` (not 0/1 or "yes"), a count a
JSON integer, a timestamp ISO 8601 *with* a time zone; nothing is coerced and unknown fields are errors.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from evalsuite.schema import Check

Arm = Literal["control", "canary"]
Decision = Literal["CONTINUE", "ROLLBACK", "PROMOTE"]
GateLevel = Literal["ok", "warn", "block"]
MetricStatus = Literal["burn_in", "degenerate", "inferior", "harm", "superior", "noninferior", "inconclusive"]


_ISO_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]")


def _iso_8601_text(value: object) -> object:
    """A timestamp written as ISO 8601 text, parsed here (pydantic would read a string of digits, "1796000000", as
    Unix seconds, silently, where the log format promises ISO 8601 with a time zone); other values go on to
    pydantic's strict check, which refuses them."""
    if not isinstance(value, str):
        return value
    try:
        if not _ISO_DATE_TIME.match(value):
            raise ValueError
        return datetime.fromisoformat(value.upper())  # 3.11+: any ISO 8601 form; upper: a t or z as T or Z
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 date and time (YYYY-MM-DDTHH:MM:SS with a time zone, e.g. "
                         "2026-12-01T10:00:00Z; a number, in a string or not, is not read as Unix seconds)") from None


Timestamp = Annotated[AwareDatetime, BeforeValidator(_iso_8601_text)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CanaryEpisode(_Frozen):
    """One logged production episode (one JSON object per line of the episodes log)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    episode_id: str = Field(min_length=1)
    unit_id: str = Field(min_length=1)  # the randomisation unit (user, repo or org), sticky
    arm: Arm  # the ASSIGNED arm (intention to treat), not what was served
    ts: Timestamp  # episode start
    served_model: str | None = None  # diagnostic: what actually answered (crossover gate)
    task_completed: bool
    code_produced: bool
    code_ran: bool | None = None  # null exactly when no code was produced
    n_edits: int = Field(ge=0)
    rework: bool  # the user re-asked the same task afterwards (pre-registered linking rule)
    feedback: Literal["up", "down"] | None = None  # null: the user gave no rating
    tool_calls: int = Field(ge=0)
    tool_errors: int = Field(ge=0)
    hallucination_reports: int = Field(ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> CanaryEpisode:
        if self.tool_errors > self.tool_calls:
            raise ValueError(f"tool_errors = {self.tool_errors} > tool_calls = {self.tool_calls}; an error is a "
                             "failed tool call, so tool_errors <= tool_calls")  # fmt: skip
        if self.code_produced != (self.code_ran is not None):
            raise ValueError("code_ran must be true/false when code_produced is true, and null when it is false "
                             "(whether code ran is defined only for episodes that produced code)")  # fmt: skip
        return self


class PrePeriod(_Frozen):
    """A unit's pre-exposure metrics (before ``assign_ts``, both arms served the production model): the number of
    episodes and how many completed the task. Feeds the pre-period balance (A/A) gate (CANARY §4.3 item 6)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    episodes: int = Field(ge=0)
    task_completed: int = Field(ge=0)

    @model_validator(mode="after")
    def _counts(self) -> PrePeriod:
        if self.task_completed > self.episodes:
            raise ValueError("pre_period.task_completed must be <= pre_period.episodes (completions are episodes)")
        return self


class CanaryAssignment(_Frozen):
    """One randomisation record (optional log): the unit, its assigned arm and its first exposure; optionally its
    pre-period metrics (every row or none: ``logs.read_assignments`` refuses a mix)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    unit_id: str = Field(min_length=1)
    arm: Arm
    assign_ts: Timestamp
    pre_period: PrePeriod | None = None


class Gate(_Frozen):
    """A data-quality gate at one look: ``block`` stops the canary (ROLLBACK or HOLD), ``warn`` blocks PROMOTE."""

    name: str
    level: GateLevel
    detail: str


class SRMLook(_Frozen):
    canary_units: int
    control_units: int
    expected_share: float
    log_bf: float
    p_anytime: float  # running minimum over looks (anytime-valid)
    p_chisq: float  # single-look chi-square, for audits only (not valid under repeated looks)
    flagged: bool


class MetricLook(_Frozen):
    """One metric at one look. ``effect``/``lower``/``upper``/``bar`` are on the ORIENTED scale (higher is better):
    sign · (canary − control) on the metric's scale (difference of ratios, or log ratio for relative margins)."""

    name: str
    role: str
    scale: Literal["diff", "logratio"]
    sign: int
    n_canary: int  # matured units in the analysis
    n_control: int
    ratio_canary: float | None
    ratio_control: float | None
    effect: float | None
    var: float | None
    lower: float | None  # running max of the one-sided lower bound at alpha_promote (NI)
    upper: float | None  # running min of the one-sided upper bound at alpha_harm (ROLLBACK)
    bar: float | None  # -margin on the oriented scale; None without a margin
    alpha_harm: float | None
    p_harm: float  # always-valid p of H0: no harm (oriented effect >= 0)
    p_ni: float | None  # always-valid p of H0: inferior (oriented effect <= bar)
    method_ni: Literal["msprt", "gst", "none"]
    status: MetricStatus
    note: str = ""
    fast_upper: float | None = None  # running min of the exact fast-path upper bound (oriented), at alpha_harm / 2


class LookResult(_Frozen):
    index: int
    as_of: str  # ISO 8601 UTC
    elapsed_hours: float
    units: dict[str, int]  # assigned units so far, by arm
    srm: SRMLook
    gates: list[Gate]
    metrics: list[MetricLook]
    decision: Decision
    reasons: list[str]
    terminal: bool


class CanaryResult(_Frozen):
    """Every look of one canary and the current decision (the last look's)."""

    plan_name: str
    plan_sha256: str
    episodes_path: str
    assignments_path: str | None
    n_episodes: int
    n_units: int
    method: Literal["msprt", "gst"]
    alpha_allocation: dict[str, float]  # harm tests' share of alpha_rollback (Bonferroni), by metric
    looks: list[LookResult]
    decision: Decision
    reasons: list[str]
    record_path: str | None = None  # the frozen record file the logs were checked against (None: passed in memory)
    prereg_checks: list[Check] = Field(default_factory=list)  # its git anchor (verify_anchor); any fail: gate prereg
