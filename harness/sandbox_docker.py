"""``DockerSandbox``: one container per episode on the Docker SDK (engine API 1.41, docker.io 20.10 and later).

Isolation it guarantees (each one exercised by tests/test_sandbox_docker.py):
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

What it does NOT guarantee: protection from kernel exploits (containers share the host kernel), a disk quota
(overlay2 ``size=`` needs xfs+pquota; watch free disk), or fairness between sandboxes beyond the CPU quota.
Harness-side file calls (``write_file`` etc.) may write anywhere inside the container: the container is the
boundary, not the work directory. A process killed with SIGKILL cannot clean up; ``cleanup_orphans()`` at the next
start removes its containers (owner process no longer alive on this host).

Infrastructure failures (engine gone, client read timeout, container vanished or paused, broken exec stream) raise
``SandboxUnavailable``; they are never reported as a command's exit code.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import posixpath
import select
import shutil
import signal
import socket
import struct
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness import images
from harness.sandbox import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    OutputCapper,
    Sandbox,
    SandboxSpec,
    SandboxUnavailable,
)

log = logging.getLogger(__name__)

LABEL_SANDBOX = "tgsuite.sandbox"
LABEL_RUN = "tgsuite.run_id"
LABEL_INSTANCE = "tgsuite.instance_id"
LABEL_ATTEMPT = "tgsuite.attempt"
LABEL_OWNER = "tgsuite.owner"
KILL_GRACE_S = 2  # `timeout -k`: SIGKILL this long after SIGTERM
OUTER_SLACK_S = 5.0  # host-side deadline = timeout + grace + slack
DEFAULT_CLIENT_TIMEOUT_S = 60.0
MIN_FREE_DISK_BYTES = 2 << 30
_IDLE_CHECK_S = 0.5  # idle stream: ask the engine whether the command is still running this often
_EXIT_DRAIN_S = 0.2  # after it exited, read what is left for this long
_UID = images.AGENT_UID


# --- owner identity, live registry, signal / exit cleanup ----------------------------------------------------


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def owner_label() -> str:
    """``host/pid/start-time`` of this process: lets ``cleanup_orphans`` tell dead owners from live ones."""
    return f"{socket.gethostname()}/{os.getpid()}/{_start_time(os.getpid())}"


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition("/")
    pid, _, start = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's container (shared engine): not ours to judge
    return os.path.exists(f"/proc/{pid}") and _start_time(int(pid)) == start


_LIVE: dict[str, Any] = {}  # container id -> docker APIClient
_LIVE_LOCK = threading.RLock()  # re-entrant: the signal handler may run while the main thread holds it
_HANDLERS_INSTALLED = False


def _cleanup_live() -> None:
    with _LIVE_LOCK:
        items = list(_LIVE.items())
        _LIVE.clear()
    for cid, api in items:
        with contextlib.suppress(Exception):
            api.remove_container(cid, force=True, v=True)


def _install_cleanup_handlers() -> None:
    """atexit + chained SIGTERM/SIGINT handlers that remove this process's live containers first."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_cleanup_live)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: Any, _previous: Any = previous) -> None:
            _cleanup_live()
            if callable(_previous):
                _previous(signum, frame)
            elif _previous != signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


def _remove_by_filters(client: Any, filters: dict[str, Any], keep: Any = None) -> int:
    removed = 0
    with _translate("list containers"):
        found = client.api.containers(all=True, filters=filters)
    for c in found:
        if keep is not None and keep(c):
            continue
        with contextlib.suppress(Exception):
            client.api.remove_container(c["Id"], force=True, v=True)
            removed += 1
    return removed


def cleanup_run(run_id: str, client: Any | None = None) -> int:
    """Remove every container labelled ``tgsuite.run_id=<run_id>``; returns how many were removed."""
    client = client or images.connect(DEFAULT_CLIENT_TIMEOUT_S)
    return _remove_by_filters(client, {"label": [f"{LABEL_RUN}={run_id}"]})


def cleanup_orphans(client: Any | None = None) -> int:
    """Remove tgsuite containers whose owner process (on this host) is gone, e.g. after a SIGKILL."""
    client = client or images.connect(DEFAULT_CLIENT_TIMEOUT_S)
    keep = lambda c: _owner_alive((c.get("Labels") or {}).get(LABEL_OWNER, ""))  # noqa: E731
    n = _remove_by_filters(client, {"label": [LABEL_SANDBOX]}, keep=keep)
    if n:
        log.info("removed %d orphaned sandbox container(s)", n)
    return n


# --- error translation -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _translate(what: str, kind: str = "DOCKER_DAEMON") -> Iterator[None]:
    """Map Docker SDK / transport errors to ``SandboxUnavailable`` (never to an exit code)."""
    import docker
    import requests

    try:
        yield
    except (FileNotFoundError, IsADirectoryError, ValueError, PermissionError):
        raise
    except docker.errors.NotFound as exc:
        raise SandboxUnavailable(f"{what}: not found ({exc.explanation})", kind="EXEC_TRANSPORT") from exc
    except docker.errors.APIError as exc:
        text = str(exc.explanation or exc)
        k = "DISK_FULL" if "no space left" in text.lower() else kind
        if "is paused" in text or "is not running" in text:
            k = "EXEC_TRANSPORT"
        raise SandboxUnavailable(f"{what}: Docker engine error: {text}", kind=k) from exc
    except (requests.exceptions.RequestException, docker.errors.DockerException, OSError) as exc:
        raise SandboxUnavailable(
            f"{what}: Docker engine did not answer ({type(exc).__name__}: {exc}). Fix: check the engine "
            "(`tgsuite doctor`); restart it with `bash scripts/setup.sh`.",
            kind=kind,
        ) from exc


# --- tar helpers -------------------------------------------------------------------------------------------


def _tar_one(name: str, data: bytes | None, mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.uid = info.gid = _UID
        info.uname = info.gname = images.AGENT_USER
        info.mtime = int(time.time())
        info.mode = mode
        if data is None:
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _as_agent(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = _UID
    info.uname = info.gname = images.AGENT_USER
    return info


class _Demux:
    """Incremental parser of Docker's multiplexed stream (8-byte header: stream, 0, 0, 0, uint32 size)."""

    def __init__(self, out: OutputCapper, err: OutputCapper) -> None:
        self.sinks = {1: out, 2: err}
        self.header = b""
        self.stream = 1
        self.left = 0

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.left == 0:
                need = 8 - len(self.header)
                self.header += bytes(view[:need])
                view = view[need:]
                if len(self.header) == 8:
                    self.stream, self.left = self.header[0], struct.unpack(">I", self.header[4:])[0]
                    self.header = b""
                continue
            take = view[: self.left]
            self.sinks.get(self.stream, self.sinks[2]).feed(bytes(take))
            self.left -= len(take)
            view = view[len(take) :]


def _pump(
    raw: socket.socket,
    data: bytes | None,
    demux: _Demux,
    deadline: float,
    still_running: Callable[[], bool] | None = None,
) -> bool:
    """Write stdin and read the exec stream until EOF; returns False when the host-side deadline passed.

    A detached child (``cmd &``, ``setsid``) can hold the stream open after the command itself exited, so when
    the stream is idle for ``_IDLE_CHECK_S`` we ask ``still_running()`` and stop after a short drain if not.
    """
    raw.setblocking(False)
    pending = memoryview(data) if data else None
    if data is not None and not data:
        raw.shutdown(socket.SHUT_WR)
    last_data = time.monotonic()
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if exited_at is not None and now - exited_at > _EXIT_DRAIN_S:
            return True
        if now >= deadline:
            return exited_at is not None
        wlist = [raw] if pending is not None else []
        readable, writable, _ = select.select([raw], wlist, [], min(deadline - now, _IDLE_CHECK_S))
        if writable and pending is not None:
            with contextlib.suppress(BlockingIOError):
                pending = pending[raw.send(pending[: 1 << 16]) :]
            if not pending:
                pending = None
                raw.shutdown(socket.SHUT_WR)
        if readable:
            try:
                chunk = raw.recv(1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return True
            demux.feed(chunk)
            last_data = time.monotonic()
        elif exited_at is None and still_running is not None and time.monotonic() - last_data >= _IDLE_CHECK_S:
            if not still_running():
                exited_at = time.monotonic()
            last_data = time.monotonic()


def _parse_oom_count(text: str) -> int | None:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
            return int(parts[1])
    return None


_OOM_CMD = "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events"


# --- the sandbox -------------------------------------------------------------------------------------------


class DockerSandbox(Sandbox):
    """A running container; create it with ``DockerSandboxProvider.create(spec)``."""

    isolated = True

    def __init__(self, client: Any, container_id: str, spec: SandboxSpec, name: str) -> None:
        self._client = client
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
    def exec(
        self,
        cmd: list[str] | str,
        *,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: bytes | None = None,
    ) -> ExecResult:
        """Run ``cmd`` as uid 1000. ``timed_out`` => returncode 124 (TERM), 137 (KILL) or -9 (killed from outside)."""
        if timeout <= 0:
            raise ValueError(f"exec timeout must be > 0 seconds, got {timeout}. Fix: pass timeout=<seconds>.")
        self._check_open()
        inner = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        argv = ["timeout", "-k", str(KILL_GRACE_S), f"{timeout:.3f}", *inner]
        cap = self.spec.output_cap_bytes
        out, err = OutputCapper(cap), OutputCapper(cap)
        start = time.monotonic()
        with _translate(f"exec in sandbox {self.name}", kind="EXEC_TRANSPORT"):
            exec_id = self._api.exec_create(
                self.id, argv, stdin=input is not None, workdir=self._abs(cwd or "."),
                environment=self._env(env), user=f"{_UID}:{_UID}",
            )["Id"]
            sock = self._api.exec_start(exec_id, socket=True)
            raw = getattr(sock, "_sock", sock)
            try:
                deadline = start + timeout + KILL_GRACE_S + OUTER_SLACK_S
                running = lambda: bool(self._api.exec_inspect(exec_id).get("Running"))  # noqa: E731
                finished = _pump(raw, input, _Demux(out, err), deadline, running)
            finally:
                with contextlib.suppress(Exception):
                    sock.close()
                    raw.close()
            duration = time.monotonic() - start
            if not finished:
                log.warning("sandbox %s: exec outlived its host deadline; restarting the container", self.name)
                self._restart()
                return self._result(-9, out, err, True, duration)
            info = self._api.exec_inspect(exec_id)
        rc = info.get("ExitCode")
        timed_out = rc in (124, 137) and duration >= timeout * 0.98
        oom = False
        if rc is None or rc == 137:
            self._check_running()
            oom = not timed_out and self._oom_killed()
        if timed_out:
            self._restart()  # nothing the command started (even setsid'ed) survives a timeout
        if oom:
            err.feed(f"\n[tgsuite: killed by the out-of-memory killer (limit {self.spec.mem_bytes >> 20} MiB)]\n".encode())
        return self._result(-9 if rc is None else int(rc), out, err, timed_out, duration, oom)

    @staticmethod
    def _result(
        rc: int, out: OutputCapper, err: OutputCapper, timed_out: bool, duration: float, oom: bool = False
    ) -> ExecResult:
        stdout, t1 = out.result()
        stderr, t2 = err.result()
        return ExecResult(rc, stdout, stderr, timed_out, t1 or t2, duration, oom)

    def _oom_killed(self) -> bool:
        """Did the cgroup's OOM-kill counter rise since we last looked?"""
        with _translate(f"read OOM counter of {self.name}", kind="EXEC_TRANSPORT"):
            exec_id = self._api.exec_create(self.id, ["sh", "-c", _OOM_CMD], user=f"{_UID}:{_UID}")["Id"]
            text = self._api.exec_start(exec_id).decode(errors="replace")
        count = _parse_oom_count(text)
        if count is None:  # unknown kernel interface: fall back to Docker's sticky flag
            return bool(self._api.inspect_container(self.id)["State"].get("OOMKilled"))
        rose, self._oom_seen = count > self._oom_seen, count
        return rose

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxUnavailable(f"sandbox {self.name} is closed", kind="EXEC_TRANSPORT")

    def _check_running(self) -> None:
        with _translate(f"inspect sandbox {self.name}"):
            state = self._api.inspect_container(self.id)["State"]
        if not state.get("Running") or state.get("Paused"):
            raise SandboxUnavailable(
                f"sandbox container {self.name} stopped under the command (state {state.get('Status')}, "
                f"OOMKilled={state.get('OOMKilled')}); infra error, not the command's exit code",
                kind="EXEC_TRANSPORT",
            )

    def _restart(self) -> None:
        with _translate(f"restart sandbox {self.name}", kind="EXEC_TRANSPORT"):
            self._api.restart(self.id, timeout=0)
        self._oom_seen = 0  # a restart gives the container a fresh cgroup

    # files -------------------------------------------------------------------------------------------------
    def read_file(self, path: str, *, max_bytes: int = DEFAULT_OUTPUT_CAP) -> bytes:
        import docker

        self._check_open()
        full = self._abs(path)
        with _translate(f"read {full} from {self.name}", kind="EXEC_TRANSPORT"):
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
                return self.read_file(posixpath.join(posixpath.dirname(full), member.linkname), max_bytes=max_bytes)
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
        archive = _tar_one(base, data, 0o644)
        with _translate(f"write {full} in {self.name}", kind="EXEC_TRANSPORT"):
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
            raise PermissionError(f"cannot create {path} in sandbox {self.name} as uid {_UID}: {res.stderr.strip()}")

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
                    tar.add(child, arcname=child.name, filter=_as_agent)
            buf.seek(0)
            archive = buf.read()
        import docker

        with _translate(f"copy into {full} of {self.name}", kind="EXEC_TRANSPORT"):
            try:
                self._api.put_archive(self.id, full, archive)
            except docker.errors.NotFound as exc:
                if "No such container" in str(exc):
                    raise
                self._mkdir(full)
                self._api.put_archive(self.id, full, archive)

    def copy_out(self, src: str, dest: Path) -> None:
        """Copy the contents of sandbox directory ``src`` into host directory ``dest`` (safe extraction)."""
        self._check_open()
        full = self._abs(src)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.SpooledTemporaryFile(max_size=32 << 20) as buf:
            with _translate(f"copy out of {full} of {self.name}", kind="EXEC_TRANSPORT"):
                stream, _ = self._api.get_archive(self.id, full)
                for chunk in stream:
                    buf.write(chunk)
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
        with _LIVE_LOCK:
            _LIVE.pop(self.id, None)
        with contextlib.suppress(Exception):
            self._api.remove_container(self.id, force=True, v=True)


# --- the provider ------------------------------------------------------------------------------------------


class DockerSandboxProvider:
    """Creates ``DockerSandbox``es for one run; share one provider (one client) across worker threads."""

    def __init__(self, client: Any | None = None, *, run_id: str | None = None, client_timeout: float = DEFAULT_CLIENT_TIMEOUT_S) -> None:
        self._client = client
        self._timeout = client_timeout
        self.run_id = run_id or f"adhoc-{uuid.uuid4().hex[:8]}"

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = images.connect(self._timeout)
        return self._client

    def resolve_image(self, image: str) -> str:
        return images.base_image_tag() if image == "base" else image

    def preflight(self, image: str = "base") -> dict[str, str]:
        """Engine reachable, API >= 1.41, image present, disk free. Raises ``SandboxUnavailable``."""
        with _translate("preflight: ping the Docker engine"):
            version = self.client.version()
            info = self.client.info()
        api = version.get("ApiVersion", "0")
        if tuple(int(x) for x in api.split(".")) < (1, 41):
            raise SandboxUnavailable(f"Docker API {api} < 1.41. Fix: install docker.io >= 20.10.", kind="PREFLIGHT")
        tag = self.resolve_image(image)
        if not images.image_present(self.client, tag):
            raise SandboxUnavailable(f"image {tag} is missing. Fix: run `tgsuite images build`.", kind="IMAGE_MISSING")
        root = info.get("DockerRootDir", "")
        if root and os.path.isdir(root) and shutil.disk_usage(root).free < MIN_FREE_DISK_BYTES:
            raise SandboxUnavailable(
                f"less than 2 GiB free under {root}. Fix: `docker system prune` or free disk.", kind="DISK_FULL"
            )
        return {"api_version": api, "server_version": version.get("Version", "?"), "image": tag,
                "image_id": images.image_digest(self.client, tag)}

    def create(self, spec: SandboxSpec | None = None, *, instance_id: str = "", attempt: int = 0) -> DockerSandbox:
        """Start a container for ``spec`` (default: base image, /work/repo). Raises ``SandboxUnavailable``."""
        import docker

        spec = spec or SandboxSpec()
        if not posixpath.isabs(spec.workdir):
            raise ValueError(f"SandboxSpec.workdir must be absolute, got {spec.workdir!r}. Fix: e.g. '/work/repo'.")
        api = self.client.api
        tag = self.resolve_image(spec.image)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in f"{self.run_id}-{instance_id}")[:80]
        name = f"tgs-{safe}-a{attempt}-{uuid.uuid4().hex[:8]}"
        labels = {**spec.labels, LABEL_SANDBOX: "1", LABEL_RUN: self.run_id, LABEL_INSTANCE: instance_id,
                  LABEL_ATTEMPT: str(attempt), LABEL_OWNER: owner_label()}
        host_config = api.create_host_config(
            network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            pids_limit=spec.pids, mem_limit=spec.mem_bytes, memswap_limit=spec.mem_bytes,
            nano_cpus=int(spec.cpus * 1e9), ulimits=[docker.types.Ulimit(name="nofile", soft=4096, hard=4096)],
            log_config=docker.types.LogConfig(type="none"),
        )
        _install_cleanup_handlers()
        with _translate(f"create sandbox from {tag}", kind="CONTAINER_CREATE"):
            try:
                cid = api.create_container(tag, command=["sleep", "infinity"], user=f"{_UID}:{_UID}",
                                           environment=dict(spec.env), labels=labels, name=name,
                                           host_config=host_config)["Id"]
            except docker.errors.ImageNotFound as exc:
                raise SandboxUnavailable(f"image {tag} is missing. Fix: run `tgsuite images build`.",
                                         kind="IMAGE_MISSING") from exc
        with _LIVE_LOCK:
            _LIVE[cid] = api
        box = DockerSandbox(self.client, cid, spec, name)
        try:
            with _translate(f"start sandbox {name}", kind="CONTAINER_START"):
                api.start(cid)
                parent, base = posixpath.split(spec.workdir.rstrip("/"))
                try:
                    api.put_archive(cid, parent, _tar_one(base, None, 0o755))
                except docker.errors.NotFound:
                    box._mkdir(spec.workdir)
        except BaseException:
            box.close()
            raise
        return box

    def cleanup_run(self) -> int:
        return cleanup_run(self.run_id, self.client)

    def cleanup_orphans(self) -> int:
        return cleanup_orphans(self.client)
