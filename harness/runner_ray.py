"""Episodes on a Ray cluster: ``tgsuite eval --executor ray [--ray-address ADDR]`` (``run_eval(executor="ray")``).

What runs where:

- this process (the driver) plans, retries, guards and resumes exactly as with threads (``harness.runner``), holds
  the run directory's lock and is the only writer of the run directory;
- ``workers`` Ray actors (``EpisodeWorker``, one CPU each) run attempts, one at a time each. An actor gets the
  task set's snapshots of the run's instances as one archive (the worker needs no copy of the task set), opens its
  own ``TaskSandboxFactory`` on ITS node (its Docker engine, its images: it preflights them, and an image whose
  digest differs from the driver's stops the run before any episode), builds the arms' policies (spec strings are
  built there, e.g. ``oracle`` from the shipped task set; policy objects are pickled), and runs ``run_attempt``
  into a scratch directory of its own;
- the attempt's files come back to the driver (results are SHIPPED BACK: no shared filesystem is needed) and are
  written into ``RUN_DIR/episodes/.../a<attempt>/`` each atomically, ``result.json`` last, so a finished attempt
  looks exactly as under the thread executor and resume reads it the same way. New gold-control grades come back
  too (``RUN_DIR/controls/``), and every actor starts with the run's existing ones.

Stopping (SIGINT/SIGTERM): the driver asks every actor to stop (its sandboxes are closed, its in-flight attempt
records nothing) and writes nothing for attempts in flight, so a resume re-runs them in place.

Not covered: an actor or node that dies mid-run stops the run with the Ray error (finished episodes are kept;
rerun to resume); no placement across nodes is forced (Ray spreads the actors as it schedules them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import queue
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.attempt_log import write_result
from harness.infra import ControlCache, atomic_write_bytes
from harness.interfaces import EpisodeLimits, FeedbackProvider, Policy
from harness.rundir import RESULT_FILE, episode_dir
from harness.runner_episode import EpisodeContext, EpisodeJob, run_attempt
from harness.runner_sandbox import TaskSandboxFactory
from harness.sandbox import SandboxKind, SandboxSpec
from harness.schema import EpisodeMetrics, EpisodeResult, TaskInstance, TaskSet, Trajectory

log = logging.getLogger(__name__)

RAY_MISSING = ("--executor ray needs the ray package, which is not installed; fix: pip install 'tgsuite[ray]' "
               "(or run with the default --executor thread)")
CONTROLS_DIR = "controls"


def import_ray() -> Any:
    """The ``ray`` module; ValueError naming ``pip install 'tgsuite[ray]'`` when it is missing."""
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_MISSING) from None
    return ray


# ------------------------------------------------------------------------------------------------ what travels


def pack_snapshots(task_set: TaskSet) -> bytes:
    """The task set's ``snapshots/`` entries of its instances (folders or ``.tar.gz`` files) as one tar archive."""
    from harness.tasks import snapshot_path

    root = Path(task_set.path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for inst in task_set.instances:
            snap = snapshot_path(root, inst.instance_id)
            if snap is None:
                raise ValueError(f"{root}: instance {inst.instance_id} has no snapshot to send to the Ray workers; "
                                 "fix: rebuild the task set (`tgsuite tasks make-mini` / `tgsuite tasks import`)")
            tar.add(snap, arcname=snap.relative_to(root).as_posix())
    return buf.getvalue()


def unpack_snapshots(bundle: bytes, dest: Path) -> None:
    """Inverse of ``pack_snapshots`` into ``dest`` (entries stay inside ``dest``: the ``data`` filter)."""
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r") as tar:
        tar.extractall(dest, filter="data")


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root``: relative POSIX path → content."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class ShippedAttempt:
    """One finished attempt as it travels back: its directory's files (``result.json`` among them) and the gold
    controls its actor computed that the driver has not been sent yet (file name → content)."""

    files: dict[str, bytes]
    controls: dict[str, bytes]


def write_attempt(out_dir: Path, job: EpisodeJob, shipped: ShippedAttempt) -> EpisodeResult:
    """Write a shipped attempt into the run directory: each file atomically, ``result.json`` LAST (its presence
    means finished, as under the thread executor) and logged in the DRIVER's ``attempts.jsonl`` (the worker's own
    log stays in its scratch directory); new controls are added, existing ones never replaced."""
    if RESULT_FILE not in shipped.files:
        raise ValueError(f"{job.instance.instance_id}/{job.arm}/s{job.seed} a{job.attempt}: the Ray worker sent no "
                         f"{RESULT_FILE}; fix: rerun (the attempt re-runs on resume)")
    d = episode_dir(out_dir, job.instance.instance_id, job.arm, job.seed, job.attempt)
    for rel, data in shipped.files.items():
        if rel != RESULT_FILE:
            atomic_write_bytes(_inside(d, rel), data)
    for name, data in shipped.controls.items():
        path = _inside(Path(out_dir) / CONTROLS_DIR, name)
        if not path.exists():
            atomic_write_bytes(path, data)
    result = EpisodeResult.model_validate_json(shipped.files[RESULT_FILE])
    write_result(out_dir, d, result, data=shipped.files[RESULT_FILE])
    return result


def _inside(root: Path, rel: str) -> Path:
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ValueError(f"a Ray worker sent the path {rel!r}, which leaves {root}; fix: none needed on your side, "
                         "this is a bug: report it")
    return path


@dataclass(frozen=True)
class AttemptSettings:
    """The picklable part of an ``EpisodeContext`` (no factory, locks or events): what every actor needs."""

    run_id: str
    limits: EpisodeLimits
    grade_timeout_s: float
    infra_policy: Any
    excluded_tests: dict[str, list[str]]
    feedback: FeedbackProvider | None
    feedback_by_arm: dict[str, FeedbackProvider | None]
    metrics_for: Callable[[Trajectory, TaskInstance], EpisodeMetrics] | None  # None: snapshot metrics on the worker

    @classmethod
    def of(cls, ctx: EpisodeContext, *, default_metrics: bool) -> AttemptSettings:
        return cls(run_id=ctx.run_id, limits=ctx.limits, grade_timeout_s=ctx.grade_timeout_s,
                   infra_policy=ctx.infra_policy, excluded_tests=ctx.excluded_tests, feedback=ctx.feedback,
                   feedback_by_arm=ctx.feedback_by_arm, metrics_for=None if default_metrics else ctx.metrics_for)


@dataclass(frozen=True)
class FactorySettings:
    """How the driver's ``TaskSandboxFactory`` was made; each actor makes its own the same way on its node."""

    kind: SandboxKind
    run_id: str
    spec: SandboxSpec


# ------------------------------------------------------------------------------------------------ the actor


class EpisodeWorker:
    """Runs attempts on one Ray node (module docstring). A plain class: ``RayPool`` makes it a Ray actor."""

    def __init__(self, task_set: TaskSet, bundle: bytes, arms: Mapping[str, Policy | str], settings: AttemptSettings,
                 factory: FactorySettings, controls: dict[str, bytes], index: int) -> None:
        from harness.runner_arms import resolve_arms, snapshot_metrics

        self.root = Path(tempfile.mkdtemp(prefix="tgsuite-ray-worker-"))
        tasks = self.root / "tasks"
        unpack_snapshots(bundle, tasks)
        local = task_set.model_copy(update={"path": str(tasks)})
        self.factory = TaskSandboxFactory(local, kind=factory.kind, run_id=f"{factory.run_id}-w{index}",
                                          spec=factory.spec)
        self.digests = self.factory.preflight()
        self.policies, _ = resolve_arms(arms, local, self.factory)
        out = self.root / "run"
        for name, data in controls.items():
            atomic_write_bytes(_inside(out / CONTROLS_DIR, name), data)
        self.sent = set(controls)
        fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
        fields["metrics_for"] = settings.metrics_for or snapshot_metrics(local)
        self.ctx = EpisodeContext(out_dir=out, factory=self.factory, controls=ControlCache(out / CONTROLS_DIR),
                                  **fields)

    def image_digests(self) -> dict[str, str]:
        return dict(self.digests)

    def run(self, job: EpisodeJob) -> ShippedAttempt:
        """Run one attempt here and return its files (the local copy is removed)."""
        run_attempt(job, self.policies[job.arm], self.ctx)
        d = episode_dir(self.ctx.out_dir, job.instance.instance_id, job.arm, job.seed, job.attempt)
        files = read_tree(d)
        shutil.rmtree(d, ignore_errors=True)
        controls = {k: v for k, v in read_tree(self.ctx.out_dir / CONTROLS_DIR).items() if k not in self.sent}
        self.sent |= set(controls)
        return ShippedAttempt(files=files, controls=controls)

    def stop(self) -> int:
        """End the in-flight attempt (it records nothing) and close this worker's sandboxes."""
        self.ctx.stop.set()
        return self.factory.interrupt()

    def close(self) -> None:
        self.factory.close()
        shutil.rmtree(self.root, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ the driver side


class RayPool:
    """``workers`` ``EpisodeWorker`` actors; ``run(job)`` (thread-safe) runs an attempt on a free one and writes
    it into the run directory. Connects to ``address`` (``ray.init(address=...)``; None: ``$RAY_ADDRESS``, else the
    last ``ray start`` cluster of this machine, else a new local Ray) unless Ray is already initialised in this
    process (then that cluster is used and left running)."""

    def __init__(self, task_set: TaskSet, arms: Mapping[str, Policy | str], ctx: EpisodeContext, *, workers: int,
                 address: str | None, default_metrics: bool) -> None:
        if not isinstance(ctx.factory, TaskSandboxFactory):
            raise ValueError(f"executor='ray' needs a harness.runner_sandbox.TaskSandboxFactory (each worker makes "
                             f"its own), got {type(ctx.factory).__name__}; fix: pass a TaskSandboxFactory or use "
                             "executor='thread'")
        ray = self._ray = import_ray()
        self._owns = not ray.is_initialized()
        if self._owns:
            ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
        self.out_dir = ctx.out_dir
        self._actors: list[Any] = []
        try:
            cls = ray.remote(num_cpus=1, max_concurrency=2)(EpisodeWorker)  # 2: stop() while run() is busy
            bundle = ray.put(pack_snapshots(task_set))
            factory = FactorySettings(kind=ctx.factory.kind, run_id=ctx.factory.run_id, spec=ctx.factory.spec)
            controls = read_tree(ctx.out_dir / CONTROLS_DIR) if (ctx.out_dir / CONTROLS_DIR).is_dir() else {}
            settings = AttemptSettings.of(ctx, default_metrics=default_metrics)
            self._actors = [cls.remote(task_set, bundle, dict(arms), settings, factory, controls, i)
                            for i in range(workers)]
            self._check_digests(ctx.factory.image_digests(), ray.get([a.image_digests.remote() for a in self._actors]))
        except BaseException:
            self.close()
            raise
        self._idle: queue.Queue[Any] = queue.Queue()
        for a in self._actors:
            self._idle.put(a)

    @staticmethod
    def _check_digests(mine: dict[str, str], theirs: list[dict[str, str]]) -> None:
        for i, got in enumerate(theirs):
            for image, digest in got.items():
                if mine.get(image, digest) != digest:
                    raise ValueError(f"Ray worker {i} has image {image} as {digest}, this machine as {mine[image]}; "
                                     "fix: give every node the same images (`tgsuite images build`, or push/pull one "
                                     "registry tag) and rerun")

    def run(self, job: EpisodeJob) -> EpisodeResult:
        actor = self._idle.get()
        try:
            shipped = self._ray.get(actor.run.remote(job))
        finally:
            self._idle.put(actor)
        return write_attempt(self.out_dir, job, shipped)

    def interrupt(self) -> int:
        """Ask every actor to stop its in-flight attempt; returns how many sandboxes they closed."""
        return sum(self._ray.get([a.stop.remote() for a in self._actors], timeout=30))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ray.get([a.close.remote() for a in self._actors], timeout=60)
        for a in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(a)
        self._actors = []
        if self._owns:
            self._ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["RAY_MISSING", "EpisodeWorker", "RayPool", "ShippedAttempt", "import_ray", "pack_snapshots",
           "read_tree", "unpack_snapshots", "write_attempt"]
