"""Preregistered canary (gray-release) plans: the data model (docs/CANARY.md, ``evalsuite.canary``).

A canary plan is a TOML file (``protocols/plans/*.toml``, ``kind = "canary"``) validated into :class:`CanaryPlan`
and frozen by hash before the first look (:class:`FrozenCanaryPlan`); online decisions are CONTINUE / ROLLBACK /
PROMOTE. Split from ``protocols.schema`` (the offline plans), whose frozen base model and git state it shares.

This module imports only the standard library, pydantic and ``protocols.schema``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from protocols.schema import PROTOCOL_SCHEMA_VERSION, Frozen, GitState

CanaryNumerator = Literal[
    "task_completed", "code_produced", "code_ran", "n_edits", "rework", "feedback_up", "feedback_down",
    "tool_calls", "tool_errors", "hallucination_reports",
]  # fmt: skip
CanaryDenominator = Literal["episodes", "code_produced", "tool_calls"]
_PER_EPISODE_BINARY = frozenset({"task_completed", "code_produced", "code_ran", "rework", "feedback_up", "feedback_down"})


class CanaryMetric(Frozen):
    """One online metric: per-unit sum of ``numerator`` over the unit's first ``window_hours`` of exposure, divided
    by the per-unit sum of ``denominator`` (a ratio over randomisation units, delta-method variance).

    ``margin`` is the non-inferiority margin delta > 0 (absolute on the ratio, or relative: ln(R_T/R_C) >
    ln(1 − delta)); PROMOTE needs every metric with a margin to be non-inferior. ``rollback_on``: ``any_harm``
    (upper bound of the oriented effect < 0), ``inferior`` (< −margin) or ``never``. ``anticipated_unit_var`` is the
    variance of one unit's linearised contribution (Y − R N)/N̄ on the ratio scale (e.g. from last month's
    control data); with ``horizon_units`` and ``canary_share`` it fixes the mixing scale tau² before any data.
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    numerator: CanaryNumerator
    denominator: CanaryDenominator = "episodes"
    direction: Literal["higher_is_better", "lower_is_better"]
    role: Literal["primary", "guardrail", "diagnostic"] = "guardrail"
    margin: float | None = Field(default=None, gt=0.0)
    margin_type: Literal["absolute", "relative"] = "absolute"
    rollback_on: Literal["any_harm", "inferior", "never"] = "any_harm"
    window_hours: float = Field(default=24.0, gt=0.0)
    cap: float | None = Field(default=None, gt=0.0)  # winsorise each episode's numerator at this value
    anticipated_unit_var: float = Field(gt=0.0)
    baseline: float | None = Field(default=None, gt=0.0)  # anticipated control ratio; needed for relative margins
    rationale: str = ""
    # exact harm fast path (CANARY §1.4 a3, §5.6): a PrPl-EB union CS on per-unit ratios in [0, 1], valid from the
    # first matured unit; it takes half of the metric's rollback alpha, the mixture bound the other half
    fast_path: Literal["none", "exact_union"] = "none"

    @model_validator(mode="after")
    def _margin_rules(self) -> CanaryMetric:
        if self.rollback_on == "inferior" and self.margin is None:
            raise ValueError(f"metrics.{self.name}: rollback_on = 'inferior' needs a margin (U < -margin)")
        if self.margin_type == "relative":
            if self.margin is None or self.margin >= 1.0 or self.baseline is None:
                raise ValueError(f"metrics.{self.name}: a relative margin needs margin in (0, 1) and baseline (the "
                                 "anticipated control ratio, to put anticipated_unit_var on the log scale)")  # fmt: skip
        if self.fast_path != "none":
            self._check_fast_path()
        if self.role == "diagnostic" and (self.margin is not None or self.rollback_on != "never"):
            raise ValueError(f"metrics.{self.name}: a diagnostic metric decides nothing; drop margin and set "
                             "rollback_on = 'never', or make it a guardrail")  # fmt: skip
        return self

    def _check_fast_path(self) -> None:
        if self.rollback_on != "any_harm":
            raise ValueError(f"metrics.{self.name}: fast_path = 'exact_union' is a harm test; it needs rollback_on = "
                             "'any_harm' (or drop fast_path)")  # fmt: skip
        bounded = (self.denominator == "episodes" and (self.numerator in _PER_EPISODE_BINARY or
                                                       (self.cap is not None and self.cap <= 1.0))) or \
                  (self.numerator, self.denominator) in (("code_ran", "code_produced"), ("tool_errors", "tool_calls"))
        if not bounded:
            raise ValueError(f"metrics.{self.name}: fast_path = 'exact_union' needs per-unit ratios in [0, 1]: a "
                             "0/1 numerator over episodes, code_ran / code_produced, tool_errors / tool_calls, or "
                             "cap <= 1 over episodes")  # fmt: skip

    @property
    def sign(self) -> int:
        """+1 when higher is better: the oriented effect is sign · (canary − control)."""
        return 1 if self.direction == "higher_is_better" else -1


class CanaryPlan(Frozen):
    """A preregistered canary plan (TOML in protocols/plans/), frozen by hash before the first look."""

    schema_version: int = PROTOCOL_SCHEMA_VERSION
    kind: Literal["canary"] = "canary"
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    version: str = "1"
    title: str = ""
    question: str = Field(min_length=1)
    control_model: str = Field(min_length=1)  # what `served_model` says for the control arm
    canary_model: str = Field(min_length=1)
    randomisation_unit: Literal["user", "repo", "org"]
    canary_share: float = Field(gt=0.0, lt=1.0)
    horizon_units: int = Field(ge=10)  # planned units, both arms (tunes tau² and the GST information)
    metrics: list[CanaryMetric] = Field(min_length=1)
    alpha_rollback: float = Field(default=0.05, gt=0.0, lt=0.5)  # family-wise, Bonferroni over harm tests
    alpha_promote: float = Field(default=0.025, gt=0.0, lt=0.5)  # one-sided, per NI claim (IUT: no adjustment)
    alpha_srm: float = Field(default=0.001, gt=0.0, lt=0.5)
    srm_prior_k: float = Field(default=100.0, gt=0.0)
    # --- issue #37: PROMOTE waits until the SRM test would flag a true canary share of `srm_detectable_share`
    # (default 0.8 x canary_share, e.g. 0.08 against 0.10) with probability `srm_power` ---
    srm_detectable_share: float | None = Field(default=None, gt=0.0, lt=1.0)
    srm_power: float = Field(default=0.8, gt=0.0, lt=1.0)
    require_superiority: bool = False  # the primary metric must also be superior (L > 0) to PROMOTE
    method: Literal["msprt", "gst"] = "msprt"  # PROMOTE path; ROLLBACK always uses the anytime-valid bounds
    look_every_hours: float = Field(default=24.0, gt=0.0)  # the look schedule `tgsuite canary` replays
    gst_looks: int = Field(default=7, ge=1, le=100)  # planned looks of the gst design (equally spaced in units)
    min_units_per_arm: int = Field(default=200, ge=2)
    min_events: int = Field(default=20, ge=0)  # events in both arms together before a metric decides
    min_duration_hours: float = Field(default=168.0, ge=0.0)
    max_duration_hours: float = Field(default=504.0, gt=0.0)
    on_srm: Literal["rollback", "hold"] = "rollback"
    on_horizon_inconclusive: Literal["rollback", "extend"] = "rollback"
    crossover_warn: float = Field(default=0.005, ge=0.0, le=1.0)
    crossover_block: float = Field(default=0.02, ge=0.0, le=1.0)
    notes: str = ""

    @model_validator(mode="after")
    def _consistency(self) -> CanaryPlan:
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"metrics: duplicate metric name in {names}")
        if [m.role for m in self.metrics].count("primary") != 1:
            raise ValueError("metrics: exactly one metric needs role = 'primary' (e.g. task completion)")
        if self.max_duration_hours < self.min_duration_hours:
            raise ValueError("max_duration_hours must be >= min_duration_hours")
        if self.on_horizon_inconclusive == "extend" and self.method == "gst":
            raise ValueError("on_horizon_inconclusive = 'extend' is valid only with method = 'msprt'")
        if self.crossover_block < self.crossover_warn:
            raise ValueError("crossover_block must be >= crossover_warn")
        if abs(self.srm_detect_share - self.canary_share) < 1e-9:
            raise ValueError("srm_detectable_share must differ from canary_share (it is the mismatch to detect)")
        if self.canary_model == self.control_model:
            raise ValueError("canary_model and control_model must differ (they name what each arm serves)")
        return self

    @property
    def srm_detect_share(self) -> float:
        """The canary share the SRM check must be able to flag before PROMOTE (``srm_detectable_share``)."""
        return self.srm_detectable_share if self.srm_detectable_share is not None else 0.8 * self.canary_share

    def primary(self) -> CanaryMetric:
        return next(m for m in self.metrics if m.role == "primary")


class FrozenCanaryPlan(Frozen):
    """A frozen canary plan: the plan, the sha256 of its canonical JSON, when and from which code state."""

    plan: CanaryPlan
    sha256: str = Field(min_length=64, max_length=64)
    frozen_at: str  # ISO 8601 UTC; the first analysed episode must not be earlier
    git: GitState = Field(default_factory=GitState)
    source_path: str | None = None
    source_sha256: str | None = None
