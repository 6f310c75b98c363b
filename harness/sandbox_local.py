"""``LocalSandbox``: a temp directory and a subprocess, for fast training rollouts and machines without Docker.

It is NOT isolated (``isolated = False``; runs using it record that in their manifest). What it does:
- commands run in a fresh temp directory (the work dir), as the CURRENT user, with a scrubbed environment
  (``PATH`` = a shim dir, /usr/local/bin, /usr/bin, /bin; ``HOME`` and ``TMPDIR`` in a private aux dir;
  ``LANG=C.UTF-8``; plus ``SandboxSpec.env``), in a new session (process group);
- rlimits per command: CPU seconds (timeout + 2), address space (``SandboxSpec.mem_bytes``), file size (1 GiB),
  open files (1024), no core dumps, and a process cap. The process cap is ``RLIMIT_NPROC`` (existing processes of
  this user + ``SandboxSpec.pids``) for a normal user; root ignores ``RLIMIT_NPROC``, so as root a pids cgroup
  (``pids.max = SandboxSpec.pids``) is used when the cgroup filesystem is writable, and a warning is logged when
  it is not;
- the timeout kills the process group, every process of the sandbox's cgroup, and every process whose
  environment carries this sandbox's ``TGSUITE_SANDBOX_ID`` marker (catches ``setsid``/daemonised children unless
  they scrubbed their environment); ``close()`` does the same and deletes the directories;
- harness-side paths (``read_file``, ``write_file``, ``copy_in``, ``copy_out``, ``cwd``) are relative to the work
  dir; an absolute path is accepted only inside ``SandboxSpec.workdir`` (mapped onto the temp dir), and anything
  that leaves the root (``..``, another absolute path, a symlink pointing out) raises ``SandboxPathError``;
- a command's output shows the sandbox's own paths as the Docker sandbox has them: the work dir as
  ``SandboxSpec.workdir`` (``/work/repo``), ``HOME`` as ``/home/agent``, ``TMPDIR`` as ``/tmp`` and the shim dir as
  ``/usr/local/bin``. The temp dirs' names are random, so without this a traceback that names a file (a
  ``SyntaxError`` at collection, say) differed from run to run and from what the same command prints in Docker;
  RL rollouts, which use this sandbox, then diverged between two runs of the same seed. The commands themselves
  run in the real temp dirs: ``cd /work/repo`` inside a command does not reach the work dir.

What it does NOT do: network isolation (commands can reach the network the host can), filesystem isolation
(commands can read and write anything the user can, e.g. ``/tmp`` or, as root, everything), memory accounting
beyond the address-space rlimit (a hog sees ``MemoryError``/ENOMEM; ``oom_killed`` stays False), or protection
from a process that clears its environment and leaves the cgroup.

Interpreter: ``python``, ``python3`` and ``pytest`` in the shim dir run ``sys.executable`` (the interpreter
running the harness, e.g. the project venv), so ``python -m pytest`` works inside and sees the same packages.
Pass ``python="/usr/bin/python3"`` to use another interpreter.

``LocalSandboxProvider`` makes them for the ``local`` sandbox kind (``harness.sandbox_providers.PROVIDERS``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from harness.sandbox import (
    AGENT_HOME,
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    OutputCapper,
    Sandbox,
    SandboxPathError,
    SandboxSpec,
)

log = logging.getLogger(__name__)

FILE_SIZE_LIMIT = 1 << 30
NOFILE_LIMIT = 1024
MARKER = "TGSUITE_SANDBOX_ID"
_CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")
_EXIT_DRAIN_S = 0.2  # after the command exits, how long to wait for background holders of its pipes


def _procs_of_uid(uid: int) -> int:
    """Tasks (processes AND threads: what RLIMIT_NPROC counts) owned by ``uid`` right now."""
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    n += len(os.listdir(f"/proc/{entry.name}/task"))
    return n


def make_pids_cgroup(name: str, limit: int) -> Path | None:
    """A pids cgroup (v1 ``pids`` hierarchy or v2 unified) with ``pids.max = limit``; None if not possible."""
    for root in _CGROUP_ROOTS:
        base = Path(root)
        if not (base / "cgroup.procs").exists():
            continue
        if root == "/sys/fs/cgroup" and "pids" not in _read(base / "cgroup.subtree_control"):
            continue
        path = base / name
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
            return path
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class LocalSandbox(Sandbox):
    """See the module docstring for what is and is not isolated."""

    isolated = False

    def __init__(self, spec: SandboxSpec | None = None, *, python: str = sys.executable) -> None:
        self.spec = spec or SandboxSpec()
        self.workdir = self.spec.workdir  # the virtual path absolute paths are mapped from
        self.id = uuid.uuid4().hex
        self.root = Path(tempfile.mkdtemp(prefix="tgsuite-local-")).resolve()
        self._aux = Path(tempfile.mkdtemp(prefix="tgsuite-local-aux-")).resolve()
        for sub in ("bin", "home", "tmp"):
            (self._aux / sub).mkdir()
        self._write_shims(python)
        # host path -> what output shows (module docstring); the work dir last, the aux dirs are not inside it
        self._shown = ((str(self._aux / "home"), AGENT_HOME), (str(self._aux / "tmp"), "/tmp"),
                       (str(self._aux / "bin"), "/usr/local/bin"), (str(self.root), self.workdir.rstrip("/")))
        self._cgroup: Path | None = None
        if os.geteuid() == 0:
            self._cgroup = make_pids_cgroup(f"tgsuite-local-{self.id[:12]}", self.spec.pids)
            if self._cgroup is None:
                log.warning("LocalSandbox as root without a writable pids cgroup: the process limit is not enforced")
        self._closed = False

    def _write_shims(self, python: str) -> None:
        shims = {
            "python": f'#!/bin/sh\nexec "{python}" "$@"\n',
            "python3": f'#!/bin/sh\nexec "{python}" "$@"\n',
            "pytest": f'#!/bin/sh\nexec "{python}" -m pytest "$@"\n',
        }
        for name, text in shims.items():
            path = self._aux / "bin" / name
            path.write_text(text)
            path.chmod(0o755)

    # paths -------------------------------------------------------------------------------------------------
    def host_path(self, path: str) -> Path:
        """Map a sandbox path to the host path under the root, refusing anything that leaves it."""
        if os.path.isabs(path):
            wd = self.workdir.rstrip("/")
            if path != wd and not path.startswith(wd + "/"):
                raise SandboxPathError(
                    f"{path!r} is outside the sandbox work dir {self.workdir!r}. Fix: use a path relative to the "
                    "work dir (LocalSandbox refuses other absolute paths)."
                )
            path = os.path.relpath(path, wd)
        rel = os.path.normpath(path)
        if rel == ".." or rel.startswith("../"):
            raise SandboxPathError(f"{path!r} climbs out of the sandbox root with '..'. Fix: stay inside it.")
        candidate = self.root / rel
        resolved = os.path.realpath(candidate)
        if resolved != str(self.root) and not resolved.startswith(str(self.root) + os.sep):
            raise SandboxPathError(f"{path!r} resolves to {resolved}, outside the sandbox root (via a symlink).")
        return Path(resolved)

    # exec --------------------------------------------------------------------------------------------------
    def _env(self, env: dict[str, str] | None) -> dict[str, str]:
        base = {
            "PATH": f"{self._aux / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self._aux / "home"),
            "TMPDIR": str(self._aux / "tmp"),
            "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
            # the host interpreter's pytest plugins (hypothesis, anyio, ...) are not the task's environment (the
            # Docker image has none), and loading them doubled every run_tests call (0.4 s -> 0.2 s measured)
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        return {**base, **self.spec.env, **(env or {}), MARKER: self.id}

    def _preexec(self, timeout: float) -> Callable[[], None]:
        cpu = math.ceil(timeout) + 2
        mem = self.spec.mem_bytes
        uid = os.geteuid()
        nproc = None if uid == 0 else _procs_of_uid(uid) + self.spec.pids
        procs_file = str(self._cgroup / "cgroup.procs") if self._cgroup else None

        def limits() -> None:  # runs in the child between fork and exec: os/resource calls only
            if procs_file:
                fd = os.open(procs_file, os.O_WRONLY)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
            resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

        return limits

    def exec(
        self,
        cmd: list[str] | str,
        *,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: bytes | None = None,
    ) -> ExecResult:
        """Run ``cmd``; on timeout everything it started is killed (returncode -9, ``timed_out=True``)."""
        if timeout <= 0:
            raise ValueError(f"exec timeout must be > 0 seconds, got {timeout}. Fix: pass timeout=<seconds>.")
        self._check_open()
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        workdir = self.host_path(cwd or ".")
        start = time.monotonic()
        if not workdir.is_dir():  # same outcome as Docker's runtime: exit 126, not an exception
            return ExecResult(126, "", f"cannot run in {cwd!r}: not a directory in the sandbox\n", False, False, 0.0)
        proc = subprocess.Popen(
            argv, cwd=workdir, env=self._env(env), start_new_session=True, close_fds=True,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=self._preexec(timeout),  # noqa: PLW1509
        )
        out, err = OutputCapper(self.spec.output_cap_bytes), OutputCapper(self.spec.output_cap_bytes)
        finished = self._pump(proc, input, out, err, start + timeout)
        if not finished:
            self._kill_all(proc.pid)
        rc = proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        duration = time.monotonic() - start
        s_out, t1 = out.result()
        s_err, t2 = err.result()
        return ExecResult(-9 if not finished else rc, self.as_shown(s_out), self.as_shown(s_err), not finished,
                          t1 or t2, duration)

    def as_shown(self, text: str) -> str:
        """``text`` with this sandbox's host paths written as the Docker sandbox has them (module docstring)."""
        for host, shown in self._shown:
            text = text.replace(host, shown)
        return text

    @staticmethod
    def _pump(
        proc: subprocess.Popen[bytes], data: bytes | None, out: OutputCapper, err: OutputCapper, deadline: float
    ) -> bool:
        assert proc.stdout is not None and proc.stderr is not None
        sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        pending = memoryview(data) if data else None
        stdin = proc.stdin
        if stdin is not None and pending is None:
            stdin.close()
            stdin = None
        if stdin is not None:
            os.set_blocking(stdin.fileno(), False)
        exited_at: float | None = None
        while sinks:
            now = time.monotonic()
            if now >= deadline:
                return proc.poll() is not None and exited_at is not None
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _EXIT_DRAIN_S:
                break  # a background child still holds the pipe; the command itself is done
            wl = [stdin] if stdin is not None else []
            readable, writable, _ = select.select(list(sinks), wl, [], min(deadline - now, 0.1))
            if writable and stdin is not None and pending is not None:
                try:
                    pending = pending[os.write(stdin.fileno(), pending[: 1 << 16]) :]
                except (BlockingIOError, BrokenPipeError) as exc:
                    if isinstance(exc, BrokenPipeError):
                        pending = memoryview(b"")
                if not pending:
                    with contextlib.suppress(OSError):
                        stdin.close()
                    stdin = None
            for fd in readable:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    sinks[fd].feed(chunk)
                else:
                    del sinks[fd]
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        if proc.poll() is None:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        return True

    def _kill_all(self, pgid: int | None = None) -> None:
        """SIGKILL the process group, the cgroup's members and every process carrying our marker, until none."""
        needle = f"{MARKER}={self.id}".encode()
        for _ in range(50):
            victims: set[int] = set()
            if pgid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            if self._cgroup is not None:
                victims |= {int(p) for p in _read(self._cgroup / "cgroup.procs").split()}
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        with open(f"/proc/{entry.name}/environ", "rb") as fh:
                            if needle in fh.read():
                                victims.add(int(entry.name))
            victims.discard(os.getpid())
            if not victims:
                return
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        log.warning("LocalSandbox %s: some processes survived 50 kill rounds", self.id[:12])

    # files -------------------------------------------------------------------------------------------------
    def read_file(self, path: str, *, max_bytes: int = DEFAULT_OUTPUT_CAP) -> bytes:
        self._check_open()
        host = self.host_path(path)
        with open(host, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise ValueError(
                    f"{path} is {size} bytes, over max_bytes={max_bytes}. Fix: pass a larger max_bytes, or read "
                    "part of it with exec (head -c / tail -c)."
                )
            return fh.read()

    def write_file(self, path: str, data: bytes) -> None:
        self._check_open()
        host = self.host_path(path)
        host.parent.mkdir(parents=True, exist_ok=True)
        self.host_path(str(host.parent.relative_to(self.root)))  # parents created must stay inside too
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def copy_in(self, src: Path, dest: str) -> None:
        self._check_open()
        if not Path(src).is_dir():
            raise FileNotFoundError(f"copy_in: {src} is not a directory on the host")
        shutil.copytree(src, self.host_path(dest), symlinks=True, dirs_exist_ok=True)

    def copy_out(self, src: str, dest: Path) -> None:
        self._check_open()
        shutil.copytree(self.host_path(src), dest, symlinks=True, dirs_exist_ok=True)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"LocalSandbox {self.id[:12]} is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._kill_all()
        if self._cgroup is not None:
            with contextlib.suppress(OSError):
                self._cgroup.rmdir()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self._aux, ignore_errors=True)


class LocalSandboxProvider:
    """``harness.sandbox_providers.SandboxProvider`` of kind ``local``: each sandbox a new ``LocalSandbox``. No
    images, no engine, nothing left behind a closed sandbox; the disk limit is the per-file ``RLIMIT_FSIZE``."""

    isolated = False
    caps_disk = False  # only each file is capped (FILE_SIZE_LIMIT), not the work directory

    def preflight_images(self, image_keys: Iterable[str]) -> dict[str, str]:
        return {}

    def create(self, spec: SandboxSpec, *, instance_id: str = "", attempt: int = 0) -> LocalSandbox:
        return LocalSandbox(spec)

    def disk_limit(self, spec: SandboxSpec) -> dict[str, object]:
        return {"mode": "rlimit-fsize", "bytes": None, "per_file_bytes": FILE_SIZE_LIMIT, "capped": "each file only"}

    def stop(self) -> None:
        pass

    def cleanup_run(self) -> int:
        return 0
