"""The resumable runner: arms × instances × seeds, concurrent, with infra retries (HARNESS.md §7.4–7.6).

Python API (the trainer calls this with in-memory policies; tests inject fakes)::

    from harness.runner import run_eval
    from harness.runner_sandbox import TaskSandboxFactory
    results = run_eval(task_set, {"oracle": "oracle", "mine": my_policy}, seeds=[0, 1, 2], out_dir="runs/r1",
                       sandbox_factory=TaskSandboxFactory(task_set, kind="docker", run_id="r1"), workers=2)

Resume: a second call on the same ``out_dir`` keeps every finished non-infra episode (its ``result.json``), re-runs
attempts that crashed (a directory without ``result.json``, e.g. after ``kill -9``) in place, and re-queues INFRA
results as a new attempt until ``RetryPolicy.max_attempts`` attempts exist. ``results.jsonl`` (one line per
instance × arm × seed: its latest attempt) is derived and rebuilt at the end of every call (``rebuild_results``).

Seeds: the episode seed is ``episode_seed(run_seed, instance_id, seed)``; it does not depend on the arm, so arms
see the same sampling stream on the same (instance, seed) — paired comparisons are paired.

Concurrency: threads (the work is in containers / subprocesses). A ``Policy`` object is shared by all episodes of
its arm; unless it has ``thread_safe = True`` its ``act`` calls are serialised by a lock. ``executor="ray"`` runs
the same attempts on the actors of a Ray cluster instead (``harness.runner_ray``); planning, retries, the guard,
resume and ``results.jsonl`` are this module's either way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from harness.attempt_log import reconcile as reconcile_attempt_log
from harness.infra import (
    ControlCache,
    ErrorRateGuard,
    RetryPolicy,
    atomic_write_text,
    disk_full_message,
    is_disk_full,
    summarize_failures,
    sweep_tmp,
)
from harness.interfaces import EpisodeLimits, FeedbackProvider, Policy
from harness.run_control import RunInterrupted, check_out_dir, run_id_for, stop_on_signals
from harness.rundir import attempt_indices, counting_attempt, episode_dir, episode_dirs, read_result
from harness.runner_arms import ARM_NAME, resolve_arms, snapshot_metrics
from harness.runner_episode import EpisodeContext, EpisodeJob, SandboxFactory, run_attempt
from harness.runner_manifest import (
    build_manifest,
    check_resume_compatible,
    describe_feedback,
    register_under_plan,
    write_manifest,
)
from harness.schema import EpisodeMetrics, EpisodeResult, TaskInstance, TaskSet, Trajectory

log = logging.getLogger(__name__)

JobOrder = Literal["instance", "arm"]
Executor = Literal["thread", "ray"]
EXECUTORS: tuple[Executor, ...] = ("thread", "ray")


class RunAborted(RuntimeError):
    """The run stopped early (infra error rate above the guard's threshold); finished episodes are kept."""


class RunDiskFull(RunAborted):
    """The run directory's disk is full: the run stopped at once (``harness.infra.disk_full_message``)."""


def episode_seed(run_seed: int, instance_id: str, seed: int) -> int:
    """Deterministic 63-bit episode seed from (run seed, instance, arm seed); independent of the arm."""
    digest = hashlib.sha256(f"{run_seed}|{instance_id}|{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class Plan:
    """What still has to run, decided from the run directory alone."""

    todo: list[EpisodeJob]
    done: list[EpisodeResult]
    exhausted: list[EpisodeResult]


def plan_work(out_dir: Path, instances: Sequence[TaskInstance], arms: Sequence[str], seeds: Sequence[int], *,
              retry: RetryPolicy, run_seed: int = 0, order: JobOrder = "instance") -> Plan:
    """Scan ``episodes/`` and decide, per (instance, arm, seed), to skip, re-run a crashed attempt, or retry.
    ``order``: jobs instance by instance (every arm of an instance, then the next), or arm by arm (all of one
    arm's episodes first: concurrent workers then share one policy, which a batching engine needs)."""
    todo: list[EpisodeJob] = []
    done: list[EpisodeResult] = []
    exhausted: list[EpisodeResult] = []
    for inst in instances:
        for arm in arms:
            for seed in seeds:
                eseed = episode_seed(run_seed, inst.instance_id, seed)
                attempts = attempt_indices(episode_dir(out_dir, inst.instance_id, arm, seed))
                if not attempts:
                    todo.append(EpisodeJob(inst, arm, seed, 0, eseed))
                    continue
                last = attempts[-1]
                res = read_result(episode_dir(out_dir, inst.instance_id, arm, seed, last))
                if res is None:  # crashed mid-attempt: re-run the same attempt index in place
                    todo.append(EpisodeJob(inst, arm, seed, last, eseed))
                elif not retry.retryable(res):
                    done.append(res)
                elif retry.should_retry(res, last):
                    todo.append(EpisodeJob(inst, arm, seed, last + 1, eseed))
                else:
                    exhausted.append(res)
    if order == "arm":
        rank = {a: i for i, a in enumerate(arms)}
        todo.sort(key=lambda j: rank[j.arm])  # stable: instance order within an arm
    return Plan(todo, done, exhausted)


def run_eval(
    task_set: TaskSet,
    arms: Mapping[str, Policy | str],
    seeds: Sequence[int],
    out_dir: str | Path,
    *,
    sandbox_factory: SandboxFactory,
    workers: int = 1,
    limits: EpisodeLimits | None = None,
    retry: RetryPolicy | None = None,
    run_seed: int = 0,
    feedback: FeedbackProvider | Mapping[str, FeedbackProvider | None] | None = None,
    excluded_tests: Mapping[str, list[str]] | None = None,
    grade_timeout_s: float = 900.0,
    protocol_hash: str | None = None,
    protocol_record: str | Path | None = None,
    argv: Sequence[str] = (),
    progress: bool = False,
    guard: ErrorRateGuard | None = None,
    metrics_for: Callable[[Trajectory, TaskInstance], EpisodeMetrics] | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
    order: JobOrder = "instance",
    executor: Executor = "thread",
    ray_address: str | None = None,
) -> list[EpisodeResult]:
    """Run (or resume) every arm × instance × seed episode into ``out_dir``; returns the final results.

    ``feedback``: one provider for every arm, or ``{arm: provider}`` (arms not named get none), e.g. for the
    noisy-feedback study. ``order``: see ``plan_work`` (results and files are the same either way).
    ``protocol_record``: the frozen plan's record (``tgsuite protocol freeze``): the run takes its hash and is
    registered under it before any episode (``protocols.run_registry``), so its analysis can tell whether this was
    the only evaluation made under the plan. ``executor``: ``"thread"`` (``workers`` threads in this process) or
    ``"ray"`` (``workers`` Ray actors on the cluster at ``ray_address``, a new local one when None;
    ``harness.runner_ray``: needs ``sandbox_factory`` to be a ``TaskSandboxFactory``, and the results come back to
    this process, which writes the run directory).
    Raises ``RunAborted`` when the infra-error guard trips and ``ValueError`` when ``out_dir`` belongs to a run
    with another task set or other arm policies (or Ray is not installed, or its workers disagree on an image).
    """
    out = Path(out_dir)
    limits, retry = limits or EpisodeLimits(), retry or RetryPolicy()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if executor not in EXECUTORS:
        raise ValueError(f"executor {executor!r} must be one of {EXECUTORS}; fix: e.g. --executor thread")
    if not grade_timeout_s > 0:
        raise ValueError(f"--grade-timeout {grade_timeout_s!r} must be > 0 seconds (0 would mean no limit); fix: "
                         "e.g. --grade-timeout 900")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad or not seeds:
        raise ValueError(f"seeds {list(seeds)!r}: each must be an integer >= 0 (it names the episode folder "
                         "s<seed>); fix: e.g. --seeds 0,1,2")
    check_out_dir(out, "eval", task_set.path)
    protocol_hash = _record_hash(protocol_record, protocol_hash)
    policies, specs = resolve_arms(arms, task_set, sandbox_factory)
    with run_lock(out):
        run_id = run_id_for(out)
        check_resume_compatible(out, task_set, specs)
        manifest = build_manifest(run_id=run_id, task_set=task_set, arm_specs=specs, seeds=list(seeds),
                                  factory=sandbox_factory, limits=limits, protocol_hash=protocol_hash,
                                  argv=list(argv), policies=policies,
                                  feedback=describe_feedback(feedback, list(specs)), run_seed=run_seed)
        manifest = write_manifest(out, manifest)
        if protocol_record is not None:
            register_under_plan(out, manifest, protocol_record)
        ctx = EpisodeContext(run_id=run_id, out_dir=out, factory=sandbox_factory, limits=limits,
                             controls=ControlCache(out / "controls"), grade_timeout_s=grade_timeout_s,
                             excluded_tests=dict(excluded_tests or {}),
                             feedback=None if isinstance(feedback, Mapping) else feedback,
                             feedback_by_arm=dict(feedback) if isinstance(feedback, Mapping) else {},
                             metrics_for=metrics_for or snapshot_metrics(task_set))
        plan = plan_work(out, task_set.instances, list(specs), seeds, retry=retry, run_seed=run_seed, order=order)
        log.info("run %s: %d episodes to run, %d already finished, %d out of retries", run_id, len(plan.todo),
                 len(plan.done), len(plan.exhausted))
        try:
            with _attempt_runner(executor, plan.todo, arms, policies, ctx, task_set, workers, ray_address,
                                 default_metrics=metrics_for is None) as (run_one, interrupt):
                execute_jobs(plan.todo, run_one, interrupt, ctx, retry, workers, guard or ErrorRateGuard(), progress,
                         on_result)
        except RunInterrupted:
            rebuild_results(out, task_set.instances, list(specs), seeds)  # what finished, for readers and resume
            raise
        results = rebuild_results(out, task_set.instances, list(specs), seeds)
        _report_coverage(results, len(task_set.instances) * len(specs) * len(seeds))
        return results


def _record_hash(record: str | Path | None, protocol_hash: str | None) -> str | None:
    """The protocol hash a run records: the frozen record's when one is given (a differing ``protocol_hash`` is
    refused), else ``protocol_hash``."""
    if record is None:
        return protocol_hash
    from protocols.freeze import load_frozen
    from protocols.load import ProtocolError

    try:
        sha = load_frozen(record).sha256
    except ProtocolError as exc:
        raise ValueError(str(exc)) from None
    if protocol_hash is not None and protocol_hash != sha:
        raise ValueError(f"protocol_hash {protocol_hash[:12]} is not the hash of the record {record} ({sha[:12]}); "
                         "fix: pass the record alone")
    return sha


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Exclusive lock on a run directory (``.lock``, flock: released by the kernel even after ``kill -9``); on
    entry, temp files a killed writer left are removed (``harness.infra.sweep_tmp``) and the attempt log is
    reconciled (``harness.attempt_log.reconcile``: ValueError when a log the manifest promises is gone)."""
    out.mkdir(parents=True, exist_ok=True)
    fh = open(out / ".lock", "a+")  # noqa: SIM115 - held for the whole run
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{out}: another tgsuite run (eval or grade) is running on this run directory; fix: "
                             "wait for it or choose another --out") from None
        swept = sweep_tmp(out)  # half-written temp files of a process killed mid-write
        if swept:
            log.info("%s: removed %d temp file(s) a stopped run left", out, swept)
        adopted = reconcile_attempt_log(out)
        if adopted:
            log.info("%s: logged %d finished attempt(s) a stopped run had not logged yet", out, adopted)
        yield
    finally:
        fh.close()


RunOne = Callable[[EpisodeJob], EpisodeResult]


@contextlib.contextmanager
def _attempt_runner(executor: Executor, jobs: list[EpisodeJob], arms: Mapping[str, Policy | str],
                    policies: dict[str, Policy], ctx: EpisodeContext, task_set: TaskSet, workers: int,
                    ray_address: str | None, *, default_metrics: bool) -> Iterator[tuple[RunOne, Callable[[], object]]]:
    """(run one attempt and return its recorded result, end every in-flight attempt) for the executor. Threads:
    ``run_attempt`` here, interrupting through the sandbox factory. Ray: a ``RayPool`` of ``workers`` actors
    (none are started when nothing is left to run)."""
    if executor == "thread" or not jobs:
        yield (lambda job: run_attempt(job, policies[job.arm], ctx)), ctx.factory.interrupt
        return
    from harness.runner_ray import RayPool

    with RayPool(task_set, arms, ctx, workers=workers, address=ray_address, default_metrics=default_metrics) as pool:
        yield pool.run, pool.interrupt


def execute_jobs(jobs: list[EpisodeJob], run_one: RunOne, interrupt: Callable[[], object], ctx: EpisodeContext,
                 retry: RetryPolicy, workers: int, guard: ErrorRateGuard, progress: bool,
                 on_result: Callable[[EpisodeResult], None] | None) -> None:
    """Run ``jobs`` on ``workers`` threads with retries of infrastructure errors, the error-rate guard
    (``RunAborted``) and SIGINT/SIGTERM handling (``RunInterrupted``: queued jobs cancelled, ``interrupt()``
    ends the running ones, which record nothing). ``run_eval`` and ``tgsuite grade`` share it."""
    from tqdm import tqdm

    bar = tqdm(total=len(jobs), desc="episodes", unit="ep", disable=not progress, dynamic_ncols=True)

    def work(job: EpisodeJob) -> EpisodeResult:
        delay = retry.delay(job.attempt) if job.attempt else 0.0
        if delay:
            time.sleep(delay)
        return run_one(job)

    aborted = False
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="episode")
    pending: dict[Future[EpisodeResult], EpisodeJob] = {}
    try:
        with stop_on_signals(ctx.stop):
            pending.update({pool.submit(work, j): j for j in jobs})
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    job = pending.pop(fut)
                    try:
                        res = fut.result()
                    except OSError as exc:  # the attempt could not even record itself
                        if not is_disk_full(exc):
                            raise
                        _stop_disk_full(pool, pending, interrupt, ctx, exc)
                    if res.infra_kind == "DISK_FULL" and str(ctx.out_dir) in (res.error or ""):
                        _stop_disk_full(pool, pending, interrupt, ctx, OSError(errno.ENOSPC, res.error))
                    guard.record(res)
                    if on_result:
                        on_result(res)
                    if retry.should_retry(res, job.attempt) and not aborted:
                        nxt = EpisodeJob(job.instance, job.arm, job.seed, job.attempt + 1, job.episode_seed)
                        pending[pool.submit(work, nxt)] = nxt
                        bar.set_postfix_str(f"infra retry {res.infra_kind}")
                    else:
                        bar.update(1)
                if guard.tripped and not aborted:
                    aborted = True
                    for fut in [f for f in pending if f.cancel()]:
                        pending.pop(fut)
    except RunInterrupted:
        _stop_in_flight(pool, pending, interrupt)
        raise
    finally:
        pool.shutdown(wait=not ctx.stop.is_set(), cancel_futures=ctx.stop.is_set())
        bar.close()
    if aborted:
        raise RunAborted(f"stopped: {guard.n_infra}/{guard.n} attempts were infrastructure errors (> "
                         f"{guard.max_rate:.0%}). Finished episodes are kept; fix the environment (see "
                         "`tgsuite doctor`) and run the same command again: it resumes, with up to "
                         "--max-attempts attempts per episode in all.")


STOP_GRACE_S = 10.0


def _stop_disk_full(pool: ThreadPoolExecutor, pending: dict[Future[EpisodeResult], EpisodeJob],
                    interrupt: Callable[[], object], ctx: EpisodeContext, exc: OSError) -> NoReturn:
    """The run directory's disk is full: stop as on a signal (in-flight attempts record nothing) and raise."""
    ctx.stop.set()
    _stop_in_flight(pool, pending, interrupt)
    raise RunDiskFull(disk_full_message(ctx.out_dir, exc)) from None


def _stop_in_flight(pool: ThreadPoolExecutor, pending: dict[Future[EpisodeResult], EpisodeJob],
                    interrupt: Callable[[], object]) -> None:
    """After a signal: cancel queued episodes, end the running ones' sandboxes (``interrupt()`` of the factory,
    or of the Ray pool) and wait up to ``STOP_GRACE_S`` for them; in-flight attempts write no ``result.json``
    (resume re-runs them)."""
    pool.shutdown(wait=False, cancel_futures=True)
    running = [f for f in pending if f.running()]
    try:
        interrupt()
    except Exception as exc:  # noqa: BLE001 - best effort; the factory's close() tries again
        log.warning("interrupting the run's sandboxes failed: %s", exc)
    wait(running, timeout=STOP_GRACE_S)
    log.warning("stopped: %d episode(s) were in flight and will re-run on resume", len(running))


def rebuild_results(out_dir: str | Path, instances: Sequence[TaskInstance] | None = None,
                    arms: Sequence[str] | None = None, seeds: Sequence[int] | None = None) -> list[EpisodeResult]:
    """Rebuild ``results.jsonl`` from ``episodes/``: the counting attempt of each episode (``harness.rundir``), sorted.

    With ``instances``/``arms``/``seeds`` only those episodes are included; otherwise all found on disk.
    """
    out = Path(out_dir)
    keep_i = {i.instance_id for i in instances} if instances is not None else None
    keep_a = set(arms) if arms is not None else None
    keep_s = set(seeds) if seeds is not None else None
    results: list[EpisodeResult] = []
    for iid, arm, seed, sdir in episode_dirs(out):
        if (keep_i is not None and iid not in keep_i) or (keep_a is not None and arm not in keep_a) or (
                keep_s is not None and seed not in keep_s):
            continue
        got = counting_attempt(sdir)
        if got is not None:
            results.append(got[1])
    results.sort(key=lambda r: (r.instance_id, r.arm, r.seed))
    atomic_write_text(out / "results.jsonl", "".join(r.model_dump_json() + "\n" for r in results))
    return results


def _report_coverage(results: list[EpisodeResult], planned: int) -> None:
    scored = sum(r.scored for r in results)
    counts = summarize_failures(results)
    log.info("finished %d/%d episodes; scored %d (coverage %.1f%%); statuses %s", len(results), planned, scored,
             100.0 * scored / max(planned, 1), counts)
    if len(results) < planned:
        log.warning("%d planned episodes have no result; run the same command again to resume",
                    planned - len(results))


__all__ = ["ARM_NAME", "EXECUTORS", "Executor", "Plan", "RunAborted", "RunDiskFull", "RunInterrupted", "episode_seed", "execute_jobs",
           "plan_work", "rebuild_results", "resolve_arms", "run_eval", "snapshot_metrics"]
