"""Sandboxes: where model-written code runs.

This module holds the interface only (``Sandbox``, ``ExecResult``, ``SandboxUnavailable``, ``SandboxSpec``) and
the one list of sandbox kinds (``SandboxKind``, ``SANDBOX_KINDS``: what ``--sandbox``, ``rollout.sandbox`` and the
run manifest accept); ``harness.sandbox_docker.DockerSandbox`` and ``harness.sandbox_local.LocalSandbox`` implement
it, and ``harness.sandbox_providers.PROVIDERS`` maps each kind to the provider that makes its sandboxes.

Isolation (filled in by the implementations' docstrings and summarised here):
- DockerSandbox: network ``none``, all capabilities dropped, no-new-privileges, non-root user, pids / memory
  (swap equal) / CPU limits, timeouts enforced inside (``timeout -k``) and outside (host deadline); after any
  timeout the container is restarted so nothing the command started survives; OOM kills are reported
  (``ExecResult.oom_killed``), writable space bounded by ``SandboxSpec.disk_bytes`` (see
  ``harness.sandbox_docker_provider.DockerSandboxProvider.disk_mode``). It does NOT protect against kernel exploits
  (containers share the host kernel).
- LocalSandbox: a temp directory, rlimits (CPU, address space, file size, processes; a pids cgroup when run as
  root) and a scrubbed environment. It is NOT isolated: no network or filesystem isolation beyond refusing
  harness paths that leave its root. Runs using it record ``isolated=False``.

Infrastructure failures (dead daemon, vanished container, broken exec stream) raise ``SandboxUnavailable``;
they are never reported as a command's exit code.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, NamedTuple, get_args

DEFAULT_OUTPUT_CAP = 1 << 20  # bytes kept per stream (head + tail)

# The kinds of sandbox, defined here once: ``harness.sandbox_providers.PROVIDERS`` maps each to its provider, and
# the CLI's ``--sandbox`` choices, the configs and the schemas read them from here. A new kind is added here and
# in ``PROVIDERS`` (tests/harness/test_sandbox_providers.py checks the two agree).
SandboxKind = Literal["docker", "local"]
SANDBOX_KINDS: tuple[SandboxKind, ...] = get_args(SandboxKind)


class ExecResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_s: float
    # Added by the platform issue (additive, defaults keep old constructor calls valid): True when the kernel's
    # out-of-memory killer ended the command (Docker: cgroup OOM kill counter rose during the exec).
    oom_killed: bool = False


class SandboxUnavailable(RuntimeError):
    """The sandbox (engine, container, process host) failed: an infrastructure error, never an agent failure.

    ``kind`` is one of HARNESS §7.6's INFRA codes, e.g. ``DOCKER_DAEMON``, ``IMAGE_MISSING``,
    ``CONTAINER_CREATE``, ``EXEC_TRANSPORT``, ``DISK_FULL``.
    """

    def __init__(self, message: str, *, kind: str = "SANDBOX") -> None:
        super().__init__(message)
        self.kind = kind


AGENT_HOME = "/home/agent"  # HOME inside the Docker image (harness.images) and as the local sandbox shows its own


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. Limits are per sandbox; labels identify it for cleanup."""

    image: str = "base"
    workdir: str = "/work/repo"
    cpus: float = 1.0
    mem_bytes: int = 2 << 30
    pids: int = 256
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    disk_bytes: int = 2 << 30  # writable space (Docker: storage-opt size, else sized tmpfs + a per-file limit)
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


class SandboxPathError(PermissionError):
    """A path given to a sandbox leaves its root (``..``, an absolute path outside it, or a symlink out of it)."""


def cap_output(data: bytes, cap: int) -> tuple[str, bool]:
    """Keep the head and the tail of ``data`` within ``cap`` bytes; returns (text, truncated)."""
    if len(data) <= cap:
        return data.decode("utf-8", errors="replace"), False
    half = cap // 2
    marker = f"\n[... {len(data) - 2 * half} bytes truncated ...]\n".encode()
    return (data[:half] + marker + data[len(data) - half :]).decode("utf-8", errors="replace"), True


class OutputCapper:
    """Streaming twin of ``cap_output``: feed chunks, keep at most ``cap`` bytes (head + tail), same final text.

    Memory stays O(cap) however much a command prints, so 100 MB of output never sits in the harness.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.half = cap // 2
        self.total = 0
        self._head = bytearray()
        self._tail = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self._head)
        if room > 0 and not self._tail:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > 2 * self.cap:  # trim rarely, not per chunk
                del self._tail[: len(self._tail) - self.cap]

    def result(self) -> tuple[str, bool]:
        if self.total <= self.cap:
            return bytes(self._head + self._tail).decode("utf-8", errors="replace"), False
        head = bytes(self._head[: self.half])
        tail = bytes((self._head[self.half :] + self._tail)[-self.half :]) if self.half else b""
        marker = f"\n[... {self.total - 2 * self.half} bytes truncated ...]\n".encode()
        return (head + marker + tail).decode("utf-8", errors="replace"), True


class Sandbox(abc.ABC):
    """A place to run commands and move files. Paths are relative to the work directory unless absolute."""

    isolated: bool = False

    @abc.abstractmethod
    def exec(
        self,
        cmd: list[str] | str,
        *,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: bytes | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (argv list, or a string run by ``sh -c``). Raises SandboxUnavailable on infra failure."""

    @abc.abstractmethod
    def read_file(self, path: str, *, max_bytes: int = DEFAULT_OUTPUT_CAP) -> bytes: ...

    @abc.abstractmethod
    def write_file(self, path: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def copy_in(self, src: Path, dest: str) -> None:
        """Copy a host directory's contents into ``dest`` inside the sandbox."""

    @abc.abstractmethod
    def copy_out(self, src: str, dest: Path) -> None:
        """Copy a sandbox directory's contents to the host directory ``dest``."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
