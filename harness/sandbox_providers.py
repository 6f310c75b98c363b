"""Choosing a sandbox: the provider registry and the two seams built on it.

- ``PROVIDERS``: each ``harness.sandbox.SandboxKind`` → the maker of its ``SandboxProvider`` (``docker``:
  ``harness.sandbox_docker_provider.DockerSandboxProvider``; ``local``: ``harness.sandbox_local.LocalSandboxProvider``).
  ``make_provider(kind, run_id=...)`` is the one place a kind becomes a provider; an unknown kind is refused there,
  naming the valid ones. To add a kind: add it to ``SandboxKind`` (``harness.sandbox``) and its maker here.
- ``SandboxProvider``: what a kind must offer (make a sandbox from a ``SandboxSpec``, check its images before a run,
  say which disk limit applies, stop and clean up a run). ``harness.runner_sandbox.TaskSandboxFactory`` uses only
  this, so it never branches on the kind.
- ``SandboxFactory``: what the runner, the grading and the RL environment use (open a sandbox holding an instance's
  repository, the host copy of that repository, the image digests, the disk limit, scratch sandboxes, interrupt).
  ``TaskSandboxFactory`` implements it; a test double may subclass it to get the defaults of the optional members.

The providers' modules are imported only when a provider of that kind is made, so choosing ``local`` never loads
the Docker SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal, Protocol

from harness.sandbox import SANDBOX_KINDS, Sandbox, SandboxKind, SandboxSpec
from harness.schema import TaskInstance

Role = Literal["agent", "grade", "control"]


class SandboxProvider(Protocol):
    """Makes the sandboxes of one run for one kind; shared by the run's worker threads."""

    isolated: bool  # its sandboxes keep model-written code away from the host (recorded in the run manifest)
    caps_disk: bool  # its sandboxes' writable space is bounded by SandboxSpec.disk_bytes (a bigger repo is a fault)

    def preflight_images(self, image_keys: Iterable[str]) -> dict[str, str]:
        """Check that sandboxes of these image keys can be made before any episode runs (engine reachable, images
        present) and remove what earlier runs left behind; returns image key → digest ({} where images do not
        apply). Raises ``SandboxUnavailable``."""
        ...

    def create(self, spec: SandboxSpec, *, instance_id: str, attempt: int) -> Sandbox:
        """A fresh sandbox for ``spec`` (empty work directory). Raises ``SandboxUnavailable``."""
        ...

    def disk_limit(self, spec: SandboxSpec) -> dict[str, object]:
        """Which disk limit sandboxes made from ``spec`` get (``RunManifest.disk_limit``)."""
        ...

    def stop(self) -> None:
        """The run is stopping: refuse new sandboxes (creations in flight finish first)."""
        ...

    def cleanup_run(self) -> int:
        """Remove what this run's sandboxes left behind (e.g. containers); returns how many were removed."""
        ...


ProviderMaker = Callable[[str], SandboxProvider]  # run id -> provider


def _docker(run_id: str) -> SandboxProvider:
    from harness.sandbox_docker_provider import DockerSandboxProvider

    return DockerSandboxProvider(run_id=run_id)


def _local(run_id: str) -> SandboxProvider:
    from harness.sandbox_local import LocalSandboxProvider

    return LocalSandboxProvider()


PROVIDERS: dict[SandboxKind, ProviderMaker] = {"docker": _docker, "local": _local}


def make_provider(kind: str, *, run_id: str) -> SandboxProvider:
    """The provider of sandbox kind ``kind`` for run ``run_id``; ValueError naming the valid kinds otherwise."""
    for name, maker in PROVIDERS.items():  # ``kind`` may be any string (a CLI argument, a file): checked here
        if name == kind:
            return maker(run_id)
    valid = " or ".join(repr(k) for k in SANDBOX_KINDS)
    raise ValueError(f"sandbox kind must be {valid}, got {kind!r}")


class SandboxFactory(Protocol):
    """Opens fresh sandboxes holding an instance's repository at its base commit in the work directory.

    ``open``, ``image_digests``, ``kind`` and ``isolated`` are required; a class that subclasses this protocol gets
    the defaults of the others (no host copy of the repository, no disk limit recorded, local scratch sandboxes,
    nothing to interrupt)."""

    kind: SandboxKind
    isolated: bool

    def open(self, instance: TaskInstance, *, role: Role, attempt: int) -> tuple[Sandbox, str]:
        """A new sandbox and the base commit id its repository is at. Raises ``SandboxUnavailable``."""
        ...

    def image_digests(self) -> dict[str, str]:
        """Image key → digest of every image this factory has used or will use."""
        ...

    def base_repo(self, instance: TaskInstance) -> tuple[Path, str] | None:
        """The host copy of the instance's repository at base (never handed to a sandbox) and its commit: the
        patch is then diffed on the host against it (``grading.extract_patch_host``). None: there is none, and the
        patch is diffed inside the agent's sandbox (``grading.extract_patch``)."""
        return None

    def disk_limit(self) -> dict[str, object]:
        """Which disk limit the sandboxes get (recorded in the run manifest); {} = not recorded."""
        return {}

    def open_scratch(self) -> Sandbox:
        """A fresh, EMPTY sandbox for running code a policy read from the task (``ScriptedExpert``'s screening);
        the caller closes it. Default: a ``LocalSandbox``, as the expert's own default opener."""
        from harness.sandbox_local import LocalSandbox

        return LocalSandbox()

    def interrupt(self) -> int:
        """Close every sandbox still open (the run is stopped by a signal); returns how many were closed."""
        return 0
