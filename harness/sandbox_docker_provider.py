"""``DockerSandboxProvider``: creates the ``harness.sandbox_docker.DockerSandbox`` of each episode of one run, with the
isolation and limits that module lists (no network, capabilities dropped, non-root, pids / memory / CPU / disk
limits, labels for cleanup), checks the engine first (``preflight``: API >= 1.41, image present, disk free), and
stops and cleans up a run's containers (``stop``, ``cleanup_run``, ``cleanup_orphans``). The ``docker`` kind of
``harness.sandbox_providers``.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from harness import images
from harness.sandbox import SandboxSpec, SandboxUnavailable
from harness.sandbox_docker import DockerSandbox
from harness.sandbox_docker_disk import (
    DiskMode,
    create_work_volume,
    disk_mode_for,
    disk_report,
    host_config_args,
    remove_volume,
    volume_name,
)
from harness.sandbox_docker_io import (
    AGENT_UID,
    DEFAULT_CLIENT_TIMEOUT_S,
    LABEL_ATTEMPT,
    LABEL_INSTANCE,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_SANDBOX,
    LIVE,
    LIVE_LOCK,
    CreationGate,
    cleanup_orphans,
    cleanup_run,
    install_cleanup_handlers,
    make_dirs,
    owner_label,
    translate_errors,
)

if TYPE_CHECKING:  # the Docker SDK is imported where it is used
    from docker import DockerClient

MIN_FREE_DISK_BYTES = 2 << 30


class DockerSandboxProvider:
    """Creates ``DockerSandbox``es for one run; share one provider (one client) across worker threads. The
    ``docker`` kind's ``harness.sandbox_providers.SandboxProvider``."""

    isolated = True
    caps_disk = True  # writable space bounded by SandboxSpec.disk_bytes (``disk_mode``)

    def __init__(self, client: DockerClient | None = None, *, run_id: str | None = None, client_timeout: float = DEFAULT_CLIENT_TIMEOUT_S) -> None:
        self._client = client
        self._timeout = client_timeout
        self.run_id = run_id or f"adhoc-{uuid.uuid4().hex[:8]}"
        self._premade_cache: dict[tuple[str, str], bool] = {}
        self._disk_mode: DiskMode | None = None
        self._gate = CreationGate()

    @property
    def client(self) -> DockerClient:
        if self._client is None:
            self._client = images.connect(self._timeout)
        return self._client

    def resolve_image(self, image: str) -> str:
        return images.base_image_tag() if image == "base" else image

    def preflight(self, image: str = "base") -> dict[str, str]:
        """Engine reachable, API >= 1.41, image present, disk free. Raises ``SandboxUnavailable``."""
        with translate_errors("preflight: ping the Docker engine"):
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

    def preflight_images(self, image_keys: Iterable[str]) -> dict[str, str]:
        """``preflight`` of each image key (in sorted order), then ``cleanup_orphans``; returns image key → digest."""
        digests = {image: self.preflight(image).get("image_id", "") for image in sorted(set(image_keys))}
        self.cleanup_orphans()
        return digests

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
        mode = self.disk_mode()
        volume = volume_name(name) if mode == "tmpfs" else None
        try:
            premade = self._premade(tag, spec.workdir)
        except SandboxUnavailable:  # a missing image: create_container below names it (IMAGE_MISSING)
            premade = False
        labels = {**spec.labels, LABEL_SANDBOX: "1", LABEL_RUN: self.run_id, LABEL_INSTANCE: instance_id,
                  LABEL_ATTEMPT: str(attempt), LABEL_OWNER: owner_label()}
        host_config = api.create_host_config(
            network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            pids_limit=spec.pids, mem_limit=spec.mem_bytes, memswap_limit=spec.mem_bytes,
            nano_cpus=int(spec.cpus * 1e9), log_config=docker.types.LogConfig(type="none"),
            ulimits=[docker.types.Ulimit(name="nofile", soft=4096, hard=4096),
                     docker.types.Ulimit(name="fsize", soft=spec.disk_bytes, hard=spec.disk_bytes)],
            **host_config_args(mode, spec.disk_bytes, spec.workdir, volume, parent_owned=premade),
        )
        install_cleanup_handlers()
        if volume is not None:
            create_work_volume(api, volume, spec.disk_bytes, labels)
        try:
            with self._gate.creating(), translate_errors(f"create sandbox from {tag}", kind="CONTAINER_CREATE"):
                try:
                    cid = api.create_container(tag, command=["sleep", "infinity"], user=f"{AGENT_UID}:{AGENT_UID}",
                                               environment=dict(spec.env), labels=labels, name=name,
                                               host_config=host_config)["Id"]
                except docker.errors.ImageNotFound as exc:
                    raise SandboxUnavailable(f"image {tag} is missing. Fix: run `tgsuite images build`.",
                                             kind="IMAGE_MISSING") from exc
                self._gate.discard_if_stopping(api, cid)
        except BaseException:
            if volume is not None:
                remove_volume(api, volume)
            raise
        with LIVE_LOCK:
            LIVE[cid] = api
        box = DockerSandbox(self.client, cid, spec, name, volume)
        try:
            with translate_errors(f"start sandbox {name}", kind="CONTAINER_START"):
                api.start(cid)
                if not premade and volume is None:  # a volume's root is uid 1000's already (mount options)
                    make_dirs(api, cid, spec.workdir)
        except BaseException:
            box.close()
            raise
        return box

    def disk_mode(self) -> DiskMode:
        """How writable space is bounded on this engine (``harness.sandbox_docker_disk``): ``storage-opt`` where
        the storage driver honours a size (btrfs, zfs, devicemapper, overlay2 on xfs), else ``tmpfs`` (the work
        directory a sized tmpfs volume; ``/tmp``, ``/var/tmp`` and the home sized tmpfs mounts). Both add a
        per-file ``RLIMIT_FSIZE`` of ``SandboxSpec.disk_bytes``."""
        if self._disk_mode is None:
            with translate_errors("inspect the Docker engine's storage driver"):
                self._disk_mode = disk_mode_for(self.client.info())
        return self._disk_mode

    def disk_limit(self, spec: SandboxSpec) -> dict[str, Any]:
        """Which disk limit applies to sandboxes made from ``spec`` (recorded in the run manifest)."""
        return disk_report(self.disk_mode(), spec.disk_bytes)

    def _premade(self, tag: str, workdir: str) -> bool:
        """Does the image ship ``workdir`` owned by uid 1000? (base recipe >= 2, or an image built FROM it)."""
        key = (tag, workdir.rstrip("/"))
        if key not in self._premade_cache:
            with translate_errors(f"inspect image {tag}"):
                labels = self.client.api.inspect_image(tag)["Config"].get("Labels") or {}
            recipe = labels.get(images.LABEL_RECIPE, "0")
            self._premade_cache[key] = recipe.isdigit() and int(recipe) >= 2 and key[1] in images.PREMADE_DIRS
        return self._premade_cache[key]

    def stop(self) -> None:  # the run is stopping: no new sandbox; creations in flight finish first (bounded)
        self._gate.stop()

    def cleanup_run(self) -> int:  # a creation in flight finishes first, so the listing sees its container
        self._gate.drain()
        return cleanup_run(self.run_id, self.client)

    def cleanup_orphans(self) -> int:
        return cleanup_orphans(self.client)
