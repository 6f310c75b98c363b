"""DockerSandbox adversarial tests (marker ``docker``) and infra-failure classification (some need no engine)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness import sandbox_docker
from harness.sandbox import OutputCapper, SandboxSpec, SandboxUnavailable
from harness.sandbox_docker import LABEL_RUN, Demux, DockerSandbox, pump
from harness.sandbox_docker_provider import DockerSandboxProvider

SMALL = SandboxSpec(mem_bytes=256 << 20, pids=64, cpus=1.0)
BOMB = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.05)\n"
LIST_PROCS = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"


def _procs(box: DockerSandbox) -> list[str]:
    out = box.exec(LIST_PROCS, timeout=10).stdout
    return [line.strip() for line in out.splitlines() if line.strip() and LIST_PROCS[:20] not in line]


def _only_baseline(procs: list[str]) -> bool:
    """init + `sleep infinity` + the listing shell itself."""
    return all(p.startswith(("/sbin/docker-init", "sleep infinity", "sh -c for p in", "tr ")) for p in procs)


def _containers(client: Any, run_id: str) -> list[dict[str, Any]]:
    return client.api.containers(all=True, filters={"label": [f"{LABEL_RUN}={run_id}"]})


# --- engine-free tests ------------------------------------------------------------------------------------


def test_demux_splits_frames_across_arbitrary_chunks() -> None:
    out, err = OutputCapper(1 << 10), OutputCapper(1 << 10)
    frames = b"".join(bytes([s, 0, 0, 0]) + len(p).to_bytes(4, "big") + p for s, p in [(1, b"hello "), (2, b"oops"), (1, b"world")])
    demux = Demux(out, err)
    for i in range(0, len(frames), 3):
        demux.feed(frames[i : i + 3])
    assert out.result() == ("hello world", False) and err.result() == ("oops", False)


def test_pump_stops_at_the_host_deadline_when_the_stream_never_ends() -> None:
    a, b = socket.socketpair()
    try:
        start = time.monotonic()
        assert pump(a, None, Demux(OutputCapper(10), OutputCapper(10)), time.monotonic() + 0.5) is False
        assert 0.4 < time.monotonic() - start < 3
    finally:
        a.close()
        b.close()


def test_dead_daemon_socket_is_sandbox_unavailable(tmp_path: Path) -> None:
    import docker

    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-daemon.sock", version="1.41", timeout=2)
    provider = DockerSandboxProvider(client, run_id="dead")
    with pytest.raises(SandboxUnavailable) as info:
        provider.preflight()
    assert info.value.kind == "DOCKER_DAEMON"
    with pytest.raises(SandboxUnavailable):
        provider.create(SMALL)
    box = DockerSandbox(client, "0" * 64, SMALL, "engine-gone")  # a sandbox whose engine went away
    for call in (lambda: box.exec("true", timeout=5), lambda: box.read_file("a"), lambda: box.write_file("a", b"x"),
                 lambda: box.copy_in(tmp_path, "."), lambda: box.copy_out(".", tmp_path / "out")):
        with pytest.raises(SandboxUnavailable):
            call()


def test_hung_daemon_read_timeout_is_sandbox_unavailable(tmp_path: Path) -> None:
    """A daemon that accepts but never answers: the client timeout fires and is classed infra, not a result."""
    import docker

    path = str(tmp_path / "hung.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        client = docker.DockerClient(base_url=f"unix://{path}", version="1.41", timeout=1)
        start = time.monotonic()
        with pytest.raises(SandboxUnavailable) as info:
            DockerSandboxProvider(client, run_id="hung").preflight()
        assert info.value.kind == "DOCKER_DAEMON" and time.monotonic() - start < 10
    finally:
        stop.set()
        thread.join()
        server.close()
        for s in accepted:
            s.close()


# --- engine tests -----------------------------------------------------------------------------------------


@pytest.mark.docker
def test_exec_user_files_and_limits(docker_provider: DockerSandboxProvider, tmp_path: Path) -> None:
    with docker_provider.create(SMALL, instance_id="basic") as box:
        res = box.exec("id -u; pwd; echo err >&2; exit 3", timeout=10, env={"X": "1"})
        assert (res.returncode, res.stdout, res.stderr) == (3, "1000\n/work/repo\n", "err\n")
        assert box.exec(["cat"], timeout=10, input=b"xyz" * 50_000).stdout == "xyz" * 50_000
        assert box.exec("pwd", timeout=10, cwd="no/such/dir").returncode == 126  # the agent's error, not infra
        assert box.exec(["no-such-program"], timeout=10).returncode == 127
        status = box.exec("grep -E '^(NoNewPrivs|CapEff)' /proc/self/status", timeout=10).stdout.split()
        assert status == ["CapEff:", "0000000000000000", "NoNewPrivs:", "1"]
        box.write_file("pkg/deep/mod.py", b"X = 1\n")
        assert box.read_file("/work/repo/pkg/deep/mod.py") == b"X = 1\n"
        assert box.exec("stat -c %u pkg/deep/mod.py pkg", timeout=10).stdout.split() == ["1000", "1000"]
        with pytest.raises(FileNotFoundError):
            box.read_file("missing.txt")
        box.exec("ln -s pkg/deep/mod.py link.py && ln -s loop1 loop2 && ln -s loop2 loop1", timeout=10)
        assert box.read_file("link.py") == b"X = 1\n"
        with pytest.raises(FileNotFoundError, match="too many links"):
            box.read_file("loop1")
        box.exec("echo x > plain", timeout=10)
        with pytest.raises(NotADirectoryError):  # the caller's path mistake, not an engine failure
            box.write_file("plain/sub.txt", b"x")
        with pytest.raises(ValueError, match="max_bytes"):
            box.read_file("pkg/deep/mod.py", max_bytes=2)
        src = tmp_path / "src"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "f.txt").write_text("hi")
        box.copy_in(src, "copied")
        assert box.exec("cat copied/sub/f.txt && echo more > copied/new.txt", timeout=10).stdout == "hi"
        box.copy_out("copied", tmp_path / "back")
        assert (tmp_path / "back" / "sub" / "f.txt").read_text() == "hi"
        assert (tmp_path / "back" / "new.txt").read_text() == "more\n"


@pytest.mark.docker
def test_no_network_inside(docker_provider: DockerSandboxProvider) -> None:
    script = textwrap.dedent(
        """
        import os, socket
        print(sorted(os.listdir('/sys/class/net')))
        for target in [('1.1.1.1', 53), ('10.0.0.1', 80)]:
            try:
                socket.create_connection(target, timeout=3); print('CONNECTED')
            except OSError as e:
                print('refused', e.errno)
        try:
            socket.getaddrinfo('deb.debian.org', 80); print('RESOLVED')
        except socket.gaierror:
            print('no dns')
        """
    )
    with docker_provider.create(SMALL, instance_id="net") as box:
        out = box.exec(["python3", "-c", script], timeout=30).stdout
    assert out.splitlines()[0] == "['lo']"
    assert "CONNECTED" not in out and "RESOLVED" not in out and "no dns" in out


@pytest.mark.docker
def test_writes_outside_the_work_dir_are_impossible(docker_provider: DockerSandboxProvider) -> None:
    with docker_provider.create(SMALL, instance_id="fs") as box:
        # /etc/hosts, /etc/resolv.conf and /etc/hostname are the only files the engine bind-mounts from the host
        for path in ("/etc/passwd", "/usr/bin/python3", "/newfile", "/root/x", "/proc/sys/kernel/hostname",
                     "/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/sys/fs/cgroup/pids/pids.max"):
            res = box.exec(["sh", "-c", f"echo pwned > {path}"], timeout=10)
            assert res.returncode != 0, path
        assert "pwned" not in box.exec("cat /etc/passwd", timeout=10).stdout
        assert box.exec("touch /work/repo/ok && echo yes", timeout=10).stdout == "yes\n"


@pytest.mark.docker
def test_fork_bomb_is_contained_by_the_pids_limit(docker_provider: DockerSandboxProvider, docker_client: Any) -> None:
    with docker_provider.create(SMALL, instance_id="bomb") as box:
        seen: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                stats = docker_client.api.stats(box.id, stream=False, one_shot=True)
                seen.append(int((stats.get("pids_stats") or {}).get("current", 0)))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.monotonic()
        try:  # every process forks forever and never exits on failure, so the bomb saturates the limit
            res = box.exec(["python3", "-c", BOMB], timeout=4)
        finally:
            stop.set()
            sampler.join()
        assert res.timed_out and time.monotonic() - start < 3 + 2 + 5 + 5
        assert 50 < max(seen) <= 64, seen  # the bomb ran, and never past the limit
        assert _only_baseline(_procs(box))
        assert box.exec("echo alive", timeout=10).stdout == "alive\n"
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


@pytest.mark.docker
def test_memory_hog_is_killed_and_reported_oom(docker_provider: DockerSandboxProvider) -> None:
    with docker_provider.create(SandboxSpec(mem_bytes=128 << 20, pids=64), instance_id="oom") as box:
        res = box.exec(["python3", "-c", "b = bytearray(1 << 30); print('survived')"], timeout=30)
        assert res.oom_killed and res.returncode == 137 and not res.timed_out
        assert "survived" not in res.stdout and "out-of-memory" in res.stderr
        ok = box.exec("echo fine", timeout=10)
        assert ok.stdout == "fine\n" and not ok.oom_killed
        assert box.exec("exit 137", timeout=10).oom_killed is False  # a plain 137 is not an OOM


@pytest.mark.docker
def test_infinite_loop_killed_at_timeout_with_no_survivor(docker_provider: DockerSandboxProvider) -> None:
    with docker_provider.create(SMALL, instance_id="loop") as box:
        box.write_file("keep.txt", b"kept")
        start = time.monotonic()
        res = box.exec("setsid sh -c 'while :; do :; done' & trap '' TERM; while :; do :; done", timeout=2)
        assert res.timed_out and res.returncode in (124, 137)
        assert time.monotonic() - start < 2 + 2 + 5 + 5
        assert _only_baseline(_procs(box))
        assert box.read_file("keep.txt") == b"kept"  # the restart keeps the filesystem


@pytest.mark.docker
def test_host_side_deadline_kills_the_container(docker_provider: DockerSandboxProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the outer deadline fire before the inner `timeout` can: the container is killed and restarted."""
    monkeypatch.setattr(sandbox_docker, "OUTER_SLACK_S", -sandbox_docker.KILL_GRACE_S - 2.5)
    with docker_provider.create(SMALL, instance_id="outer") as box:
        start = time.monotonic()
        res = box.exec("sleep 60", timeout=4)
        assert res.timed_out and res.returncode == -9 and time.monotonic() - start < 12  # -9: the outer deadline (1.5 s) fired, not the inner timeout (4 s, rc 124)
        assert _only_baseline(_procs(box))


@pytest.mark.docker
def test_100_mb_of_output_is_truncated_head_and_tail(docker_provider: DockerSandboxProvider) -> None:
    spec = SandboxSpec(mem_bytes=256 << 20, pids=64, output_cap_bytes=1 << 16)
    with docker_provider.create(spec, instance_id="out") as box:
        script = "import sys; w=sys.stdout.write; w('HEAD'); [w('x' * 1_000_000) for _ in range(100)]; w('TAIL')"
        res = box.exec(["python3", "-c", script], timeout=60)
    assert res.returncode == 0 and res.truncated and not res.timed_out
    assert res.stdout.startswith("HEAD") and res.stdout.endswith("TAIL") and len(res.stdout) < (1 << 16) + 100


@pytest.mark.docker
def test_container_killed_or_paused_underneath_is_sandbox_unavailable(docker_provider: DockerSandboxProvider, docker_client: Any) -> None:
    with docker_provider.create(SMALL, instance_id="paused") as box:
        docker_client.api.pause(box.id)
        try:
            with pytest.raises(SandboxUnavailable):
                box.exec("true", timeout=5)
        finally:
            docker_client.api.unpause(box.id)
        assert box.exec("echo back", timeout=5).stdout == "back\n"
    with docker_provider.create(SMALL, instance_id="killed") as box:
        threading.Timer(1.0, lambda: docker_client.api.kill(box.id)).start()
        with pytest.raises(SandboxUnavailable):
            box.exec("sleep 20", timeout=30)  # killed mid-exec: infra, never "exit 137"
        with pytest.raises(SandboxUnavailable):
            box.exec("true", timeout=5)
        with pytest.raises(SandboxUnavailable):
            box.read_file("x")


_CHILD = """
import sys, time
from harness.sandbox import SandboxSpec
from harness.sandbox_docker_provider import DockerSandboxProvider
box = DockerSandboxProvider(run_id=sys.argv[1]).create(SandboxSpec(mem_bytes=128 << 20, pids=32))
print("ready", flush=True)
time.sleep(120)
"""


def _default_signals() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
def test_interrupted_session_leaves_no_container(docker_client: Any, base_image: str, sig: int) -> None:
    run_id = f"pytest-sig-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # the child starts with the default SIGINT/SIGTERM dispositions whatever the test process inherited (a signal
    # ignored here would be ignored there too, and the handler under test chains to the previous disposition)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, run_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env, preexec_fn=_default_signals)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        assert len(_containers(docker_client, run_id)) == 1
        child.send_signal(sig)
        try:  # the handler removes the container through the engine first: allow a slow engine, then say why
            child.wait(timeout=90)
        except subprocess.TimeoutExpired:
            child.kill()
            _, err = child.communicate(timeout=10)
            pytest.fail(f"the child did not exit within 90 s of {signal.Signals(sig).name}; its stderr:\n"
                        f"{err.decode(errors='replace')[-3000:]}")
        if sig == signal.SIGKILL:  # no handler can run: the next run's orphan sweep removes it
            assert len(_containers(docker_client, run_id)) == 1
            assert sandbox_docker.cleanup_orphans(docker_client) >= 1
        assert _containers(docker_client, run_id) == []
    finally:
        child.kill()
        sandbox_docker.cleanup_run(run_id, docker_client)


@pytest.mark.docker
def test_cleanup_orphans_spares_live_owners(docker_provider: DockerSandboxProvider, docker_client: Any) -> None:
    with docker_provider.create(SMALL, instance_id="alive") as box:
        sandbox_docker.cleanup_orphans(docker_client)
        assert box.exec("echo still here", timeout=5).stdout == "still here\n"


@pytest.mark.docker
def test_preflight_and_missing_image(docker_provider: DockerSandboxProvider) -> None:
    info = docker_provider.preflight()
    assert info["api_version"] >= "1.41" and info["image_id"].startswith("sha256:")
    with pytest.raises(SandboxUnavailable) as exc:
        docker_provider.create(SandboxSpec(image="tgsuite/does-not-exist:nope"))
    assert exc.value.kind == "IMAGE_MISSING"
    with pytest.raises(SandboxUnavailable) as exc:
        docker_provider.preflight(image="tgsuite/does-not-exist:nope")
    assert exc.value.kind == "IMAGE_MISSING"


@pytest.mark.parametrize("ci", ["true", ""])
def test_docker_tests_fail_in_ci_and_skip_elsewhere_without_an_engine(tmp_path: Path, ci: str) -> None:
    """conftest.py: no engine => docker-marked tests FAIL when CI=true (a broken set-up must not go green)."""
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock", "CI": ci}
    target = f"{Path(__file__).resolve()}::test_preflight_and_missing_image"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", target],
                          capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[2])
    if ci:
        assert proc.returncode == 1 and "CI=true but Docker is not usable" in proc.stdout, proc.stdout[-2000:]
    else:
        assert proc.returncode == 0 and "1 skipped" in proc.stdout and "Docker not usable" in proc.stdout


@pytest.mark.docker
@pytest.mark.parametrize("workdir", ["/work/repo", "/opt/testbed/repo"])
def test_work_dir_is_owned_by_the_agent(docker_provider: DockerSandboxProvider, workdir: str) -> None:
    """The default work dir ships in the image; any other one is created for uid 1000 at start."""
    spec = SandboxSpec(mem_bytes=128 << 20, pids=32, workdir=workdir)
    with docker_provider.create(spec, instance_id="wd") as box:
        res = box.exec("pwd && touch made && stat -c %u .", timeout=10)
        assert res.returncode == 0 and res.stdout.split() == [workdir, "1000"], res
