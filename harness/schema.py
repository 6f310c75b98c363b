"""Data contracts of the harness (ARCHITECTURE §4).

Every object that crosses a package boundary or is written to disk is a frozen pydantic model here, so that
`evalsuite`, `reports` and users can read run directories back without torch or Docker installed.

Covered: task instances and task sets (SWE-bench field names plus ours), trajectories (messages, tool calls,
token ids and behaviour log-probs), grades, behaviour verdicts, episode results with HARNESS §7.6's failure
taxonomy, and the run manifest. Not covered: training artifacts (``repro``) and analysis results (``evalsuite``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from harness.sandbox import SandboxKind

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------------------------------------------
# Task sets
# --------------------------------------------------------------------------------------------------------------

Split = Literal["train", "heldout", "test", "dev"]
TemplateTier = Literal["seen_templates", "unseen_templates", "n/a"]
# Held-out strata (harness.minirepos.primary): "twin" = the gold fix changes the same lines as a training task's,
# "no_twin" = no training task's does, "generalization" = a repository from templates no training task uses
Stratum = Literal["twin", "no_twin", "generalization", "n/a"]


class TaskInstance(_Frozen):
    """One task, SWE-bench compatible where it can be.

    ``patch``, ``test_patch`` and the hidden test files are never shown to the agent.
    """

    # the id names directories (snapshots/<id>, episodes/<id>/...) and container labels: one safe path component
    instance_id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    patch: str
    test_patch: str
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    # ours
    test_cmd: str = "python -m pytest"
    # how grading reads per-test results: "junit" (pytest's JUnit report; test_cmd is pytest and gets the node ids),
    # or a swebench log parser name ("django", "sympy", "pytest", ...: harness.swebench_compat.log_parser_names)
    # applied to test_cmd's output (test_cmd run as given: it names the tests to run itself)
    test_log_parser: str = "junit"
    image: str = "base"
    behaviour: list[str] = Field(default_factory=list)
    cluster: str | None = None
    split: Split = "heldout"
    difficulty: str = "unknown"
    template_tier: TemplateTier = "n/a"
    stratum: Stratum = "n/a"
    bug_family: str | None = None
    visible_test_cmd: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def cluster_key(self) -> str:
        return self.cluster or self.repo


class TaskSet(_Frozen):
    name: str
    path: str
    sha256: str
    instances: list[TaskInstance]

    def by_id(self) -> dict[str, TaskInstance]:
        return {t.instance_id: t for t in self.instances}


# --------------------------------------------------------------------------------------------------------------
# Trajectories
# --------------------------------------------------------------------------------------------------------------

Role = Literal["system", "user", "assistant", "tool"]
# why an assistant turn ended: a stop token, max_new_tokens, or the context window (nothing could be written)
TurnFinishReason = Literal["stop", "length", "context"]


class ToolCall(_Frozen):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None
    raw: str = ""
    valid: bool = True
    error: str | None = None


class Message(_Frozen):
    role: Role
    content: str
    turn: int = 0
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_name: str | None = None
    is_hint: bool = False
    truncated: bool = False
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    duration_s: float | None = None
    # assistant turns written by a policy: why the turn ended and the policy version of the weights that sampled it
    # (None: not reported, e.g. trajectories recorded before these fields existed or a policy without versions)
    finish_reason: TurnFinishReason | None = None
    policy_version: int | None = None
    # a draft in ``Trajectory.discarded_drafts``: why it was not kept — a feedback provider rejected it
    # (``review_draft``) or the agent loop sampled the turn again because it could not act on it (format retry)
    discarded_for: Literal["feedback", "format"] | None = None


LimitKind = Literal["turns", "tokens", "wall_time", "context"]


class LimitHit(_Frozen):
    kind: LimitKind
    limit: float


class Trajectory(_Frozen):
    instance_id: str
    policy: str
    seed: int
    messages: list[Message]
    final_message: str | None = None
    finished: bool = False
    limit_hit: LimitHit | None = None
    protocol_violations: int = 0
    hint_turns: list[int] = Field(default_factory=list)
    feedback_kind: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    n_tokens: int = 0
    # assistant turns sampled and then not kept: rejected by a feedback provider's draft review, or sampled again by
    # the agent loop's format retry (``Message.discarded_for`` says which; see harness.agent)
    discarded_drafts: list[Message] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------------------------
# Grading and behaviour
# --------------------------------------------------------------------------------------------------------------

TestStatus = Literal["passed", "failed", "error", "skipped", "missing"]


class Grade(_Frozen):
    """Outcome of running hidden tests on a candidate patch in a fresh sandbox."""

    resolved: StrictBool
    valid: StrictBool
    reason: str = ""
    exit_code: int | None = None
    f2p: dict[str, TestStatus] = Field(default_factory=dict)
    p2p: dict[str, TestStatus] = Field(default_factory=dict)
    tests_touched: StrictBool = False
    patch_applied: StrictBool = True
    parse_source: Literal["junit-xml", "test-log", "text", "none"] = "junit-xml"
    duration_s: float = 0.0
    grader_version: str = "grade@v1"


Verdict = Literal["PASS", "FAIL", "NA"]


class BehaviourResult(_Frozen):
    checker: str
    ok: bool
    turn_verdicts: list[Verdict] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------------------------
# Episodes and runs
# --------------------------------------------------------------------------------------------------------------

FailureClass = Literal["none", "agent", "infra", "ambiguous", "invalid_instance"]
EpisodeStatus = Literal[
    "ok",
    # agent failures (counted, never retried)
    "empty_patch",
    "patch_apply_failed",
    "tests_failed",
    "limit_turns",
    "limit_tokens",
    "limit_time",
    "limit_context",
    "protocol_violation",
    # infra (never counted, retried)
    "infra_error",
    # ambiguous (settled by the gold control run)
    "ambiguous",
    "invalid_instance",
]


class EpisodeMetrics(_Frozen):
    steps: int = 0
    tool_calls: int = 0
    tool_call_validity: float | None = None
    edits: int = 0
    test_runs: int = 0
    rework: int = 0
    hallucinations: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    format_retries: int = 0


class EpisodeResult(_Frozen):
    """One graded episode; written last (atomically) as ``result.json`` in its episode directory."""

    run_id: str
    instance_id: str
    repo: str
    cluster: str
    arm: str
    policy: str
    seed: int
    attempt: int = 0
    status: EpisodeStatus
    failure_class: FailureClass
    infra_kind: str | None = None
    error: str | None = None
    # strict: a record saying "resolved": "yes" is refused, not read as true
    resolved: StrictBool = False
    behaviour_ok: StrictBool = False
    joint_ok: StrictBool = False
    behaviour: list[BehaviourResult] = Field(default_factory=list)
    grade: Grade | None = None
    metrics: EpisodeMetrics = Field(default_factory=EpisodeMetrics)
    difficulty: str = "unknown"
    template_tier: TemplateTier = "n/a"
    stratum: Stratum = "n/a"
    split: Split = "heldout"
    feedback_kind: str | None = None
    finished_at: str = ""

    @model_validator(mode="after")
    def _joint(self) -> EpisodeResult:
        if self.joint_ok != (self.resolved and self.behaviour_ok):
            raise ValueError(
                f"EpisodeResult {self.instance_id}/{self.arm}/s{self.seed}: joint_ok must equal "
                "resolved and behaviour_ok"
            )
        if self.failure_class in ("infra", "invalid_instance") and (self.resolved or self.joint_ok):
            raise ValueError("an infra or invalid-instance episode cannot be scored as resolved")
        return self

    @property
    def scored(self) -> bool:
        """Counted in the denominator: agent outcomes only (infra and invalid instances are excluded)."""
        return self.failure_class in ("none", "agent")


AttemptEvent = Literal["finish", "regrade", "adopted"]


class AttemptRecord(_Frozen):
    """One line of a run directory's ``attempts.jsonl`` (``harness.attempt_log``): a ``result.json`` written.

    ``event``: ``finish`` (the attempt's result, written once by the runner), ``regrade`` (rewritten by
    ``tgsuite eval --regrade``), ``adopted`` (a finished attempt the log lacked, logged on the next resume: a run
    stopped between writing ``result.json`` and its line). ``result_sha256``: of the ``result.json`` bytes."""

    run_id: str
    instance_id: str
    arm: str
    seed: int
    attempt: int
    event: AttemptEvent
    status: EpisodeStatus
    failure_class: FailureClass
    scored: bool
    result_sha256: str
    logged_at: str = ""


class ArmSpec(_Frozen):
    name: str
    policy: str
    checkpoint_sha256: str | None = None
    train_seed: int | None = None
    # what the arm's policy sends / samples with (``generation_settings()`` of the policy: temperature, top_p,
    # max_tokens, ...); {} for policies that do not sample or do not say (and manifests written before this field)
    generation: dict[str, Any] = Field(default_factory=dict)


class RunManifest(_Frozen):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    created_at: str
    argv: list[str] = Field(default_factory=list)
    git_commit: str | None = None
    git_dirty: bool | None = None
    packages: dict[str, str] = Field(default_factory=dict)
    task_set_name: str
    task_set_sha256: str
    instance_ids: list[str]
    image_digests: dict[str, str] = Field(default_factory=dict)
    arms: list[ArmSpec]
    seeds: list[int]
    sandbox: SandboxKind
    isolated: bool
    limits: dict[str, float] = Field(default_factory=dict)
    # which disk limit the sandboxes ran under: mode (storage-opt / tmpfs / rlimit-fsize), bytes, what is capped
    disk_limit: dict[str, Any] = Field(default_factory=dict)
    grader_version: str = "grade@v1"
    behaviour_checkers: list[str] = Field(default_factory=list)
    # the hints the episodes ran with (harness.runner_manifest.describe_feedback): {arm: provider}, {} = none
    feedback: dict[str, str] = Field(default_factory=dict)
    protocol_hash: str | None = None
    host: dict[str, Any] = Field(default_factory=dict)
    # mixed into every episode seed (harness.runner.episode_seed); None: a manifest written before it was recorded
    run_seed: int | None = None
    # the run keeps ``attempts.jsonl`` (harness.rundir.read_attempt_log: one line per finished attempt and regrade),
    # so a deleted log is detected; False: a run started before it was kept (its episodes cannot be checked by it)
    attempt_log: bool = False
    # the commit on the prereg ref that registered this run under its frozen plan (protocols.run_registry), None: not
    # registered (no record given, or begun before runs were registered)
    registration: str | None = None


# --------------------------------------------------------------------------------------------------------------
# Predictions from other harnesses (SWE-bench's format) and SWE-bench's run report
# --------------------------------------------------------------------------------------------------------------


class Prediction(_Frozen):
    """One line of a SWE-bench predictions file; fields SWE-bench does not define are kept in ``extra``."""

    instance_id: str = Field(min_length=1)
    model_name_or_path: str = Field(min_length=1)
    model_patch: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class SwebenchReport(_Frozen):
    """SWE-bench's run report (``swebench.harness.reporting.make_run_report``, schema_version 2), same field names.

    Semantics as SWE-bench's: ``completed`` = graded to a decision (resolved or unresolved); ``error`` = no
    decision (the patch did not apply, a whitespace-only patch included, the instance's environment is broken, or
    infrastructure failed after retries); ``incomplete`` = in the task set but not predicted; ``empty_patch`` =
    predicted an empty (``""`` or null) patch. ``infra_failure`` / ``ambiguous_failure`` (SWE-bench's advisory
    classification, a subset of the errors here, ``failure_reasons`` saying why): errors not caused by the patch
    (infrastructure after retries, an instance whose gold patch fails too, an instance not graded) / left
    undecided between the two.
    """

    total_instances: int
    submitted_instances: int
    completed_instances: int
    resolved_instances: int
    unresolved_instances: int
    infra_failure_instances: int = 0
    ambiguous_failure_instances: int = 0
    empty_patch_instances: int
    error_instances: int
    completed_ids: list[str]
    incomplete_ids: list[str]
    empty_patch_ids: list[str]
    submitted_ids: list[str]
    resolved_ids: list[str]
    unresolved_ids: list[str]
    infra_failure_ids: list[str] = Field(default_factory=list)
    ambiguous_failure_ids: list[str] = Field(default_factory=list)
    failure_reasons: dict[str, str] = Field(default_factory=dict)
    error_ids: list[str]
    schema_version: int = 2
