"""The exploratory studies' records in ``analysis.json`` (``Exploratory`` and its parts; built by
``evalsuite.studies`` and ``evalsuite.study_tables``, never part of the decision)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalsuite.schema_base import Frozen, RateCI


class TrendTest(Frozen):
    arm: str
    endpoint: str
    method: str  # "Cochran-Armitage trend over hint quality (correct=0, irrelevant=1, wrong=2)"
    statistic: float | None
    p_value: float | None
    slope: float | None = None


class NoisyFeedbackRow(Frozen):
    arm: str
    feedback_kind: str  # "correct" | "irrelevant" | "wrong" | a mixture label such as "wrong=0.3"
    wrong_fraction: float | None = None
    endpoint: str
    rate: RateCI


class NoisyFeedbackResult(Frozen):
    rows: list[NoisyFeedbackRow]
    trends: list[TrendTest] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class ComputeRow(Frozen):
    arm: str
    seed: int
    rollout_tokens: int = 0
    teacher_forward_tokens: int = 0
    trainer_tokens: int = 0
    flops: float = 0.0
    wall_s: float = 0.0
    peak_memory_bytes: int = 0
    tuning_trials: int = 0


class MatchedComparison(Frozen):
    endpoint: str
    compute_axis: Literal["flops", "wall_s", "rollout_tokens", "trainer_tokens"]
    budget: float
    treatment_rate: float | None
    baseline_rate: float | None
    estimate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    method: str = ""
    note: str = ""


class EqualComputeResult(Frozen):
    compute: list[ComputeRow]
    totals: dict[str, dict[str, float]] = Field(default_factory=dict)  # arm -> quantity -> mean over seeds
    ratios: dict[str, float] = Field(default_factory=dict)  # quantity -> treatment / baseline
    comparisons: list[MatchedComparison] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class PairedChange(Frozen):
    """Paired change (corrective − plain prompt) on the same held-out states."""

    endpoint: str
    a: int  # both prompts succeed
    b: int  # corrective only
    c: int  # plain only
    d: int  # neither
    estimate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    method: str = "tango score"
    mcnemar_p: float | None = None


class CanDoResult(Frozen):
    arm: str
    n_states: int
    changes: list[PairedChange]
    notes: list[str] = Field(default_factory=list)


class ProbeInfo(Frozen):
    """A hint side-effect probe as it was run (``harness.probes.Probe``): the message, and in plain words what it
    asks and what a side effect would look like."""

    name: str  # e.g. "explain"
    kind: str  # hint kind on the probe episodes, e.g. "probe:explain/v1"
    placement: str  # harness.feedback.Placement, e.g. "first_turn"
    text: str
    asks: str
    side_effect: str


class ProbeEndpoint(Frozen):
    """One endpoint of a probe on paired states: plain and probe rates, and the paired change (probe − plain;
    in ``change``, b = probe episode only, c = plain episode only)."""

    endpoint: Literal["edited", "resolved", "blocked"]
    plain_rate: float
    probe_rate: float
    change: PairedChange


class HintProbeResult(Frozen):
    """One probe on one arm (``evalsuite.probes.hint_probe_study``)."""

    probe: ProbeInfo
    arm: str
    n_states: int
    delivered: int  # paired probe episodes in which the probe message was actually inserted
    endpoints: list[ProbeEndpoint]
    notes: list[str] = Field(default_factory=list)


class BehaviourTierRow(Frozen):
    """One behaviour tier × one arm on the unseen held-out repositories (``tgsuite.pipeline.tiers``): Wilson rates,
    episodes pooled over training seeds (descriptive)."""

    tier: str  # the checker id, e.g. "ask_first@v1"
    level: str  # "format" | "style" | "tension"
    arm: str  # "base" (the SFT base) | "grpo" | "tg", the RL arms trained with reward.checker = tier
    seeds: list[int] = Field(default_factory=list)  # training seeds pooled ([] for the base)
    compliance: RateCI  # episodes whose tier checker passes (no FAIL turn) / scored episodes
    compliance_applicable: RateCI  # the same over episodes with at least one applicable (non-NA) turn
    resolved: RateCI


class BehaviourTiersResult(Frozen):
    rows: list[BehaviourTierRow]
    task_set: str = ""  # name of the unseen-tier task set that was evaluated
    n_instances: int = 0
    notes: list[str] = Field(default_factory=list)


# Study inputs (fed by the reproduction pipeline) ------------------------------------------------------------


class CheckpointEval(Frozen):
    """One evaluated checkpoint of one training run, with the compute spent to reach it (equal-compute study)."""

    arm: str
    seed: int
    step: int
    rollout_tokens: int = 0
    teacher_forward_tokens: int = 0
    trainer_tokens: int = 0
    flops: float = 0.0
    wall_s: float = 0.0
    peak_memory_bytes: int = 0
    tuning_trials: int = 0
    successes: dict[str, int]  # endpoint -> successes on the held-out set
    n: int = Field(ge=1)  # scored episodes


class CanDoRow(Frozen):
    """One held-out state answered twice by the same checkpoint: with the plain and with a corrective prompt."""

    arm: str
    state_id: str
    repo: str = ""
    plain_behaviour_ok: bool
    plain_code_ok: bool
    corrective_behaviour_ok: bool
    corrective_code_ok: bool


class LabelRates(Frozen):
    """Held-out rates of one study model family (a label, all its seeds' episodes pooled), descriptive."""

    # generalization: the main models on the unseen-template tier (tgsuite.pipeline.generalization), reference "base"
    study: Literal["ablations", "production_loop", "generalization"]
    label: str  # an arm preset (ablations), "loop" (the production recipe), a main arm, or the reference
    reference: bool = False  # the main-run model the study's labels are read against
    seeds: list[int]
    rates: list[RateCI]  # behaviour_ok, code_ok, joint_ok: Wilson 95 % over pooled episodes, repository-clustered SE


class Exploratory(Frozen):
    noisy_feedback: NoisyFeedbackResult | None = None
    equal_compute: EqualComputeResult | None = None
    can_do_vs_does_do: list[CanDoResult] = Field(default_factory=list)
    hint_probes: list[HintProbeResult] = Field(default_factory=list)  # empty: the study was not run
    behaviour_tiers: BehaviourTiersResult | None = None  # None: the study was not run
    label_rates: list[LabelRates] = Field(default_factory=list)  # ablations, production loop, generalization tier
