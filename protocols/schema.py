"""Preregistered analysis plans: the data model (STATS.md §4–§5, §8.1).

A plan is a TOML file (``protocols/plans/*.toml``) validated into :class:`Protocol`. Unknown keys anywhere are
errors (``extra="forbid"``), so a typo such as ``marign = 0.03`` cannot silently fall back to a default.
Freezing a plan (``tgsuite protocol freeze``) produces a :class:`FrozenProtocol`: the plan plus the sha256 of its
canonical JSON, the UTC time and the git state. Anything that departs from a frozen plan is recorded as a
:class:`Deviation` and shown in every report.

Covered: the question, estimand, arms, task set, design, endpoints, criteria, decision rule, missing-data rule,
coverage threshold, sensitivity analyses, power assumptions and the analysis seed. Not covered: the training
recipe itself (referenced by config hash only) and external timestamping (OSF / RFC 3161; see STATS §5).

This module imports only the standard library and pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

PROTOCOL_SCHEMA_VERSION = 1


class Frozen(BaseModel):
    """The base of every plan record: immutable, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# Endpoint ids. Binary endpoints come from harness.schema.EpisodeResult: behaviour_ok, code_ok (= resolved),
# joint_ok. Secondary (continuous/count) endpoints come from EpisodeResult.metrics.
BinaryEndpoint = Literal["behaviour_ok", "code_ok", "joint_ok"]
SecondaryEndpoint = Literal["tool_call_validity", "steps", "hallucinations"]
EndpointId = Literal["behaviour_ok", "code_ok", "joint_ok", "tool_call_validity", "steps", "hallucinations"]
BINARY_ENDPOINTS: tuple[str, ...] = ("behaviour_ok", "code_ok", "joint_ok")

Estimand = Literal["method", "artifact"]
CriterionKind = Literal["superiority", "superiority_margin", "noninferiority", "dual"]
SensitivityName = Literal[
    "hierarchical_bootstrap",  # S1
    "gee",  # S2
    "bayes_mixed",  # S3
    "per_seed_pairs",  # S4
    "conservative_df",  # S5a
    "repo_weighted",  # S5b
    "leave_one_repo_out",  # S5c
    "infra_as_failure",  # S6
]
ArmRole = Literal["treatment", "baseline"]


class ArmDef(Frozen):
    """One arm of the comparison. ``name`` is what the runner writes in ``EpisodeResult.arm`` (before ``@s<seed>``)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    role: ArmRole
    description: str = ""
    recipe: str = ""  # e.g. a training config path
    config_sha256: str | None = None
    # artifact estimand: which training seed's checkpoint is the artifact under test
    artifact_seed: int | None = None


class TaskSetRef(Frozen):
    name: str = Field(min_length=1)
    sha256: str = Field(min_length=1)
    split: str = "heldout"


class Design(Frozen):
    seeds_per_arm: int = Field(ge=1)
    n_tasks: int = Field(ge=1)
    n_repositories: int = Field(ge=1)
    episodes_per_task: int = Field(default=1, ge=1)
    seed_generation: str = "training seeds 0..m-1; a seed that fails to train still counts (intention to treat)"
    decoding: str = ""
    # the preregistered training-seed ids of every arm (default 0..seeds_per_arm-1); the analysis refuses any other
    # seed and counts a listed seed without results as missing (it never picks seeds after the fact)
    seed_ids: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _seed_ids(self) -> Design:
        if self.seed_ids and (len(self.seed_ids) != self.seeds_per_arm or len(set(self.seed_ids)) != len(self.seed_ids)):
            raise ValueError(
                f"design.seed_ids {self.seed_ids} must list seeds_per_arm = {self.seeds_per_arm} distinct training "
                "seeds (or leave it out for 0..seeds_per_arm-1)"
            )
        return self

    @property
    def planned_seeds(self) -> list[int]:
        """The preregistered training-seed ids (``seed_ids`` or 0..seeds_per_arm-1)."""
        return list(self.seed_ids) if self.seed_ids else list(range(self.seeds_per_arm))


class Endpoint(Frozen):
    id: EndpointId
    role: Literal["primary", "secondary"]
    definition: str = ""
    grader_version: str | None = None


EST_TOL = 1e-12  # far below the smallest step of a difference of rates (1 / episodes per arm) in any real plan


def at_least(estimate: float, threshold: float) -> bool:
    """estimate >= threshold, where equal counts pass: a difference of rates that is X in exact arithmetic
    (14/120 - 2/120 = 0.1) may come out of floating point a few ulps below it (0.09999999999999999), so values
    within ``EST_TOL`` of X count as X. The one comparison of an estimate with a preregistered minimum."""
    return estimate >= threshold - EST_TOL


class CriterionSpec(Frozen):
    """One ship criterion, tested on the one-sided lower bound L at ``alpha_one_sided``.

    kind / passes when: ``superiority`` L > 0; ``superiority_margin`` L > threshold; ``noninferiority``
    L > -margin; ``dual`` L > 0 and the estimate >= threshold (Roychoudhury et al. 2018).
    """

    endpoint: BinaryEndpoint
    kind: CriterionKind
    threshold: float = 0.0  # X for superiority_margin / dual
    margin: float | None = None  # delta > 0 for noninferiority
    alpha_one_sided: float = Field(default=0.025, gt=0.0, lt=0.5)
    rationale: str = ""
    # CONSORT-NI item 7a: why a loss of `margin` is acceptable in exchange for the gain (not only run-to-run spread)
    acceptable_loss: str = ""

    @model_validator(mode="after")
    def _kind_fields(self) -> CriterionSpec:
        if self.kind == "noninferiority":
            if self.margin is None or not (0.0 < self.margin < 1.0):
                raise ValueError(
                    f"criterion on {self.endpoint}: kind 'noninferiority' needs margin in (0, 1) "
                    "(e.g. margin = 0.03 for 3 points); fix the [[criteria]] entry"
                )
        elif self.margin is not None:
            raise ValueError(
                f"criterion on {self.endpoint}: 'margin' is only for kind 'noninferiority'; use 'threshold' for {self.kind}"
            )
        if self.kind == "superiority" and self.threshold != 0.0:
            raise ValueError(
                f"criterion on {self.endpoint}: kind 'superiority' tests L > 0; for L > {self.threshold} use "
                "kind 'superiority_margin'"
            )
        if self.kind in ("superiority_margin", "dual") and not (0.0 < self.threshold < 1.0):
            raise ValueError(f"criterion on {self.endpoint}: kind '{self.kind}' needs threshold in (0, 1)")
        return self

    @property
    def bar(self) -> float:
        """The value the one-sided lower bound must exceed."""
        if self.kind == "noninferiority":
            return -float(self.margin or 0.0)
        if self.kind == "superiority_margin":
            return self.threshold
        return 0.0

    @property
    def null_value(self) -> float:
        """Δ0 of H0: Δ <= Δ0 (used for p-values)."""
        return self.bar

    def estimate_passes(self, estimate: float) -> bool:
        """The ``dual`` criterion's second condition, estimate >= X (:func:`at_least`); True for other kinds."""
        return self.kind != "dual" or at_least(estimate, self.threshold)


class DecisionRule(Frozen):
    rule: Literal["all_pass"] = "all_pass"  # intersection-union test (Berger 1982): no multiplicity adjustment
    claims: Literal["fixed_sequence", "holm"] = "fixed_sequence"
    # order of individual claims (criteria indices are matched by endpoint); default = order of [[criteria]]
    order: list[BinaryEndpoint] = Field(default_factory=list)
    df_rule: Literal["satterthwaite", "conservative"] = "satterthwaite"
    fallback_method: Literal["newcombe", "tango"] = "newcombe"  # used when the crossed variance is 0
    # --- issue #37 (evidence): a superiority-type criterion (superiority, superiority_margin, dual) is not
    # evaluated when the two arms together have fewer than `min_events` of the rarer outcome on its endpoint
    # (successes, or failures near the ceiling): a handful of events cannot show a difference. ---
    min_events: int = Field(default=10, ge=0)
    # the score-type variance rule of the primary estimator (docs/STATS.md §2): "score" (plans up to mini v4) scales
    # each arm's whole seed piece by the squared ratio of p(1 − p) at the restricted and observed rates;
    # "score_components" scales its Bernoulli part by the ratio and only the random-effect parts by its square
    variance: Literal["score", "score_components"] = "score"


class PositiveControl(Frozen):
    """A known-worse checkpoint (an arm in the runs, not one of the two compared arms) that must FAIL every
    non-inferiority criterion against the baseline; if it passes, the evaluation cannot detect a loss."""

    arm: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = Field(min_length=1)  # trained and evaluated with the plan's seeds and tasks


class AssaySensitivity(Frozen):
    """Checks that the evaluation could have shown a loss (ICH E10 'assay sensitivity'), applied to every
    non-inferiority criterion: the baseline arm's rate on its endpoint must lie in [min_baseline_rate,
    max_baseline_rate], and the optional positive control must fail. Otherwise the criterion is not evaluated."""

    # --- issue #37: min_baseline_rate left out means twice the criterion's margin (2δ): below it the NI test's
    # type-I error was measured above α (0.0425 at a 0.10 baseline with δ 0.05 under a fixed 0.05 minimum). ---
    min_baseline_rate: float | None = Field(default=None, ge=0.0, lt=1.0)
    max_baseline_rate: float = Field(default=0.95, gt=0.0, le=1.0)
    positive_control: PositiveControl | None = None
    rationale: str = ""

    @model_validator(mode="after")
    def _order(self) -> AssaySensitivity:
        if self.min_baseline_rate is not None and self.min_baseline_rate >= self.max_baseline_rate:
            raise ValueError("assay_sensitivity: min_baseline_rate must be below max_baseline_rate")
        return self

    def min_rate(self, margin: float | None) -> float:
        """The minimum baseline rate for a criterion with this NI ``margin``: the plan's value, else 2 × margin."""
        if self.min_baseline_rate is not None:
            return self.min_baseline_rate
        return 2.0 * float(margin or 0.0)


class MissingDataRule(Frozen):
    infra: Literal["exclude", "count_as_failure"] = "exclude"
    max_retries: int = Field(default=3, ge=0)
    # a task lacking any scored episode in some arm x seed is dropped from every arm (complete-task analysis; the
    # coverage threshold guards against dropping much), or its missing cells are scored as failures
    missing_cell: Literal["drop_task", "count_as_failure"] = "drop_task"
    note: str = ""


class PowerAssumptions(Frozen):
    """Inputs of the analytic power calculation (STATS §7); stated before anything is trained."""

    true_difference: float = 0.0  # assumed Δ for criteria whose endpoint is not in expected_differences
    expected_differences: dict[BinaryEndpoint, float] = Field(default_factory=dict)
    sigma_seed: float = Field(default=0.02, ge=0.0)
    tau: float = Field(default=0.15, ge=0.0)
    icc_repo: float = Field(default=0.1, ge=0.0, le=1.0)
    sigma_e2: float = Field(default=0.25, ge=0.0)
    target_power: float = Field(default=0.8, gt=0.0, lt=1.0)
    tasks_per_repo: float | None = None  # default: design.n_tasks / design.n_repositories
    stated_power: float | None = None  # the power the plan claims (checked by `tgsuite protocol power`)
    # degrees of freedom behind sigma_seed (a pilot with m seeds per arm in a arms: a*(m-1)); None = a guess
    sigma_seed_df: int | None = Field(default=None, ge=1)
    source: str = ""


# --------------------------------------------------------------------------------------------------------------
# Pinned evaluation settings: the optional [eval] table (issue 36). `tgsuite eval --protocol` refuses a run whose
# settings differ from a pinned value. Left out of a plan, it is left out of the plan's canonical JSON too, so the
# hashes of plans frozen before this table existed do not change (Protocol._drop_unpinned_eval).
# --------------------------------------------------------------------------------------------------------------


class EvalPin(Frozen):
    """Settings of `tgsuite eval` the plan fixes; a field left out is not pinned. Decoding applies to every model
    arm (hf: and openai:); the limits and hints to every arm."""

    temperature: float | None = Field(default=None, ge=0.0)  # --temperature (0 = greedy)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)  # --top-p
    max_tokens: int | None = Field(default=None, ge=1)  # --max-tokens: most tokens per assistant turn
    max_turns: int | None = Field(default=None, ge=1)  # --max-turns
    wall_s: float | None = Field(default=None, gt=0.0)  # --wall-s
    finish_notice: int | None = Field(default=None, ge=0)  # --finish-notice
    format_retries: int | None = Field(default=None, ge=0)  # --format-retries
    feedback: str | None = None  # --feedback, as written (e.g. "none", "correct")

    def pinned(self) -> dict[str, float | int | str]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


# --------------------------------------------------------------------------------------------------------------


class Protocol(Frozen):
    """A preregistered analysis plan (one TOML file)."""

    schema_version: int = PROTOCOL_SCHEMA_VERSION
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    version: str = "1"
    title: str = ""
    authors: list[str] = Field(default_factory=list)
    question: str = Field(min_length=1)
    estimand: Estimand
    weighting: Literal["task", "repo"] = "task"
    arms: list[ArmDef] = Field(min_length=2, max_length=2)
    task_set: TaskSetRef
    design: Design
    endpoints: list[Endpoint] = Field(min_length=1)
    criteria: list[CriterionSpec] = Field(min_length=1)
    decision: DecisionRule = Field(default_factory=DecisionRule)
    missing_data: MissingDataRule = Field(default_factory=MissingDataRule)
    assay_sensitivity: AssaySensitivity = Field(default_factory=AssaySensitivity)
    coverage_threshold: float = Field(default=0.95, gt=0.0, le=1.0)
    sensitivity: list[SensitivityName] = Field(default_factory=list)
    analysis_seed: int = Field(ge=0)
    bootstrap_resamples: int = Field(default=10_000, ge=100)
    power: PowerAssumptions | None = None
    exploratory: list[str] = Field(default_factory=list)
    notes: str = ""
    eval: EvalPin | None = None  # the [eval] table (pinned evaluation settings; block above)

    @model_serializer(mode="wrap")
    def _drop_unpinned_eval(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        if data.get("eval", 0) is None:
            del data["eval"]
        return data

    @model_validator(mode="after")
    def _consistency(self) -> Protocol:
        roles = sorted(a.role for a in self.arms)
        if roles != ["baseline", "treatment"]:
            raise ValueError("arms: need exactly one arm with role 'treatment' and one with role 'baseline'")
        if len({a.name for a in self.arms}) != 2:
            raise ValueError("arms: the two arms need different names")
        ids = [e.id for e in self.endpoints]
        if len(set(ids)) != len(ids):
            raise ValueError(f"endpoints: duplicate endpoint id in {ids}")
        primary = {e.id for e in self.endpoints if e.role == "primary"}
        for c in self.criteria:
            if c.endpoint not in primary:
                raise ValueError(
                    f"criteria: endpoint '{c.endpoint}' is not declared as a primary endpoint; add "
                    f"[[endpoints]] id = '{c.endpoint}', role = 'primary'"
                )
        if len({c.endpoint for c in self.criteria}) != len(self.criteria):
            raise ValueError("criteria: at most one criterion per endpoint")
        for e in self.decision.order:
            if e not in {c.endpoint for c in self.criteria}:
                raise ValueError(f"decision.order: '{e}' has no criterion")
        if self.estimand == "method" and self.design.seeds_per_arm < 2:
            raise ValueError(
                "design.seeds_per_arm: the 'method' estimand needs at least 2 training seeds per arm "
                "(seeds are the unit); use estimand = 'artifact' to test one checkpoint"
            )
        if self.estimand == "artifact" and any(a.artifact_seed is None for a in self.arms):
            raise ValueError("arms: the 'artifact' estimand needs artifact_seed on both arms (which checkpoint)")
        if self.estimand == "artifact" and any(a.artifact_seed not in self.design.planned_seeds for a in self.arms):
            raise ValueError(f"arms: artifact_seed must be one of the preregistered seeds {self.design.planned_seeds}")
        if self.decision.variance == "score_components" and self.estimand != "method":
            raise ValueError(
                "decision.variance: 'score_components' splits each arm's training-seed variance, which the artifact "
                "estimand (one checkpoint per arm) does not have; use variance = \"score\" or estimand = \"method\"")
        if self.decision.fallback_method == "tango" and (self.estimand != "artifact" or self.design.episodes_per_task != 1):
            raise ValueError(
                "decision.fallback_method: 'tango' pairs the two artifact checkpoints task by task, so it needs "
                "estimand = 'artifact' and design.episodes_per_task = 1; use 'newcombe' otherwise"
            )
        pc = self.assay_sensitivity.positive_control
        if pc is not None and pc.arm in {a.name for a in self.arms}:
            raise ValueError(f"assay_sensitivity.positive_control.arm {pc.arm!r} must not be one of the compared arms")
        return self

    def arm(self, role: ArmRole) -> ArmDef:
        return next(a for a in self.arms if a.role == role)

    def ordered_criteria(self) -> list[CriterionSpec]:
        """Criteria in the preregistered claim order (decision.order, then the rest in file order)."""
        by_ep = {c.endpoint: c for c in self.criteria}
        first = [by_ep[e] for e in self.decision.order]
        return first + [c for c in self.criteria if c.endpoint not in self.decision.order]


class GitState(Frozen):
    commit: str | None = None
    dirty: bool | None = None


class FrozenProtocol(Frozen):
    """The frozen record: the plan, the sha256 of its canonical JSON, when and from which code state."""

    protocol: Protocol
    sha256: str = Field(min_length=64, max_length=64)
    frozen_at: str  # ISO 8601 UTC, e.g. 2026-11-29T21:40:00Z
    git: GitState = Field(default_factory=GitState)
    source_path: str | None = None
    source_sha256: str | None = None  # sha256 of the TOML bytes (informative; the canonical hash is `sha256`)
    packages: dict[str, str] = Field(default_factory=dict)


DeviationKind = Literal[
    "plan_changed",  # the plan file no longer hashes to the frozen record
    "protocol_hash_mismatch",  # a run manifest names another protocol hash (or none)
    "run_before_freeze",  # a run was created before the plan was frozen
    "task_set_changed",
    "analysis_changed",
    "data_exclusion",
    "other",
]


class Deviation(Frozen):
    """One recorded departure from the frozen plan (Willroth & Atherton 2024). Every deviation is reported."""

    kind: DeviationKind
    description: str = Field(min_length=1)
    justification: str = Field(min_length=1)
    time: str  # ISO 8601 UTC when it was recorded
    protocol_hash: str | None = None
    run_id: str | None = None  # for run-level deviations (hash mismatch, run before freeze)
    before_outcome_data: bool | None = None
    preregistered: str = ""
    done: str = ""
    effect_on_results: str = ""


class DeviationLog(Frozen):
    """Append-only deviations file (JSON) kept next to the frozen record."""

    protocol_hash: str
    deviations: list[Deviation] = Field(default_factory=list)


class FreezeAnchor(Frozen):
    """Binds a frozen record to something outside its own files (``protocols.anchor``; written next to the record as
    ``<record>.anchor.json``). ``commit`` is a git commit on ``ref`` whose tree holds the record's exact bytes at
    ``path_in_repo``; ``code_commit`` is HEAD of the enclosing checkout at freeze time (None outside git).
    ``signature`` is an Ed25519 signature (hex) over ``record_sha256`` made with the key whose public half is
    ``public_key`` (hex, raw 32 bytes)."""

    record_sha256: str = Field(min_length=64, max_length=64)  # sha256 of the record file's bytes
    repo: str  # git top level that holds the commit
    ref: str
    commit: str = Field(min_length=40, max_length=64)
    commit_time: str  # ISO 8601 UTC (committer date)
    path_in_repo: str
    code_commit: str | None = None
    signature: str | None = None
    public_key: str | None = None
