"""Data contracts of the analysis: :class:`AnalysisResult` and its parts (written to ``analysis.json``).

``reports`` renders these objects and never recomputes statistics, so everything a report shows is here.
All models are frozen with ``extra="forbid"``. Quantities that cannot be computed are ``None`` with a reason in
``notes`` (never NaN, which JSON cannot carry faithfully). Rates and differences are on the probability scale
(0..1); "points" in prose are ×100.

Conventions:
- Δ = treatment − baseline. ``lower_one_sided`` is the one-sided (1 − α) lower bound used by the decision, i.e. the
  lower limit of the two-sided (1 − 2α) CI. ``ci_low``/``ci_high`` is the two-sided ``ci_level`` interval.
- ``bar`` is the value the lower bound must exceed (0, X or −δ); ``threshold`` is X (superiority_margin / dual),
  ``margin`` is δ (noninferiority).
- p-values are one-sided, for H0: Δ <= bar (for ``dual``: H0: Δ <= 0).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalsuite.schema_base import Frozen, RateCI
from evalsuite.schema_studies import (  # noqa: F401  (re-exported: analysis.json's exploratory part)
    BehaviourTierRow,
    BehaviourTiersResult,
    CanDoResult,
    CanDoRow,
    CheckpointEval,
    ComputeRow,
    EqualComputeResult,
    Exploratory,
    HintProbeResult,
    LabelRates,
    MatchedComparison,
    NoisyFeedbackResult,
    NoisyFeedbackRow,
    PairedChange,
    ProbeEndpoint,
    ProbeInfo,
    TrendTest,
)
from protocols.schema import CriterionKind, Deviation, Estimand

ANALYSIS_SCHEMA_VERSION = 1


_Frozen = Frozen


DecisionVerdict = Literal["SHIP", "NO_SHIP", "INCONCLUSIVE"]
CriterionVerdict = Literal["pass", "fail", "not_evaluated"]


# --------------------------------------------------------------------------------------------------------------
# Per-criterion results
# --------------------------------------------------------------------------------------------------------------


class VarianceSplit(_Frozen):
    """How Var(Δ̂) splits into training-seed and task-sampling parts (STATS §3.3 'Reporting split')."""

    var_total: float
    var_training_seeds: float
    var_task_given_ckpts: float
    se_total: float
    se_training_seeds: float
    se_task_given_ckpts: float
    share_training_seeds: float | None = None  # of var_total; None when var_total = 0
    share_task: float | None = None


class VarianceComponents(_Frozen):
    """Per-arm random-effects ANOVA components of the cell means (STATS §3.3), truncated at 0."""

    arm: str
    seed: float
    task: float
    resid: float
    icc_seed: float | None = None


class SensitivityResult(_Frozen):
    """One prespecified sensitivity analysis (STATS §3.6, S1–S6) for one criterion."""

    name: str  # protocols.schema.SensitivityName
    method: str  # human-readable, e.g. "hierarchical bootstrap, 10,000 resamples, percentile"
    status: Literal["ok", "failed", "skipped"] = "ok"
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    lower_one_sided: float | None = None
    scale: Literal["risk_difference", "logit"] = "risk_difference"
    verdict: CriterionVerdict = "not_evaluated"
    agrees_with_primary: bool | None = None  # None when no verdict could be formed
    note: str = ""
    extra: dict[str, float] = Field(default_factory=dict)
    # counts toward CriterionResult.sensitivity_agree: False for analyses whose disagreement means nothing here
    # (another estimand, no frequentist guarantee, or too few seeds for the method to work); ``note`` says why
    informative: bool = True


class CriterionResult(_Frozen):
    endpoint: str
    kind: CriterionKind
    estimand: Estimand
    method: str  # e.g. "crossed seeds x repos, Satterthwaite t"
    estimate: float | None
    se: float | None = None
    df: float | None = None
    ci_level: float = 0.95
    ci_low: float | None = None
    ci_high: float | None = None
    alpha_one_sided: float
    lower_one_sided: float | None = None
    threshold: float = 0.0
    margin: float | None = None
    bar: float
    verdict: CriterionVerdict
    p_value: float | None = None
    holm_p: float | None = None
    claimed: bool = False  # individually claimable under the preregistered fixed sequence / Holm
    variance: VarianceSplit | None = None
    variance_components: list[VarianceComponents] = Field(default_factory=list)
    degenerate: bool = False
    fallback_used: str | None = None
    n_seeds_treatment: int = 0
    n_seeds_baseline: int = 0
    n_tasks: int = 0
    n_repos: int = 0
    k_episodes: int = 0
    sensitivity: list[SensitivityResult] = Field(default_factory=list)
    sensitivity_agree: bool | None = None  # all evaluated *informative* sensitivity verdicts agree with the primary
    notes: list[str] = Field(default_factory=list)


class Decision(_Frozen):
    verdict: DecisionVerdict
    rule: str = "all criteria pass (intersection-union test, each at its one-sided alpha, no adjustment)"
    reasons: list[str] = Field(default_factory=list)
    claims_procedure: Literal["fixed_sequence", "holm"] = "fixed_sequence"
    claims: list[str] = Field(default_factory=list)  # endpoints individually claimed


# --------------------------------------------------------------------------------------------------------------
# Descriptives
# --------------------------------------------------------------------------------------------------------------


class SeedRate(_Frozen):
    seed: int
    endpoint: str
    successes: float
    n: int
    rate: float | None
    ci_low: float | None = None
    ci_high: float | None = None


class JointTable(_Frozen):
    """Behaviour × code 2×2 table of scored episodes for one arm."""

    both: int  # behaviour_ok and code_ok
    behaviour_only: int
    code_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.behaviour_only + self.code_only + self.neither




class MetricMean(_Frozen):
    """Mean of a secondary per-episode metric over the scored episodes that have it (``se`` = sqrt(var/n))."""

    metric: str
    n: int
    mean: float | None
    se: float | None = None


class ArmAggregate(_Frozen):
    arm: str
    policy: str
    n_episodes: int
    n_scored: int  # infrastructure errors and invalid instances are in ``statuses``, never in a denominator
    statuses: dict[str, int]
    rates: list[RateCI]
    joint_table: JointTable
    per_repo: dict[str, list[RateCI]]  # repository → its rates (episodes pooled; exploratory)
    secondary: list[MetricMean]


class RunAggregate(_Frozen):
    """Per-arm results of one run (``aggregate.json``, ``evalsuite.run_summary``), like lm-eval's: never a decision."""

    schema_version: int = 1
    run_id: str
    created_at: str
    task_set_name: str
    task_set_sha256: str
    git_commit: str | None
    argv: list[str]
    config: dict[str, float | int | str | bool | None]
    versions: dict[str, str]
    arms: list[ArmAggregate]
    decision: Literal["none"] = "none"
    note: str

class ArmSummary(_Frozen):
    arm: str
    role: Literal["treatment", "baseline"]
    seeds: list[int]
    n_scored_episodes: int
    rates: list[RateCI]
    per_seed: list[SeedRate] = Field(default_factory=list)
    joint_table: JointTable


class SecondaryResult(_Frozen):
    """Secondary endpoint (exploratory): per-arm mean and the difference with a crossed CI where possible."""

    endpoint: str
    treatment_mean: float | None
    baseline_mean: float | None
    estimate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    method: str = ""
    n_treatment: int = 0
    n_baseline: int = 0
    exploratory: bool = True
    note: str = ""


class BreakdownRow(_Frozen):
    """Exploratory per-group result (repository, difficulty, template tier or held-out stratum) for one endpoint."""

    by: Literal["repo", "difficulty", "template_tier", "stratum"]
    level: str
    endpoint: str
    n_tasks: int
    treatment: RateCI
    baseline: RateCI
    estimate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    method: str = "newcombe (episodes pooled; exploratory, no clustering)"
    exploratory: bool = True


class MissingCell(_Frozen):
    arm: str
    seed: int
    instance_id: str
    reason: Literal["no_result", "infra_after_retries", "invalid_instance", "missing_seed", "partial"]


class MissingData(_Frozen):
    rule: str  # the preregistered rule, in words
    expected_cells: int  # arms × seeds × tasks × episodes
    observed_cells: int  # scored episodes (before incomplete tasks are dropped)
    coverage: float  # observed_cells / expected_cells
    coverage_threshold: float
    coverage_ok: bool
    infra_excluded: int = 0
    infra_counted_as_failure: int = 0
    invalid_instances_excluded: int = 0
    superseded_attempts: int = 0
    missing: list[MissingCell] = Field(default_factory=list)
    analysed_episodes: int = 0  # episodes in the confirmatory analysis (complete tasks only)
    dropped_tasks: list[str] = Field(default_factory=list)  # tasks without a result in some arm x seed
    per_arm_coverage: dict[str, float] = Field(default_factory=dict)


class Check(_Frozen):
    """One named check with its outcome in words (assay sensitivity, preregistration anchor)."""

    name: str
    status: Literal["pass", "fail", "not_available"]
    detail: str


class ConsortItem(_Frozen):
    """One CONSORT-NI item (Piaggio et al., JAMA 2012;308:2594-2604) and where this analysis covers it."""

    item: str  # e.g. "7a"
    topic: str
    covered: bool
    detail: str


class RunRef(_Frozen):
    run_id: str
    path: str
    created_at: str
    protocol_hash: str | None
    task_set_sha256: str
    git_commit: str | None = None
    n_episodes: int = 0


# --------------------------------------------------------------------------------------------------------------
class PowerSummary(_Frozen):
    """Analytic power of the preregistered design under the plan's stated assumptions (STATS §7)."""

    endpoint: str
    kind: CriterionKind
    power: float
    se: float
    df: float
    seeds_per_arm: int
    n_tasks: int
    method: str = "analytic, noncentral t on Satterthwaite df"
    # power when sigma_seed is at the ends of its 80 % interval (chi-square on sigma_seed_df; a guess: x0.5 and x2)
    power_low: float | None = None
    power_high: float | None = None
    sigma_seed_range: tuple[float, float] | None = None
    sigma_seed_note: str = ""


# --------------------------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------------------------


class AnalysisResult(_Frozen):
    schema_version: int = ANALYSIS_SCHEMA_VERSION
    plan_name: str
    plan_version: str = "1"
    protocol_hash: str
    frozen_at: str
    estimand: Estimand
    created_at: str
    analysis_seed: int
    arms: dict[str, str]  # role -> arm name
    decision: Decision
    criteria: list[CriterionResult]
    arm_summaries: list[ArmSummary] = Field(default_factory=list)
    secondary: list[SecondaryResult] = Field(default_factory=list)
    breakdowns: list[BreakdownRow] = Field(default_factory=list)
    missing_data: MissingData
    deviations: list[Deviation] = Field(default_factory=list)
    runs: list[RunRef] = Field(default_factory=list)
    run_ids: list[str] = Field(default_factory=list)
    power: list[PowerSummary] = Field(default_factory=list)
    exploratory: Exploratory = Field(default_factory=Exploratory)
    software: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    assay_checks: list[Check] = Field(default_factory=list)  # degenerate data, baseline range, positive control
    prereg_checks: list[Check] = Field(default_factory=list)  # git anchor and signature of the frozen record
    consort: list[ConsortItem] = Field(default_factory=list)

    def criterion(self, endpoint: str) -> CriterionResult:
        for c in self.criteria:
            if c.endpoint == endpoint:
                return c
        raise KeyError(f"no criterion on endpoint {endpoint!r}; have {[c.endpoint for c in self.criteria]}")
