"""``TaskSandboxFactory``: fresh sandboxes of one kind holding an instance's repository at its base commit.

Each instance's snapshot is materialised once per factory on the host (``harness.tasks.materialize_snapshot``, a git
repository without the hidden tests) and copied into every sandbox opened for it: the agent's sandbox, each
grading sandbox (always a new one, never the agent's), and control runs. The sandboxes come from one provider per
run, chosen by the kind in ``harness.sandbox_providers.make_provider`` (Docker: one ``DockerSandboxProvider``,
containers labelled with the run id and removed by label on ``close``; local: ``LocalSandboxProvider``); the
factory itself never branches on the kind.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

from harness.sandbox import Sandbox, SandboxKind, SandboxSpec, SandboxUnavailable
from harness.sandbox_providers import Role, SandboxFactory, make_provider
from harness.schema import TaskInstance, TaskSet

log = logging.getLogger(__name__)


class TaskSandboxFactory(SandboxFactory):
    """Implements ``harness.sandbox_providers.SandboxFactory`` for a task set on disk."""

    def __init__(self, task_set: TaskSet, *, kind: SandboxKind, run_id: str, spec: SandboxSpec | None = None) -> None:
        self._provider = make_provider(kind, run_id=run_id)  # ValueError naming the kinds for an unknown one
        self.task_set, self.kind, self.run_id = task_set, kind, run_id
        self.isolated = self._provider.isolated
        self.spec = spec or SandboxSpec()
        self._root = Path(task_set.path)
        self._cache = Path(tempfile.mkdtemp(prefix="tgsuite-snapshots-"))
        self._repos: dict[str, tuple[Path, str]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._digests: dict[str, str] = {}
        self._live: weakref.WeakSet[Sandbox] = weakref.WeakSet()  # open sandboxes, for interrupt()

    def preflight(self) -> dict[str, str]:
        """Every instance's snapshot materialises (a corrupt archive raises ``harness.tasks.TaskSetError`` naming
        it, before any episode runs, instead of failing every attempt as infra) and has no task-set fault
        (``harness.tasks_checks.tree_problems``: a symbolic link leaving it, more bytes than the disk limit); Docker: engine reachable, every
        image the task set names present (``SandboxUnavailable`` otherwise). Returns image key → digest (also
        recorded in the run manifest)."""
        from harness.tasks import TaskSetError
        from harness.tasks_checks import tree_problems

        for inst in self.task_set.instances:
            repo, _ = self._repo(inst)
            problems = tree_problems(repo, disk_bytes=self.spec.disk_bytes if self._provider.caps_disk else None)
            if problems:
                raise TaskSetError(f"{self._root}/snapshots/{inst.instance_id} (instance {inst.instance_id!r}): "
                                   f"task-set fault, found before any episode: {' | '.join(problems)}")
        self._digests.update(self._provider.preflight_images(i.image for i in self.task_set.instances))
        return dict(self._digests)

    def image_digests(self) -> dict[str, str]:
        return dict(self._digests)

    def disk_limit(self) -> dict[str, object]:
        """Which disk limit this factory's sandboxes get (``RunManifest.disk_limit``): Docker's mode
        (``harness.sandbox_docker_disk``), or the local sandbox's per-file ``RLIMIT_FSIZE`` only."""
        return self._provider.disk_limit(self.spec)

    def _repo(self, inst: TaskInstance) -> tuple[Path, str]:
        with self._guard:
            lock = self._locks.setdefault(inst.instance_id, threading.Lock())
        with lock:
            if inst.instance_id not in self._repos:
                from harness.tasks import materialize_snapshot

                dest = self._cache / inst.instance_id
                shutil.rmtree(dest, ignore_errors=True)
                head = materialize_snapshot(self._root, inst, dest)
                self._repos[inst.instance_id] = (dest, head)
            return self._repos[inst.instance_id]

    def base_repo(self, instance: TaskInstance) -> tuple[Path, str]:
        """The host copy of the instance's repository at base (never handed to a sandbox) and its commit."""
        return self._repo(instance)

    def open(self, instance: TaskInstance, *, role: Role, attempt: int) -> tuple[Sandbox, str]:
        repo, head = self._repo(instance)
        spec = dataclasses.replace(self.spec, image=instance.image,
                                   labels={**self.spec.labels, "tgsuite.role": role})
        sb = self._provider.create(spec, instance_id=instance.instance_id, attempt=attempt)
        self._live.add(sb)
        try:
            sb.copy_in(repo, ".")
        except OSError as exc:
            sb.close()
            full = "No space" in str(exc) or "no space" in str(exc)
            fix = (f" Fix: the repository needs more than the sandbox's disk limit ({self.spec.disk_bytes >> 20} MiB):"
                   " raise it (`tgsuite eval --disk-mib`, SandboxSpec.disk_bytes)." if full else "")
            raise SandboxUnavailable(f"copying {instance.instance_id} into the sandbox failed: {exc}.{fix}",
                                     kind="DISK_FULL" if full else "SANDBOX") from exc
        except BaseException:
            sb.close()
            raise
        return sb, head

    def open_scratch(self) -> Sandbox:
        """A fresh, EMPTY sandbox of this factory's kind (the task set's most common image, no repository) for
        running code a policy read from the task, e.g. ``ScriptedExpert``'s screening of candidate fixes; the
        caller closes it. Docker sandboxes carry this run's labels (``tgsuite.role=scratch``)."""
        images = [i.image for i in self.task_set.instances] or [self.spec.image]
        image = max(sorted(set(images)), key=images.count)
        spec = dataclasses.replace(self.spec, image=image, labels={**self.spec.labels, "tgsuite.role": "scratch"})
        sb = self._provider.create(spec, instance_id="scratch", attempt=0)
        self._live.add(sb)
        return sb

    def interrupt(self) -> int:
        """Close every sandbox this factory opened that is still open (their running commands end at once) and,
        for Docker, remove every container labelled with this factory's run id (this process's only). Called
        from the main thread when the run is stopped by a signal; returns how many sandboxes were closed."""
        self._provider.stop()  # no new container from here on; creations in flight finish first
        live = list(self._live)
        for sb in live:
            try:
                sb.close()
            except Exception as exc:  # noqa: BLE001 - best effort while stopping
                log.warning("closing a sandbox while stopping failed: %s", exc)
        self._provider.cleanup_run()
        return len(live)

    def close(self) -> None:
        shutil.rmtree(self._cache, ignore_errors=True)
        try:
            self._provider.cleanup_run()
        except SandboxUnavailable as exc:
            log.warning("cleanup of run %s containers failed: %s", self.run_id, exc)

    def __enter__(self) -> TaskSandboxFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
