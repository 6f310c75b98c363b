"""Issue #14 item 10: a Docker sandbox's writable space is bounded (``harness.sandbox_docker_disk``).

Pure tests of the mode choice and the mount plan, then Docker tests on this engine: a write past the limit inside
the work directory fails with ENOSPC (a command's ordinary error; a harness-side write raises ``OSError``, never
``SandboxUnavailable``), the writable layer on the host disk does not grow, the work directory survives the restart
after a timeout, and no volume outlives its sandbox.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest

from harness.sandbox import SandboxSpec
from harness.sandbox_docker_disk import disk_mode_for, disk_report, enospc_from, host_config_args

LIMIT = 32 << 20
SPEC = SandboxSpec(mem_bytes=256 << 20, pids=64, disk_bytes=LIMIT)


@pytest.mark.parametrize(("driver", "backing", "mode"), [
    ("overlay2", "extfs", "tmpfs"), ("overlay2", "xfs", "storage-opt"), ("btrfs", "", "storage-opt"),
    ("zfs", "", "storage-opt"), ("devicemapper", "", "storage-opt"), ("vfs", "", "tmpfs"), ("", "", "tmpfs"),
])
def test_disk_mode_follows_the_storage_driver(driver: str, backing: str, mode: str) -> None:
    info = {"Driver": driver, "DriverStatus": [["Backing Filesystem", backing], ["Supports d_type", "true"]]}
    assert disk_mode_for(info) == mode
    assert disk_report(mode, LIMIT)["mode"] == mode  # type: ignore[arg-type]


def test_tmpfs_plan_covers_every_directory_the_agent_can_write() -> None:
    args = host_config_args("tmpfs", LIMIT, "/work/repo", "v1", parent_owned=True)
    assert set(args["tmpfs"]) == {"/tmp", "/var/tmp", "/run/lock", "/home/agent", "/work"}
    assert all(f"size={LIMIT}" in opts for opts in args["tmpfs"].values())
    (mount,) = args["mounts"]
    assert (mount["Target"], mount["Source"], mount["Type"]) == ("/work/repo", "v1", "volume")
    assert "/opt" not in host_config_args("tmpfs", LIMIT, "/opt/x", "v1", parent_owned=False)["tmpfs"]
    assert host_config_args("storage-opt", LIMIT, "/work/repo", None, parent_owned=True) == {
        "storage_opt": {"size": str(LIMIT)}}


def test_only_a_full_work_volume_is_the_callers_enospc() -> None:
    msg = "Error processing tar file(exit status 1): write /work/repo/more.bin: no space left on device"
    ours = enospc_from(msg, "/work/repo")
    assert isinstance(ours, OSError) and ours.errno == errno.ENOSPC
    assert enospc_from(msg.replace("/work/repo/", "/etc/"), "/work/repo") is None  # another file system
    assert enospc_from(msg, None) is None  # storage-opt mode: a full host disk reads the same: stays infra
    assert enospc_from(msg.replace("no space left on device", "permission denied"), "/work/repo") is None


def _size_rw(client: Any, cid: str) -> int:
    """Bytes in the container's writable layer (on the host disk), as ``docker ps --size`` reports them."""
    (row,) = client.api.containers(all=True, filters={"id": cid}, size=True)
    return int(row.get("SizeRw") or 0)


@pytest.mark.docker
def test_writing_past_the_limit_in_the_work_dir_is_stopped(docker_provider: Any, docker_client: Any) -> None:
    """64 MiB into a 32 MiB work directory: ENOSPC for the command, OSError(ENOSPC) for a harness write, the
    host's writable layer unchanged, and the manifest's report names the mode this engine used."""
    mode = docker_provider.disk_mode()
    assert docker_provider.disk_limit(SPEC)["mode"] == mode and docker_provider.disk_limit(SPEC)["bytes"] == LIMIT
    with docker_provider.create(SPEC, instance_id="disk") as box:
        before = _size_rw(docker_client, box.id)
        box.write_file("keep.txt", b"kept")
        ok = box.exec("head -c 8388608 /dev/zero > small && echo ok", timeout=60)
        assert ok.stdout.strip() == "ok", ok
        big = box.exec("for i in 1 2 3 4; do head -c 16777216 /dev/zero > big$i || exit 9; done", timeout=60)
        assert big.returncode == 9 and "No space left on device" in big.stderr, big
        used = box.exec("du -sbc . | tail -1", timeout=30).stdout.split()[0]
        assert int(used) <= LIMIT
        beside = box.exec("head -c 67108864 /dev/zero > ../beside; echo rc=$?", timeout=60)
        assert "rc=0" not in beside.stdout, beside
        with pytest.raises(OSError) as info:
            box.write_file("more.bin", b"x" * (LIMIT // 2))
        assert info.value.errno == errno.ENOSPC
        assert box.read_file("keep.txt") == b"kept"  # the sandbox is still usable
        grown = _size_rw(docker_client, box.id) - before
    if mode == "tmpfs":  # nothing reached the host disk: every write went to the sized tmpfs mounts
        assert grown < 1 << 20, grown


@pytest.mark.docker
def test_work_volume_survives_a_timeout_and_goes_with_the_sandbox(docker_provider: Any, docker_client: Any) -> None:
    if docker_provider.disk_mode() != "tmpfs":
        pytest.skip("this engine caps the writable layer (storage-opt): no work-directory volume")
    with docker_provider.create(SPEC, instance_id="vol") as box:
        assert box.exec("df --output=fstype . | tail -1", timeout=10).stdout.strip() == "tmpfs"
        box.exec("mkdir -p pkg && echo hi > pkg/a.txt && chmod 0750 pkg", timeout=10)
        assert box.exec("sleep 30", timeout=1).timed_out
        res = box.exec("cat pkg/a.txt && stat -c '%u %a' pkg . ", timeout=10)
        assert res.stdout.split() == ["hi", "1000", "750", "1000", "755"], res
        name = box.volume
        assert [v["Name"] for v in docker_client.api.volumes(filters={"name": name})["Volumes"] or []] == [name]
    assert not docker_client.api.volumes(filters={"name": name})["Volumes"]
