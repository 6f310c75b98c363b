"""One attempt of one episode: agent sandbox → trajectory → patch → fresh grading sandbox → outcome → result.json.

Directory of an attempt (ARCHITECTURE §4)::

    episodes/<instance_id>/<arm>/s<seed>/a<attempt>/
        trajectory.jsonl   header line ({"type": "trajectory", ...}) then one {"type": "message", ...} per message
        patch.diff         the candidate (``git add -A && git diff --binary --cached <base>``)
        grade/             eval.sh, test_output.txt, junit.xml (or test_log.txt), grade.json
        timing.json        seconds per phase: sandbox_start, agent, extract, grade (includes grade_sandbox_start),
                           control, behaviour
        result.json        harness.schema.EpisodeResult, written LAST (tmp + os.replace): its presence = finished;
                           then logged in RUN_DIR/attempts.jsonl (``harness.attempt_log.write_result``)

Infra failures at any phase become an ``infra_error`` result (never an agent failure); the caller retries them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.attempt_log import write_result
from harness.behaviour import check_behaviour
from harness.episode_grading import candidate_patch, gold_control, grade_candidate
from harness.grading import GRADER_VERSION, InfraPolicy
from harness.infra import ControlCache, Outcome, agent_outcome, atomic_write_text, classify_exception, settle_ambiguous
from harness.interfaces import EpisodeLimits, FeedbackProvider, Policy
from harness.metrics import format_draft_calls, format_drafts
from harness.rundir import episode_dir
from harness.sandbox import Sandbox
from harness.sandbox_providers import Role, SandboxFactory  # noqa: F401  (SandboxFactory re-exported: the runner's seam)
from harness.schema import EpisodeMetrics, EpisodeResult, Grade, TaskInstance, Trajectory
from protocols.provenance import utc_now

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class EpisodeJob:
    instance: TaskInstance
    arm: str
    seed: int
    attempt: int
    episode_seed: int


@dataclass
class EpisodeContext:
    """Everything shared by the attempts of one run."""

    run_id: str
    out_dir: Path
    factory: SandboxFactory
    limits: EpisodeLimits
    controls: ControlCache
    grade_timeout_s: float = 900.0
    infra_policy: InfraPolicy = "reset"
    excluded_tests: dict[str, list[str]] = field(default_factory=dict)
    feedback: FeedbackProvider | None = None
    feedback_by_arm: dict[str, FeedbackProvider | None] = field(default_factory=dict)
    metrics_for: Callable[[Trajectory, TaskInstance], EpisodeMetrics] | None = None
    stop: threading.Event = field(default_factory=threading.Event)  # set on SIGINT/SIGTERM (harness.run_control)


# ------------------------------------------------------------------------------------------------ trajectory files


def write_trajectory(path: Path, traj: Trajectory) -> None:
    """Header line, then one line per message; read back by ``harness.rundir.read_trajectory``."""
    header = traj.model_dump(mode="json", exclude={"messages"})
    lines = [json.dumps({"type": "trajectory", **header})]
    lines += [json.dumps({"type": "message", **m.model_dump(mode="json")}) for m in traj.messages]
    atomic_write_text(path, "\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------ one attempt


class _Timer:
    def __init__(self) -> None:
        self.t: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.t[name] = self.t.get(name, 0.0) + time.perf_counter() - t0


def run_attempt(job: EpisodeJob, policy: Policy, ctx: EpisodeContext) -> EpisodeResult:
    """Run, grade and record one attempt; always writes ``result.json`` (infra failures included)."""
    d = episode_dir(ctx.out_dir, job.instance.instance_id, job.arm, job.seed, job.attempt)
    d.mkdir(parents=True, exist_ok=True)
    timer = _Timer()
    traj: Trajectory | None = None
    grade: Grade | None = None
    phase = "setup"
    try:
        with timer.phase("sandbox_start"):
            sb, base = ctx.factory.open(job.instance, role="agent", attempt=job.attempt)
        with sb:
            phase = "agent"
            with timer.phase("agent"):
                from harness.agent import run_episode

                fb = ctx.feedback_by_arm.get(job.arm, ctx.feedback)
                traj = run_episode(job.instance, policy, sb, ctx.limits, feedback=fb, seed=job.episode_seed)
                end = getattr(policy, "end_episode", None)
                if end is not None:  # a policy driven by another process (harness.mcp_bridge) answers its last call
                    end(traj)
            write_trajectory(d / "trajectory.jsonl", traj)
            phase = "extract"
            with timer.phase("extract"):
                patch = _extract(sb, base, job.instance, ctx.factory)
        (d / "patch.diff").write_text(patch)
        phase = "grade"
        with timer.phase("grade"):
            grade = _grade(job, patch, ctx, d / "grade", timer)
        outcome = agent_outcome(traj, patch, grade)
        if outcome.status == "ambiguous" and grade is not None:
            with timer.phase("control"):
                outcome = settle_ambiguous(grade, _control(job, ctx))
    except Exception as exc:  # noqa: BLE001 - every failure is classified; infra never reads as an agent failure
        log.warning("%s/%s/s%d a%d: %s during %s", job.instance.instance_id, job.arm, job.seed, job.attempt,
                    type(exc).__name__, phase, exc_info=log.isEnabledFor(logging.DEBUG))
        outcome = classify_exception(exc, phase=phase)  # type: ignore[arg-type]
    with timer.phase("behaviour"):
        result = episode_result(job, ctx, traj, grade, outcome)
    if ctx.stop.is_set():  # the run was stopped under this attempt: record nothing, resume re-runs it in place
        raise InterruptedError(f"{d}: stopped before the attempt was recorded")
    atomic_write_text(d / "timing.json", json.dumps(timer.t, indent=1))
    write_result(ctx.out_dir, d, result)
    return result



def run_patch_attempt(job: EpisodeJob, patch: str, ctx: EpisodeContext) -> EpisodeResult:
    """Grade a patch made elsewhere (``tgsuite grade``: another harness's predictions) exactly as ``run_attempt``
    grades an agent's patch: same fresh grading sandbox, ``grade_patch``, gold control for invalid grades and
    outcome rules; always writes ``patch.diff``, ``grade/`` and ``result.json``.

    There is no conversation, so no behaviour is judged (``behaviour`` empty, ``behaviour_ok`` False) and the
    outcome is decided as for an agent that called ``finish`` within its limits.
    """
    d = episode_dir(ctx.out_dir, job.instance.instance_id, job.arm, job.seed, job.attempt)
    d.mkdir(parents=True, exist_ok=True)
    timer = _Timer()
    grade: Grade | None = None
    (d / "patch.diff").write_text(patch)
    done = Trajectory(instance_id=job.instance.instance_id, policy=job.arm, seed=job.seed, messages=[], finished=True)
    try:
        with timer.phase("grade"):
            grade = _grade(job, patch, ctx, d / "grade", timer)
        outcome = agent_outcome(done, patch, grade)
        if outcome.status == "ambiguous" and grade is not None:
            with timer.phase("control"):
                outcome = settle_ambiguous(grade, _control(job, ctx))
    except Exception as exc:  # noqa: BLE001 - as in run_attempt: infra never reads as a model failure
        log.warning("%s/%s a%d: %s during grade", job.instance.instance_id, job.arm, job.attempt,
                    type(exc).__name__, exc_info=log.isEnabledFor(logging.DEBUG))
        outcome = classify_exception(exc, phase="grade")
    result = episode_result(job, ctx, None, grade, outcome)
    if ctx.stop.is_set():  # stopped under this attempt: record nothing, resume re-grades it in place
        raise InterruptedError(f"{d}: stopped before the attempt was recorded")
    atomic_write_text(d / "timing.json", json.dumps(timer.t, indent=1))
    write_result(ctx.out_dir, d, result)
    return result

def _extract(sb: Sandbox, base: str, instance: TaskInstance, factory: SandboxFactory) -> str:
    """``harness.episode_grading.candidate_patch`` (the procedure the RL reward uses too)."""
    return candidate_patch(sb, base, instance, factory)


def _grade(job: EpisodeJob, patch: str, ctx: EpisodeContext, gdir: Path, timer: _Timer) -> Grade | None:
    if not patch.strip():
        return None
    artifacts: dict[str, str] = {}
    try:
        with timer.phase("grade_sandbox_start"):
            grade = grade_candidate(ctx.factory, job.instance, patch, attempt=job.attempt,
                                    timeout_s=ctx.grade_timeout_s, infra_policy=ctx.infra_policy,
                                    excluded_tests=ctx.excluded_tests.get(job.instance.instance_id, ()),
                                    artifacts=artifacts)
    finally:  # the test output is kept even when the grader fails (what a GRADER_CRASH looked like)
        gdir.mkdir(parents=True, exist_ok=True)
        for name, text in artifacts.items():
            (gdir / name).write_text(text)
    assert grade is not None  # the patch is not empty
    atomic_write_text(gdir / "grade.json", grade.model_dump_json(indent=1))
    return grade


def _control(job: EpisodeJob, ctx: EpisodeContext) -> Grade:
    inst = job.instance
    digest = ctx.factory.image_digests().get(inst.image, inst.image)

    def run() -> Grade:
        return gold_control(ctx.factory, inst, attempt=job.attempt, timeout_s=ctx.grade_timeout_s,
                            infra_policy=ctx.infra_policy, excluded_tests=ctx.excluded_tests.get(inst.instance_id, ()))

    return ctx.controls.get_or_run(inst.instance_id, "gold", digest, GRADER_VERSION, run)


def episode_result(job: EpisodeJob, ctx: EpisodeContext, traj: Trajectory | None, grade: Grade | None,
            outcome: Outcome) -> EpisodeResult:
    inst = job.instance
    scored = outcome.failure_class in ("none", "agent")
    resolved = bool(scored and grade is not None and grade.resolved)
    behaviour = check_behaviour(traj, inst.behaviour) if (traj is not None and scored) else []
    behaviour_ok = scored and traj is not None and all(b.ok for b in behaviour)
    metrics = EpisodeMetrics()
    if traj is not None:
        metrics = ctx.metrics_for(traj, inst) if ctx.metrics_for else _basic_metrics(traj)
    return EpisodeResult(
        run_id=ctx.run_id, instance_id=inst.instance_id, repo=inst.repo, cluster=inst.cluster_key, arm=job.arm,
        policy=traj.policy if traj is not None else job.arm, seed=job.seed, attempt=job.attempt,
        status=outcome.status, failure_class=outcome.failure_class, infra_kind=outcome.infra_kind,
        error=outcome.error, resolved=resolved, behaviour_ok=behaviour_ok, joint_ok=resolved and behaviour_ok,
        behaviour=behaviour, grade=grade, metrics=metrics, difficulty=inst.difficulty,
        template_tier=inst.template_tier, stratum=inst.stratum, split=inst.split,
        feedback_kind=traj.feedback_kind if traj is not None else None,
        finished_at=utc_now(),
    )


def _basic_metrics(traj: Trajectory) -> EpisodeMetrics:
    calls = [c for m in traj.messages for c in m.tool_calls] + format_draft_calls(traj)
    return EpisodeMetrics(
        steps=sum(m.role == "assistant" for m in traj.messages), tool_calls=len(calls),
        tool_call_validity=(sum(c.valid for c in calls) / len(calls)) if calls else None,
        tokens=traj.n_tokens, wall_s=float(traj.timings.get("wall_s", 0.0)), format_retries=len(format_drafts(traj)),
    )
