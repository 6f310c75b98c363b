"""Plumbing for ``harness.sandbox_docker``: cleanup by label, error translation, tar archives, exec stream.

Split out of ``sandbox_docker.py`` to keep files small; import the public names (``cleanup_run``,
``cleanup_orphans``, the ``LABEL_*`` keys) from ``harness.sandbox_docker``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import select
import signal
import socket
import struct
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from harness import images
from harness.sandbox import ExecResult, OutputCapper, SandboxUnavailable

if TYPE_CHECKING:  # the Docker SDK is imported where it is used; these names are for the annotations only
    from docker import APIClient, DockerClient

log = logging.getLogger(__name__)

LABEL_SANDBOX = "tgsuite.sandbox"
LABEL_RUN = "tgsuite.run_id"
LABEL_INSTANCE = "tgsuite.instance_id"
LABEL_ATTEMPT = "tgsuite.attempt"
LABEL_OWNER = "tgsuite.owner"
DEFAULT_CLIENT_TIMEOUT_S = 60.0
_IDLE_CHECK_S = 0.5  # idle stream: ask the engine whether the command is still running this often
_EXIT_DRAIN_S = 0.2  # after it exited, read what is left for this long
AGENT_UID = images.AGENT_UID


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


def owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition("/")
    pid, _, start = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's container (shared engine): not ours to judge
    return os.path.exists(f"/proc/{pid}") and _start_time(int(pid)) == start


LIVE: dict[str, APIClient] = {}  # container id -> the client that made it
LIVE_LOCK = threading.RLock()  # re-entrant: the signal handler may run while the main thread holds it
_HANDLERS_INSTALLED = False
SignalHandler = Callable[[int, FrameType | None], object] | int | None  # what signal.getsignal returns


def _cleanup_live() -> None:
    with LIVE_LOCK:
        items = list(LIVE.items())
        LIVE.clear()
    for cid, api in items:
        with contextlib.suppress(Exception):
            api.remove_container(cid, force=True, v=True)
    if items:  # their work-directory volumes (tmpfs disk mode), found by this process's owner label
        with contextlib.suppress(Exception):
            remove_volumes(items[0][1], [LABEL_SANDBOX, f"{LABEL_OWNER}={owner_label()}"])


def install_cleanup_handlers() -> None:
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

        def handler(signum: int, frame: FrameType | None, _previous: SignalHandler = previous) -> None:
            _cleanup_live()
            if callable(_previous):
                _previous(signum, frame)
            elif _previous != signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


def _remove_by_filters(client: DockerClient, filters: dict[str, Any],
                       keep: Callable[[dict[str, Any]], bool] | None = None) -> int:
    removed = 0
    with translate_errors("list containers"):
        found = client.api.containers(all=True, filters=filters)
    for c in found:
        if keep is not None and keep(c):
            continue
        with contextlib.suppress(Exception):
            client.api.remove_container(c["Id"], force=True, v=True)
            removed += 1
    return removed


def remove_volumes(api: APIClient, labels: list[str], keep: Callable[[dict[str, Any]], bool] | None = None) -> int:
    """Remove the volumes carrying every label in ``labels`` (``key`` or ``key=value``) except those ``keep``
    accepts; a volume still mounted by a container is left (the engine refuses). Returns how many went."""
    with translate_errors("list volumes"):
        found = api.volumes(filters={"label": labels}).get("Volumes") or []
    removed = 0
    for vol in found:
        if keep is not None and keep(vol):
            continue
        with contextlib.suppress(Exception):
            api.remove_volume(vol["Name"])
            removed += 1
    return removed


def cleanup_run(run_id: str, client: DockerClient | None = None) -> int:
    """Remove every container labelled ``tgsuite.run_id=<run_id>`` (and then their work-directory volumes);
    returns how many containers were removed."""
    client = client or images.connect(DEFAULT_CLIENT_TIMEOUT_S)
    n = _remove_by_filters(client, {"label": [f"{LABEL_RUN}={run_id}"]})
    remove_volumes(client.api, [LABEL_SANDBOX, f"{LABEL_RUN}={run_id}"])
    return n


STOP_WAIT_S = 20.0  # how long stopping waits for container creations in flight


class CreationGate:
    """Container creations in flight for one provider, and whether its run is stopping.

    A create request the engine completes after the stop's cleanup listed the run's containers would leave one
    behind (measured once, under heavy load, in ``tests/harness/test_fault_injection.py``). So: ``stop()`` refuses
    new creations and waits (bounded) for those in flight; a creation that returns after the stop began removes
    its own container (``discard_if_stopping``); ``drain()`` lets a cleanup wait for creations in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inflight = 0
        self._stopping = False

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        with self._cond:
            if self._stopping:
                raise SandboxUnavailable("the run is stopping: no new sandbox", kind="CONTAINER_CREATE")
            self._inflight += 1
        try:
            yield
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def discard_if_stopping(self, api: APIClient, cid: str) -> None:
        """Inside ``creating()``, after the container exists: remove it and refuse if the run began stopping."""
        with self._cond:
            stopping = self._stopping
        if stopping:
            with contextlib.suppress(Exception):
                api.remove_container(cid, force=True, v=True)
            raise SandboxUnavailable("the run is stopping: no new sandbox", kind="CONTAINER_CREATE")

    def drain(self, wait_s: float = STOP_WAIT_S) -> bool:
        """Wait until no creation is in flight (at most ``wait_s``); False when some still are."""
        with self._cond:
            return self._cond.wait_for(lambda: self._inflight == 0, timeout=wait_s)

    def stop(self, wait_s: float = STOP_WAIT_S) -> bool:
        with self._cond:
            self._stopping = True
        return self.drain(wait_s)


def cleanup_orphans(client: DockerClient | None = None) -> int:
    """Remove tgsuite containers whose owner process (on this host) is gone, e.g. after a SIGKILL."""
    client = client or images.connect(DEFAULT_CLIENT_TIMEOUT_S)
    keep = lambda c: owner_alive((c.get("Labels") or {}).get(LABEL_OWNER, ""))  # noqa: E731
    n = _remove_by_filters(client, {"label": [LABEL_SANDBOX]}, keep=keep)
    remove_volumes(client.api, [LABEL_SANDBOX], keep=lambda v: owner_alive((v.get("Labels") or {}).get(LABEL_OWNER, "")))
    if n:
        log.info("removed %d orphaned sandbox container(s)", n)
    return n


# --- error translation -------------------------------------------------------------------------------------


# Engine messages about the PATH a file call named (the caller's mistake, not infra) -> the OSError to raise.
_PATH_ERRORS: tuple[tuple[str, type[OSError]], ...] = (
    ("not a directory", NotADirectoryError),
    ("too many links", FileNotFoundError),
    ("permission denied", PermissionError),
    ("read-only file system", PermissionError),
    ("cannot overwrite", IsADirectoryError),
    ("is a directory", IsADirectoryError),
)


def exec_result(rc: int, out: OutputCapper, err: OutputCapper, timed_out: bool, duration: float,
                oom: bool = False) -> ExecResult:
    """The ``ExecResult`` of a finished exec from its two capped streams."""
    stdout, t1 = out.result()
    stderr, t2 = err.result()
    return ExecResult(rc, stdout, stderr, timed_out, t1 or t2, duration, oom)


def path_error(text: str) -> type[OSError] | None:
    """The OSError class for an engine error message about a path inside the container, else None."""
    low = text.lower()
    return next((cls for needle, cls in _PATH_ERRORS if needle in low), None)


@contextlib.contextmanager
def translate_errors(what: str, kind: str = "DOCKER_DAEMON", *, paths: bool = False) -> Iterator[None]:
    """Map Docker SDK / transport errors to ``SandboxUnavailable`` (never to an exit code).

    ``paths=True`` (file calls): engine errors about the named path become ``OSError`` subclasses instead.
    """
    import docker
    import requests

    try:
        yield
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError, PermissionError):
        raise
    except docker.errors.NotFound as exc:
        raise SandboxUnavailable(f"{what}: not found ({exc.explanation})", kind="EXEC_TRANSPORT") from exc
    except docker.errors.APIError as exc:
        text = str(exc.explanation or exc)
        cls = path_error(text) if paths else None
        if cls is not None:
            raise cls(f"{what}: {text}") from exc
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


def tar_one(name: str, data: bytes | None, mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.uid = info.gid = AGENT_UID
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


def tar_dirs(names: list[str]) -> bytes:
    """A tar of empty directories (parents first), owned by uid 1000, mode 0755."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in names:
            info = as_agent(tarfile.TarInfo(name))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
    return buf.getvalue()


def make_dirs(api: APIClient, cid: str, path: str) -> None:
    """Create ``path`` and its missing parents owned by uid 1000, via the engine (the engine's own ``WorkingDir``
    would make them root's). Existing ancestors are left as they are (their owner and mode are not touched)."""
    import docker

    parts = [p for p in path.strip("/").split("/") if p]
    for cut in range(len(parts) - 1, -1, -1):  # try the parent, then the grandparent, ...
        anchor = "/" + "/".join(parts[:cut])
        below = parts[cut:]
        archive = tar_dirs(["/".join(below[: i + 1]) for i in range(len(below))])
        try:
            api.put_archive(cid, anchor, archive)
            return
        except docker.errors.NotFound as exc:
            if "No such container" in str(exc):
                raise



def as_agent(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = AGENT_UID
    info.uname = info.gname = images.AGENT_USER
    return info


class Demux:
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


def hijacked(sock: socket.SocketIO | socket.socket) -> tuple[socket.socket, bytes]:
    """The socket under ``exec_start(socket=True)``'s stream, and the stream bytes already read past the headers.

    docker-py returns the raw socket object (a ``socket.SocketIO``) under http.client's buffered reader, which read
    the engine's ``101 UPGRADED`` headers in chunks. When the command's first output arrived before the client read those headers (a
    loaded host: it did in CI, and ``tests/harness/test_sandbox_docker_stream.py`` delays the read on purpose), the reader
    holds that output; read from the socket alone, the exec returned exit code 0 with no output. Those bytes are taken
    from the reader here (``read1`` on the non-blocking socket: the buffer, or one read that may find nothing).
    """
    raw = cast(socket.socket, getattr(sock, "_sock", sock))  # a SocketIO's socket, or ``sock`` when it is one
    response = getattr(getattr(sock, "_response", None), "raw", None)
    reader = getattr(getattr(response, "_fp", None), "fp", None)
    raw.setblocking(False)
    early = reader.read1(1 << 16) if reader is not None else b""
    return raw, early or b""  # read1 on a non-blocking socket with nothing buffered may give None


def pump(
    raw: socket.socket,
    data: bytes | None,
    demux: Demux,
    deadline: float,
    still_running: Callable[[], bool] | None = None,
    early: bytes = b"",
) -> bool:
    """Write stdin and read the exec stream until EOF; returns False when the host-side deadline passed.

    ``early``: stream bytes the HTTP client read before the socket was handed over (``hijacked``), parsed first.
    A detached child (``cmd &``, ``setsid``) can hold the stream open after the command itself exited, so when
    the stream is idle for ``_IDLE_CHECK_S`` we ask ``still_running()`` and stop after a short drain if not.
    """
    raw.setblocking(False)
    demux.feed(early)
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


def parse_oom_count(text: str) -> int | None:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
            return int(parts[1])
    return None


OOM_CMD = "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events"
