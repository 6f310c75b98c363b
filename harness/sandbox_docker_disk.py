"""How a Docker sandbox's writable space is bounded (issue #14 item 10), for ``harness.sandbox_docker``.

Fallback order, chosen once per engine by ``disk_mode_for(info)``:

1. ``storage-opt``: the container's whole writable layer is capped at ``SandboxSpec.disk_bytes``
   (``--storage-opt size=``). Only drivers that support a size: btrfs, zfs, devicemapper, overlay2 on xfs (the
   engine refuses the option elsewhere).
2. ``tmpfs`` (every other driver, e.g. overlay2 on ext4): the work directory is a sized tmpfs **volume** (local
   driver, ``type=tmpfs``, ``size=disk_bytes``), and every other directory the image lets uid 1000 write
   (``/tmp``, ``/var/tmp``, ``/run/lock``, the agent's home, the work directory's parent ``/work``) is a sized
   tmpfs mount, so nothing the agent writes reaches the writable layer on the host disk; a write past the size
   fails with ENOSPC. A volume, not a ``tmpfs`` mount, because the engine's archive
   calls (``put_archive`` / ``get_archive``, which copy the repository in and the patch out) see volumes but not
   tmpfs mounts. The local driver unmounts a tmpfs volume when its container stops, so ``snapshot_workdir`` /
   ``restore_workdir`` carry the work directory across the restart that follows a timeout.

In both modes every file is also capped at ``disk_bytes`` (``RLIMIT_FSIZE``). tmpfs pages live in host memory:
what a container writes there is charged to its memory cgroup, so with ``disk_bytes`` above ``mem_bytes`` a big
write can end as an OOM kill (reported as such) before ENOSPC.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
import tempfile
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any, Literal

from harness import images
from harness.sandbox_docker_io import AGENT_UID, translate_errors

if TYPE_CHECKING:  # the Docker SDK is imported where it is used; these names are for the annotations only
    from docker import APIClient

DiskMode = Literal["storage-opt", "tmpfs"]
SIZED_DRIVERS = ("btrfs", "zfs", "devicemapper")


def disk_mode_for(info: dict[str, Any]) -> DiskMode:
    """``storage-opt`` when the engine's storage driver honours a size, else ``tmpfs`` (from ``docker info``)."""
    status = dict(tuple(x) for x in info.get("DriverStatus") or [] if len(x) == 2)
    driver = info.get("Driver", "")
    sized = driver in SIZED_DRIVERS or (driver == "overlay2" and status.get("Backing Filesystem") == "xfs")
    return "storage-opt" if sized else "tmpfs"


def disk_report(mode: DiskMode, disk_bytes: int) -> dict[str, Any]:
    """What the run manifest records about the disk limit (``RunManifest.disk_limit``)."""
    where = ("the container's writable layer (storage-opt size)" if mode == "storage-opt" else
             "the work directory (tmpfs volume), /tmp, /var/tmp and the home (tmpfs mounts), each")
    return {"mode": mode, "bytes": int(disk_bytes), "per_file_bytes": int(disk_bytes), "capped": where}


def volume_name(container_name: str) -> str:
    return f"{container_name}-work"


def create_work_volume(api: APIClient, name: str, size: int, labels: dict[str, str]) -> None:
    """A local tmpfs volume of ``size`` bytes, its root owned by uid 1000 (mode 0755)."""
    opts = {"type": "tmpfs", "device": "tmpfs", "o": f"size={int(size)},uid={AGENT_UID},gid={AGENT_UID},mode=0755"}
    with translate_errors(f"create work-directory volume {name}", kind="CONTAINER_CREATE"):
        api.create_volume(name=name, driver="local", driver_opts=opts, labels=labels)


def host_config_args(mode: DiskMode, size: int, workdir: str, volume: str | None, *, parent_owned: bool) -> dict[str, Any]:
    """``create_host_config`` keyword arguments for ``mode``. ``volume``: the work directory's tmpfs volume (tmpfs
    mode); ``parent_owned``: the image ships the work directory's parent owned by uid 1000 (``/work``), so it is a
    sized tmpfs too, else the agent could fill the writable layer beside its work directory. ``/run/lock`` (the
    image's one other directory writable by uid 1000) is a sized tmpfs as well."""
    import docker

    if mode == "storage-opt":
        return {"storage_opt": {"size": str(size)}}
    agent = f"uid={AGENT_UID},gid={AGENT_UID},mode=0755"
    tmpfs = {"/tmp": f"size={size},mode=1777", "/var/tmp": f"size={size},mode=1777",
             "/run/lock": f"size={size},mode=1777", f"/home/{images.AGENT_USER}": f"size={size},{agent}"}
    parent = posixpath.dirname(workdir.rstrip("/"))
    if parent_owned and parent != "/":
        tmpfs[parent] = f"size={size},{agent}"
    mounts = [docker.types.Mount(workdir, volume, type="volume", no_copy=True)] if volume else []
    return {"tmpfs": tmpfs, "mounts": mounts}


def remove_volume(api: APIClient, name: str) -> None:
    with contextlib.suppress(Exception):
        api.remove_volume(name, force=True)


@contextlib.contextmanager
def snapshot_workdir(api: APIClient, cid: str, workdir: str, what: str) -> Iterator[IO[bytes]]:
    """The work directory as a tar (top entry: its base name), spooled to a host temp file while in use."""
    with tempfile.SpooledTemporaryFile(max_size=32 << 20) as buf:
        with translate_errors(f"save the work directory of {what}", kind="EXEC_TRANSPORT"):
            stream, _ = api.get_archive(cid, workdir)
            for chunk in stream:
                buf.write(chunk)
        buf.seek(0)
        yield buf


def restore_workdir(api: APIClient, cid: str, workdir: str, archive: IO[bytes], what: str) -> None:
    """Put a ``snapshot_workdir`` tar back (into the work directory's parent: the tar's top entry is its name)."""
    parent = workdir.rstrip("/").rsplit("/", 1)[0] or "/"
    with translate_errors(f"restore the work directory of {what}", kind="EXEC_TRANSPORT"):
        api.put_archive(cid, parent, archive.read())


def enospc_from(text: str, workdir: str | None) -> OSError | None:
    """An engine error saying a write under ``workdir`` (tmpfs mode: the sandbox's own sized volume, so nothing
    else can be full there) ran out of space: the caller's ``OSError(ENOSPC)``, as a command would get, not infra.
    ``workdir=None`` (storage-opt mode, where a full host disk looks the same) maps nothing."""
    if workdir and f"{workdir.rstrip('/')}/" in text and "no space left" in text.lower():
        return OSError(errno.ENOSPC, f"no space left in the sandbox's work directory (its size limit): {text}")
    return None
