"""One served episode (``tgsuite serve-tools``): plan it in a run directory, run it when the client's first call
arrives, record it exactly as ``tgsuite eval`` records an episode.

The run directory is eval's (``harness.rundir``): ``manifest.json`` (the arm's policy spec is ``mcp``),
``episodes/<instance>/<arm>/s<seed>/a<attempt>/{trajectory.jsonl, patch.diff, grade/, timing.json, result.json}``
and ``results.jsonl``. The attempt itself is ``harness.runner_episode.run_attempt`` with a ``ToolBridge`` as the
policy, so the agent loop, the patch extraction, the grading in a fresh sandbox, the gold control of an invalid
grade, the behaviour checkers and the infra / agent split are the ones every eval episode goes through.

Resume follows the runner's rules (``harness.runner.plan_work``): a finished episode is not served again; an
attempt that crashed (no ``result.json``) is served again in place; an infrastructure failure (e.g. the client went
away before ``finish``) is served again as the next attempt, up to ``max_attempts`` attempts. Several instances,
arms and seeds may be served into one run directory, one episode per server; the run directory's lock keeps two
servers off it at once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.infra import ControlCache, RetryPolicy
from harness.interfaces import EpisodeLimits
from harness.mcp_bridge import BRIDGE_SPEC, ToolBridge
from harness.run_control import run_id_for, stop_on_signals
from harness.rundir import episode_dir
from harness.runner import plan_work, rebuild_results, run_lock
from harness.runner_arms import ARM_NAME, snapshot_metrics
from harness.runner_episode import EpisodeContext, EpisodeJob, SandboxFactory, run_attempt
from harness.runner_manifest import build_manifest, check_resume_compatible, write_manifest
from harness.schema import EpisodeResult, TaskSet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedEpisode:
    """Which episode a server serves and under which settings (the ``tgsuite serve-tools`` flags)."""

    instance_id: str
    arm: str = "mcp"
    seed: int = 0
    run_seed: int = 0
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    max_attempts: int = 3
    grade_timeout_s: float = 900.0
    excluded_tests: Mapping[str, list[str]] = field(default_factory=dict)
    argv: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not ARM_NAME.match(self.arm):
            raise ValueError(f"arm name {self.arm!r} must match {ARM_NAME.pattern} (it becomes a directory name); "
                             "fix: e.g. --arm my-agent")


@dataclass(frozen=True)
class EpisodePlan:
    """``job`` to serve, or the result that is already final (``finished``: not served again)."""

    job: EpisodeJob | None
    finished: EpisodeResult | None
    out_of_attempts: bool = False


@dataclass
class EpisodeSession:
    """An open run directory (locked) with this episode's plan and context; ``run`` serves it."""

    plan: EpisodePlan
    ctx: EpisodeContext
    task_set: TaskSet
    settings: ServedEpisode
    bridge: ToolBridge

    def attempt_dir(self) -> Path | None:
        job = self.plan.job
        return None if job is None else episode_dir(self.ctx.out_dir, job.instance.instance_id, job.arm, job.seed,
                                                    job.attempt)

    def run(self, *, wait: Callable[[], bool] | None = None,
            on_recorded: Callable[[EpisodeResult], None] | None = None) -> EpisodeResult | None:
        """Wait for the client's first call (``wait``, default: the bridge's ``started`` event; False = the client
        left before calling anything, nothing is recorded), then run, grade and record the attempt, rebuild
        ``results.jsonl``, call ``on_recorded(result)``, and only then answer the client's last call (``ToolBridge.
        end_episode``). Returns the result (None when nothing was recorded). SIGINT / SIGTERM while serving raise
        ``harness.run_control.RunInterrupted``: the attempt records nothing and is served again in place next time."""
        job = self.plan.job
        if job is None:
            return self.plan.finished
        result: EpisodeResult | None = None
        try:
            with stop_on_signals(self.ctx.stop):
                started = wait() if wait is not None else _wait_event(self.bridge.started)
                if not started or self.bridge.calls == 0:
                    log.warning("the client made no tool call; nothing recorded")
                    return None
                result = run_attempt(job, self.bridge, self.ctx)
            rebuild_results(self.ctx.out_dir)
            if on_recorded is not None:
                on_recorded(result)
            return result
        finally:
            self.bridge.close("the episode has been recorded" if result is not None else "the server stopped")


def _wait_event(event: threading.Event) -> bool:
    while not event.wait(0.5):  # short waits: a signal handler runs between them
        pass
    return True


def plan_episode(out: Path, task_set: TaskSet, settings: ServedEpisode) -> EpisodePlan:
    """The runner's resume decision for this one episode (module docstring)."""
    inst = task_set.by_id().get(settings.instance_id)
    if inst is None:
        raise ValueError(f"instance {settings.instance_id!r} is not in task set {task_set.name}; fix: give an "
                         "instance_id from its tasks.jsonl")
    retry = RetryPolicy(max_attempts=settings.max_attempts)
    plan = plan_work(out, [inst], [settings.arm], [settings.seed], retry=retry, run_seed=settings.run_seed)
    if plan.todo:
        return EpisodePlan(job=plan.todo[0], finished=None)
    if plan.done:
        return EpisodePlan(job=None, finished=plan.done[0])
    return EpisodePlan(job=None, finished=plan.exhausted[0], out_of_attempts=True)


@contextlib.contextmanager
def open_episode(out_dir: str | Path, task_set: TaskSet, settings: ServedEpisode, *,
                 factory: SandboxFactory) -> Iterator[EpisodeSession]:
    """Lock the run directory, check and write its manifest (this arm as ``mcp``), plan the episode; yields the
    session to ``run``. Raises ValueError (naming the file and the fix) for a run directory of another task set or
    another policy behind the arm, or when another process holds it."""
    out = Path(out_dir)
    with run_lock(out):
        run_id = run_id_for(out)
        specs = {settings.arm: BRIDGE_SPEC}
        check_resume_compatible(out, task_set, specs)
        bridge = ToolBridge(settings.arm, wall_s=settings.limits.wall_s)
        plan = plan_episode(out, task_set, settings)
        if plan.job is not None:
            write_manifest(out, build_manifest(run_id=run_id, task_set=task_set, arm_specs=specs,
                                               seeds=[settings.seed], factory=factory, limits=settings.limits,
                                               protocol_hash=None, argv=list(settings.argv),
                                               policies={settings.arm: bridge}, run_seed=settings.run_seed))
        ctx = EpisodeContext(run_id=run_id, out_dir=out, factory=factory, limits=settings.limits,
                             controls=ControlCache(out / "controls"), grade_timeout_s=settings.grade_timeout_s,
                             excluded_tests=dict(settings.excluded_tests), metrics_for=snapshot_metrics(task_set))
        yield EpisodeSession(plan=plan, ctx=ctx, task_set=task_set, settings=settings, bridge=bridge)


__all__ = ["EpisodePlan", "EpisodeSession", "ServedEpisode", "open_episode", "plan_episode"]
