"""``DockerSandbox``: one container per episode on the Docker SDK (engine API 1.41, docker.io 20.10 and later).

Isolation it guarantees (each one exercised by tests/harness/test_sandbox_docker.py):
- no network: ``network_mode="none"`` (loopback only; no route, no DNS);
- all Linux capabilities dropped, ``no-new-privileges``, non-root user ``agent`` (uid 1000), ``init`` as PID 1;
- a pids limit (fork bombs hit it), a memory limit with swap equal to it (a hog is OOM-killed and reported as
  ``ExecResult.oom_killed``), a CPU quota (``nano_cpus``), ``nofile`` ulimit;
- timeouts enforced twice: inside (``timeout -k 2 T``, kills the command's process group) and outside (a host-side
  deadline on the exec stream). After ANY timeout the container is restarted, so no process of that command (nor
  anything it detached with ``setsid``) survives; the filesystem is kept. Background processes started by earlier
  commands are killed too;
- output capped per stream while it streams (head + tail kept, ``truncated`` set);
- files move as tar archives (``put_archive`` / ``get_archive``), owned by uid 1000;
- containers carry labels (``tgsuite.run_id``, ``tgsuite.instance_id``, ``tgsuite.attempt``, ``tgsuite.owner``)
  and are removed on ``close()``, at interpreter exit, on SIGTERM/SIGINT, and by ``cleanup_run`` /
  ``cleanup_orphans`` (by label, never by name prefix).

Writable for the agent (uid 1000): the work dir (``/work/...``), ``/home/agent``, ``/tmp`` and ``/var/tmp``, in
the container's own throw-away layer or tmpfs; system paths (``/etc``, ``/usr``, ``/``, ``/root``, ``/proc/sys``)
are not, and nothing on the host is reachable (no bind mounts; the only volume is the sandbox's own tmpfs work
directory, removed with it). Writable space is bounded by ``SandboxSpec.disk_bytes``
(``DockerSandboxProvider.disk_mode``, ``harness.sandbox_docker_disk``: a storage-opt size where the driver supports
it, else a sized tmpfs volume as the work dir and sized tmpfs ``/tmp``, ``/var/tmp`` and home; plus a per-file
``RLIMIT_FSIZE`` in both). Under the tmpfs mode the image's own content at the work dir is hidden (it starts empty;
the repository is copied in).

What it does NOT guarantee: protection from kernel exploits (containers share the host kernel), one total across the
tmpfs mounts under the tmpfs mode (each capped at ``disk_bytes``: up to six times that in all, in host memory), or
fairness between sandboxes beyond the CPU quota.
Harness-side file calls (``write_file`` etc.) may write anywhere inside the container: the container is the
boundary, not the work directory. A process killed with SIGKILL cannot clean up; ``cleanup_orphans()`` at the next
start removes its containers (owner process no longer alive on this host).

Infrastructure failures (engine gone, client read timeout, container vanished or paused, broken exec stream, an exec
the engine could not start because the container is dying, a copy out of a stopped container) raise
``SandboxUnavailable``, never a command's exit code; bad file-call paths raise ``OSError`` / ``ValueError``; a missing
``cwd`` or program is exit code 126 / 127, as in a shell. The provider that creates these sandboxes (preflight,
container creation with the limits above, disk mode, ``stop()``: no new container, creations in flight end first) is
``harness.sandbox_docker_provider.DockerSandboxProvider``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import posixpath
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from harness.sandbox import DEFAULT_OUTPUT_CAP, ExecResult, OutputCapper, Sandbox, SandboxSpec, SandboxUnavailable
from harness.sandbox_docker_disk import (
    enospc_from,
    remove_volume,
    restore_workdir,
    snapshot_workdir,
)
from harness.sandbox_docker_io import (  # noqa: F401  (re-exported: the public cleanup API and label keys)
    AGENT_UID,
    LABEL_ATTEMPT,
    LABEL_INSTANCE,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_SANDBOX,
    LIVE,
    LIVE_LOCK,
    OOM_CMD,
    Demux,
    as_agent,
    cleanup_orphans,
    cleanup_run,
    exec_result,
    hijacked,
    parse_oom_count,
    pump,
    tar_one,
    translate_errors,
)

if TYPE_CHECKING:  # the Docker SDK is imported where it is used; these names are for the annotations only
    from docker import DockerClient

log = logging.getLogger(__name__)

KILL_GRACE_S = 2  # `timeout -k`: SIGKILL this long after SIGTERM
OUTER_SLACK_S = 5.0  # host-side deadline = timeout + grace + slack
OCI_EXEC_FAILED = "OCI runtime exec failed"  # the engine could not start the exec (e.g. the container is dying)


# --- the sandbox -------------------------------------------------------------------------------------------


class DockerSandbox(Sandbox):
    """A running container; create it with ``DockerSandboxProvider.create(spec)``."""

    isolated = True

    def __init__(self, client: DockerClient, container_id: str, spec: SandboxSpec, name: str, volume: str | None = None) -> None:
        self._client = client
        self.volume = volume  # the work directory's tmpfs volume (disk mode ``tmpfs``), removed on close
        self._api = client.api
        self.id = container_id
        self.name = name
        self.spec = spec
        self.workdir = spec.workdir
        self._oom_seen = 0
        self._closed = False

    # paths -------------------------------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.workdir, path))

    def _env(self, env: dict[str, str] | None) -> list[str]:
        merged = {**self.spec.env, **(env or {})}
        return [f"{k}={v}" for k, v in merged.items()]

    # exec --------------------------------------------------------------------------------------------------
    def exec(self, cmd: list[str] | str, *, timeout: float, cwd: str | None = None, env: dict[str, str] | None = None,
             input: bytes | None = None) -> ExecResult:
        """Run ``cmd`` as uid 1000. ``timed_out`` => returncode 124 (TERM), 137 (KILL) or -9 (killed from outside)."""
        if timeout <= 0:
            raise ValueError(f"exec timeout must be > 0 seconds, got {timeout}. Fix: pass timeout=<seconds>.")
        self._check_open()
        inner = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        argv = ["timeout", "-k", str(KILL_GRACE_S), f"{timeout:.3f}", *inner]
        cap = self.spec.output_cap_bytes
        out, err = OutputCapper(cap), OutputCapper(cap)
        start = time.monotonic()
        with translate_errors(f"exec in sandbox {self.name}", kind="EXEC_TRANSPORT"):
            exec_id = self._api.exec_create(
                self.id, argv, stdin=input is not None, workdir=self._abs(cwd or "."),
                environment=self._env(env), user=f"{AGENT_UID}:{AGENT_UID}",
            )["Id"]
            sock = self._api.exec_start(exec_id, socket=True)
            raw, early = hijacked(sock)
            try:
                deadline = start + timeout + KILL_GRACE_S + OUTER_SLACK_S
                running = lambda: bool(self._api.exec_inspect(exec_id).get("Running"))  # noqa: E731
                finished = pump(raw, input, Demux(out, err), deadline, running, early)
            finally:
                with contextlib.suppress(Exception):
                    sock.close()
                    raw.close()
            duration = time.monotonic() - start
            if not finished:
                log.warning("sandbox %s: exec outlived its host deadline; restarting the container", self.name)
                self._restart()
                return exec_result(-9, out, err, True, duration)
            info = self._api.exec_inspect(exec_id)
        rc = info.get("ExitCode")
        timed_out = rc in (124, 137) and duration >= timeout * 0.98
        oom = False
        if rc == 126 and OCI_EXEC_FAILED in out.result()[0]:
            self._check_running(settle_s=1.0)  # the exec never started because the container is dying: infra
        if rc is None or rc == 137:
            self._check_running()
            oom = not timed_out and self._oom_killed()
        if timed_out:
            self._restart()  # nothing the command started (even setsid'ed) survives a timeout
        if oom:
            err.feed(f"\n[tgsuite: killed by the out-of-memory killer (limit {self.spec.mem_bytes >> 20} MiB)]\n".encode())
        return exec_result(-9 if rc is None else int(rc), out, err, timed_out, duration, oom)

    def _oom_killed(self) -> bool:
        """Did the cgroup's OOM-kill counter rise since we last looked? Raises if the container is dying.

        ``exec`` saw exit 137 (SIGKILL). That is an OOM kill, a plain ``kill -9`` (the command's business), or
        the container being killed under us (infra). Reading the counter needs a live container; when the read
        fails or is unparseable we poll the container state for up to a second before believing it is alive.
        """
        with translate_errors(f"read OOM counter of {self.name}", kind="EXEC_TRANSPORT"):
            exec_id = self._api.exec_create(self.id, ["sh", "-c", OOM_CMD], user=f"{AGENT_UID}:{AGENT_UID}")["Id"]
            text = self._api.exec_start(exec_id).decode(errors="replace")
            code = self._api.exec_inspect(exec_id).get("ExitCode")
        count = parse_oom_count(text) if code == 0 else None
        if count is None:
            for _ in range(5):  # the engine updates the state of a killed container asynchronously
                time.sleep(0.2)
                self._check_running()
            return bool(self._api.inspect_container(self.id)["State"].get("OOMKilled"))
        rose, self._oom_seen = count > self._oom_seen, count
        return rose

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxUnavailable(f"sandbox {self.name} is closed", kind="EXEC_TRANSPORT")

    def _check_running(self, *, settle_s: float = 0.0) -> None:
        """Raise ``SandboxUnavailable`` unless the container runs; ``settle_s``: look that long (the engine updates
        the state of a container being killed asynchronously)."""
        for _ in range(1 + int(settle_s / 0.2)):
            with translate_errors(f"inspect sandbox {self.name}"):
                state = self._api.inspect_container(self.id)["State"]
            if not state.get("Running") or state.get("Paused") or settle_s <= 0:
                break
            time.sleep(0.2)
        if not state.get("Running") or state.get("Paused"):
            raise SandboxUnavailable(
                f"sandbox container {self.name} stopped under the command (state {state.get('Status')}, "
                f"OOMKilled={state.get('OOMKilled')}); infra error, not the command's exit code",
                kind="EXEC_TRANSPORT",
            )

    def _restart(self) -> None:
        if self.volume is None:
            with translate_errors(f"restart sandbox {self.name}", kind="EXEC_TRANSPORT"):
                self._api.restart(self.id, timeout=0)
        else:  # the engine unmounts a tmpfs volume when the container stops: carry the work directory across
            with snapshot_workdir(self._api, self.id, self.workdir, self.name) as saved:
                with translate_errors(f"restart sandbox {self.name}", kind="EXEC_TRANSPORT"):
                    self._api.restart(self.id, timeout=0)
                restore_workdir(self._api, self.id, self.workdir, saved, self.name)
        self._oom_seen = 0  # a restart gives the container a fresh cgroup

    @contextlib.contextmanager
    def _full_is_enospc(self) -> Iterator[None]:
        """A harness-side write that fills the work directory's own size limit is the caller's ``OSError``
        (ENOSPC, as for a command), not an infra error."""
        try:
            yield
        except SandboxUnavailable as exc:
            full = enospc_from(str(exc), self.workdir if self.volume else None) if exc.kind == "DISK_FULL" else None
            if full is None:
                raise
            raise full from exc

    # files -------------------------------------------------------------------------------------------------
    def read_file(self, path: str, *, max_bytes: int = DEFAULT_OUTPUT_CAP) -> bytes:
        """The file's bytes (symlinks followed). FileNotFoundError / IsADirectoryError / ValueError (too big)."""
        self._check_open()
        return self._read(self._abs(path), max_bytes, hops=0)

    def _read(self, full: str, max_bytes: int, *, hops: int) -> bytes:
        import docker

        if hops > 8:
            raise FileNotFoundError(f"{full}: too many levels of symbolic links in sandbox {self.name}")
        with translate_errors(f"read {full} from {self.name}", kind="EXEC_TRANSPORT", paths=True):
            try:
                stream, stat = self._api.get_archive(self.id, full)
            except docker.errors.NotFound as exc:
                if "No such container" in str(exc):
                    raise
                self._check_running()  # a dead sandbox is an infra error, not a missing file
                raise FileNotFoundError(f"{full}: no such file in sandbox {self.name}") from exc
            if stat.get("mode", 0) & (1 << 31):
                raise IsADirectoryError(f"{full} is a directory in sandbox {self.name}; use copy_out")
            if stat.get("size", 0) > max_bytes:
                raise ValueError(
                    f"{full} is {stat['size']} bytes, over max_bytes={max_bytes}. Fix: pass a larger "
                    "max_bytes, or read part of it with exec (head -c / tail -c)."
                )
            data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            if member is not None and member.issym():
                target = posixpath.normpath(posixpath.join(posixpath.dirname(full), member.linkname))
                return self._read(target, max_bytes, hops=hops + 1)
            fh = tar.extractfile(member) if member is not None else None
            if fh is None:
                raise FileNotFoundError(f"{full}: not a regular file in sandbox {self.name}")
            return fh.read()

    def write_file(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` (parents created, owned by uid 1000, mode 0644)."""
        import docker

        self._check_open()
        full = self._abs(path)
        parent, base = posixpath.split(full)
        archive = tar_one(base, data, 0o644)
        with self._full_is_enospc(), translate_errors(f"write {full} in {self.name}", kind="EXEC_TRANSPORT", paths=True):
            try:
                self._api.put_archive(self.id, parent, archive)
            except docker.errors.NotFound as exc:
                if "No such container" in str(exc):
                    raise
                self._mkdir(parent)
                self._api.put_archive(self.id, parent, archive)

    def _mkdir(self, path: str) -> None:
        res = self.exec(["mkdir", "-p", path], timeout=30)
        if res.returncode != 0:
            raise PermissionError(f"cannot create {path} in sandbox {self.name} as uid {AGENT_UID}: {res.stderr.strip()}")

    def copy_in(self, src: Path, dest: str) -> None:
        """Copy the contents of host directory ``src`` into ``dest`` (created if missing; files owned by uid 1000)."""
        self._check_open()
        src = Path(src)
        if not src.is_dir():
            raise FileNotFoundError(f"copy_in: {src} is not a directory on the host")
        full = self._abs(dest)
        with tempfile.SpooledTemporaryFile(max_size=32 << 20) as buf:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for child in sorted(src.iterdir()):
                    tar.add(child, arcname=child.name, filter=as_agent)
            buf.seek(0)
            archive = buf.read()
        import docker

        with self._full_is_enospc(), translate_errors(f"copy into {full} of {self.name}", kind="EXEC_TRANSPORT",
                                                      paths=True):
            try:
                self._api.put_archive(self.id, full, archive)
            except docker.errors.NotFound as exc:
                if "No such container" in str(exc):
                    raise
                self._mkdir(full)
                self._api.put_archive(self.id, full, archive)

    def copy_out(self, src: str, dest: Path) -> None:
        """Copy the contents of sandbox directory ``src`` into host directory ``dest`` (safe extraction).

        The container must be running before the copy starts and still after it ends: a stopped container's tmpfs
        work directory reads as empty, which would look like an agent that deleted every file (infra, raised)."""
        self._check_open()
        self._check_running()
        full = self._abs(src)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.SpooledTemporaryFile(max_size=32 << 20) as buf:
            with translate_errors(f"copy out of {full} of {self.name}", kind="EXEC_TRANSPORT", paths=True):
                stream, _ = self._api.get_archive(self.id, full)
                for chunk in stream:
                    buf.write(chunk)
            self._check_running()
            buf.seek(0)
            with tarfile.open(fileobj=buf) as tar:
                members = []
                for m in tar.getmembers():
                    rel = m.name.split("/", 1)[1] if "/" in m.name else ""
                    if rel:
                        m.name = rel
                        members.append(m)
                tar.extractall(dest, members=members, filter="data")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with LIVE_LOCK:
            LIVE.pop(self.id, None)
        with contextlib.suppress(Exception):
            self._api.remove_container(self.id, force=True, v=True)
        if self.volume is not None:
            remove_volume(self._api, self.volume)
