"""The Ray executor (``run_eval(executor="ray")``, ``tgsuite eval --executor ray``): on a local two-node Ray cluster
on loopback, the same episodes and grades as the thread executor, the same run-directory files, and the same
resume; plus its error paths and shipping of attempts, which need no cluster."""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.rundir import read_attempt_log, result_sha256
from harness.runner import run_eval
from harness.runner_episode import EpisodeJob
from harness.runner_ray import RAY_MISSING, RayPool, ShippedAttempt, import_ray, pack_snapshots, write_attempt
from harness.schema import EpisodeResult, TaskSet
from tests.harness_fakes import FakeFactory, FixPolicy, WhereFinishPolicy, make_calc_task

ROOT = Path(__file__).resolve().parents[2]
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (pip install "
                               "'tgsuite[ray]')")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A head and one worker node, one CPU each, every Ray server on 127.0.0.1; the address to join."""
    mp = pytest.MonkeyPatch()
    # Ray turns 127.0.0.1 into this machine's outside address unless "clusters" are off; off, every server it
    # starts binds to loopback (checked below). Its workers import this checkout (PYTHONPATH) like the tests.
    mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
    mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    from ray.cluster_utils import Cluster

    # Ray's in-process head node and its driver install SIGTERM handlers (sys.exit) and never put the old ones back
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = None
    try:
        for tries in (1, 2):  # Ray gives a node 30 s to register (fixed in ray/_private/node.py); once more if slow
            cluster = Cluster(initialize_head=False)
            try:
                cluster.add_node(num_cpus=1, include_dashboard=False)
                cluster.add_node(num_cpus=1)
                cluster.wait_for_nodes()
                break
            except Exception:
                cluster.shutdown()
                if tries == 2:
                    raise
        assert cluster is not None
        yield cluster.address
    finally:
        if cluster is not None:
            cluster.shutdown()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        mp.undo()


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("mini") / "tasks"
    make_mini(out, split="heldout", repos=2, tasks_per_repo=1, seed=0)
    return load_task_set(out)


def _eval(ts: TaskSet, out: Path, executor: str, address: str | None = None, *, kind: str = "local",
          seeds: tuple[int, ...] = (0, 1)) -> list[EpisodeResult]:
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxSpec

    spec = SandboxSpec(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    with TaskSandboxFactory(ts, kind=kind, run_id=f"pytest-ray-{out.parent.name}"[:60], spec=spec) as factory:  # type: ignore[arg-type]
        factory.preflight()
        return run_eval(ts, {"oracle": "oracle", "null": "null"}, list(seeds), out, sandbox_factory=factory,
                        workers=2, executor=executor, ray_address=address)  # type: ignore[arg-type]


def _key(r: EpisodeResult) -> tuple:
    g = r.grade
    return (r.instance_id, r.arm, r.seed, r.attempt, r.status, r.failure_class, r.resolved, r.behaviour_ok,
            r.joint_ok, [b.model_dump() for b in r.behaviour],
            None if g is None else (g.resolved, g.valid, g.reason, g.f2p, g.p2p, g.patch_applied))


def _attempt_files(out: Path) -> dict[str, object]:
    """Every path under ``episodes/``; the contents that carry no time or sandbox path: the patch, the trajectory's
    messages (without their durations) and the grade (without its duration)."""
    got: dict[str, object] = {}
    for p in sorted((out / "episodes").rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.name == "patch.diff":
            got[rel] = p.read_bytes()
        elif p.name == "trajectory.jsonl":
            got[rel] = [{k: v for k, v in json.loads(x).items() if k != "duration_s"}
                        for x in p.read_text().splitlines()[1:]]  # line 1, the header, has wall-clock timings
        elif p.name == "grade.json":
            got[rel] = {k: v for k, v in json.loads(p.read_text()).items() if k != "duration_s"}
        else:
            got[rel] = p.is_file()
    return got


@needs_ray
def test_ray_executor_matches_threads_and_resumes(ray_cluster: str, mini: TaskSet, tmp_path: Path) -> None:
    import ray

    threads = _eval(mini, tmp_path / "threads", "thread")
    on_ray = _eval(mini, tmp_path / "ray", "ray", ray_cluster)
    assert len(on_ray) == 2 * 2 * len(mini.instances) == 8
    assert [_key(r) for r in on_ray] == [_key(r) for r in threads]
    assert all(r.resolved for r in on_ray if r.arm == "oracle") and not any(r.resolved for r in on_ray
                                                                            if r.arm == "null")
    assert _attempt_files(tmp_path / "ray") == _attempt_files(tmp_path / "threads")
    assert (tmp_path / "ray" / "results.jsonl").read_text().count("\n") == 8
    assert len(read_attempt_log(tmp_path / "ray") or []) == 8  # the driver logged every attempt it wrote

    # resume: one attempt crashed (no result.json), one episode never ran; only those two run again
    ep = sorted((tmp_path / "ray" / "episodes").glob("*/*/s*"))
    (ep[0] / "a0" / "result.json").unlink()
    gone = ep[1]
    import shutil

    shutil.rmtree(gone)
    kept = {p: p.read_bytes() for p in (tmp_path / "ray" / "episodes").rglob("result.json")}
    again = _eval(mini, tmp_path / "ray", "ray", ray_cluster)
    assert [_key(r) for r in again] == [_key(r) for r in threads]
    assert all(p.read_bytes() == data for p, data in kept.items())  # finished episodes were not re-run
    assert (ep[0] / "a0" / "result.json").is_file() and (gone / "a0" / "result.json").is_file()
    assert not list((tmp_path / "ray" / "episodes").glob("*/*/s*/a1"))  # in place, no new attempt

    # the cluster: two nodes, both on loopback
    ray.init(address=ray_cluster)
    try:
        nodes = [n for n in ray.nodes() if n["Alive"]]
    finally:
        ray.shutdown()
    assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}


@needs_ray
@pytest.mark.docker
def test_ray_executor_in_docker_matches_threads(ray_cluster: str, mini: TaskSet, tmp_path: Path) -> None:
    threads = _eval(mini, tmp_path / "threads" / "run", "thread", kind="docker", seeds=(0,))
    on_ray = _eval(mini, tmp_path / "ray" / "run", "ray", ray_cluster, kind="docker", seeds=(0,))
    assert [_key(r) for r in on_ray] == [_key(r) for r in threads] and len(on_ray) == 2 * len(mini.instances)
    assert all(r.resolved for r in on_ray if r.arm == "oracle") and all(r.scored for r in on_ray)
    assert json.loads((tmp_path / "ray" / "run" / "manifest.json").read_text())["sandbox"] == "docker"


@needs_ray
def test_episodes_run_in_ray_actors_on_both_nodes(ray_cluster: str, mini: TaskSet, tmp_path: Path) -> None:
    from harness.rundir import read_trajectory
    from harness.runner_sandbox import TaskSandboxFactory

    with TaskSandboxFactory(mini, kind="local", run_id="pytest-ray-where") as factory:
        factory.preflight()
        res = run_eval(mini, {"where": WhereFinishPolicy()}, [0, 1, 2, 3], tmp_path / "run", sandbox_factory=factory,
                       workers=2, executor="ray", ray_address=ray_cluster)
    assert len(res) == 4 * len(mini.instances)
    said = [read_trajectory(p).messages[-2].tool_calls[0].arguments["message"].split()
            for p in sorted((tmp_path / "run" / "episodes").rglob("trajectory.jsonl"))]
    assert len(said) == len(res) and all(int(w[1]) != os.getpid() for w in said)  # not in this process
    assert len({w[3] for w in said}) == 2, said  # two actors of one CPU each: one on each one-CPU node


STOP_SCRIPT = """
import os, sys
sys.path.insert(0, {root!r})
from harness.runner import run_eval, RunInterrupted
from harness.runner_sandbox import TaskSandboxFactory
from harness.tasks import load_task_set
from tests.harness_fakes import WhereFinishPolicy
ts = load_task_set({tasks!r})
with TaskSandboxFactory(ts, kind="local", run_id="pytest-ray-stop") as factory:
    try:
        run_eval(ts, {{"where": WhereFinishPolicy(sleep_s=0.5)}}, list(range(6)), {out!r}, sandbox_factory=factory,
                 workers=2, executor="ray", ray_address={address!r})
    except RunInterrupted as exc:
        print("INTERRUPTED", flush=True)
        os._exit(exc.exit_code)
"""


@needs_ray
def test_sigint_stops_a_ray_run_and_it_resumes(ray_cluster: str, mini: TaskSet, tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    code = STOP_SCRIPT.format(root=str(ROOT), tasks=mini.path, out=str(out), address=ray_cluster)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list(out.glob("episodes/*/*/s*/a*/result.json"))) < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=90)
    stop_s = time.monotonic() - t0
    done = sorted(out.glob("episodes/*/*/s*/a*/result.json"))
    assert proc.returncode == 130 and "INTERRUPTED" in stdout, (proc.returncode, stdout)
    assert 2 <= len(done) < 12 and len((out / "results.jsonl").read_text().splitlines()) == len(done)
    assert stop_s < 60, f"stopping took {stop_s:.1f} s"
    from harness.runner_sandbox import TaskSandboxFactory

    with TaskSandboxFactory(mini, kind="local", run_id="pytest-ray-resume") as factory:
        res = run_eval(mini, {"where": WhereFinishPolicy()}, list(range(6)), out, sandbox_factory=factory,
                       workers=2, executor="ray", ray_address=ray_cluster)
    print(f"\nray stop: SIGINT stopped the run in {stop_s:.2f} s with {len(done)}/12 done")
    assert len(res) == 12 and all(r.attempt == 0 and r.scored for r in res)


@needs_ray
def test_ray_executor_needs_a_task_sandbox_factory(ray_cluster: str, tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path / "repos", "calc-0")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="f" * 64, instances=[inst])
    with pytest.raises(ValueError, match="TaskSandboxFactory"):
        run_eval(ts, {"fix": FixPolicy()}, [0], tmp_path / "run", sandbox_factory=FakeFactory({"calc-0": repo}),
                 executor="ray", ray_address=ray_cluster)


def test_missing_ray_is_a_clear_error_and_threads_still_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_import = builtins.__import__

    def no_ray(name: str, *args: object, **kwargs: object) -> object:
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ValueError, match=r"pip install 'tgsuite\[ray\]'"):
        import_ray()
    assert "pip install 'tgsuite[ray]'" in RAY_MISSING
    inst, repo = make_calc_task(tmp_path / "repos", "calc-0")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="f" * 64, instances=[inst])
    res = run_eval(ts, {"fix": FixPolicy()}, [0], tmp_path / "run", sandbox_factory=FakeFactory({"calc-0": repo}))
    assert res[0].resolved
    with pytest.raises(ValueError, match="executor"):
        run_eval(ts, {"fix": FixPolicy()}, [0], tmp_path / "run2", sandbox_factory=FakeFactory({"calc-0": repo}),
                 executor="dask")  # type: ignore[arg-type]


def _job(tmp_path: Path) -> EpisodeJob:
    inst, _ = make_calc_task(tmp_path / "repos", "calc-0")
    return EpisodeJob(inst, "fix", 0, 0, 1)


def test_write_attempt_writes_result_last_and_stays_inside(tmp_path: Path) -> None:
    job = _job(tmp_path)
    res = EpisodeResult(run_id="r", instance_id="calc-0", repo="r", cluster="r", arm="fix", policy="fix", seed=0,
                        attempt=0, status="ok", failure_class="none", resolved=True)
    out = tmp_path / "run"
    got = write_attempt(out, job, ShippedAttempt(files={"result.json": res.model_dump_json().encode(),
                                                        "grade/grade.json": b"{}", "patch.diff": b"x"},
                                                 controls={"c.json": b"new"}))
    d = out / "episodes" / "calc-0" / "fix" / "s0" / "a0"
    assert got == res and (d / "grade" / "grade.json").read_bytes() == b"{}" and (d / "patch.diff").read_bytes() == b"x"
    assert (out / "controls" / "c.json").read_bytes() == b"new"
    write_attempt(out, job, ShippedAttempt(files={"result.json": res.model_dump_json().encode()},
                                           controls={"c.json": b"other"}))
    assert (out / "controls" / "c.json").read_bytes() == b"new"  # an existing control is never replaced
    logged = read_attempt_log(out)  # the driver logs each result.json it writes, its exact bytes
    assert logged is not None and [x.result_sha256 for x in logged] == [result_sha256(res.model_dump_json().encode())] * 2
    with pytest.raises(ValueError, match="leaves"):
        write_attempt(out, job, ShippedAttempt(files={"result.json": b"{}", "../../x": b""}, controls={}))
    with pytest.raises(ValueError, match="result.json"):
        write_attempt(tmp_path / "r2", job, ShippedAttempt(files={"patch.diff": b""}, controls={}))
    assert not (tmp_path / "r2" / "episodes" / "calc-0" / "fix" / "s0" / "a0" / "patch.diff").exists()


def test_image_digests_must_agree_and_snapshots_must_exist(tmp_path: Path, mini: TaskSet) -> None:
    RayPool._check_digests({"img": "sha256:a"}, [{"img": "sha256:a"}])
    with pytest.raises(ValueError, match="worker 1 has image img"):
        RayPool._check_digests({"img": "sha256:a"}, [{"img": "sha256:a"}, {"img": "sha256:b"}])
    assert len(pack_snapshots(mini)) > 0
    with pytest.raises(ValueError, match="no snapshot"):
        pack_snapshots(mini.model_copy(update={"path": str(tmp_path)}))


@needs_ray
def test_cli_eval_on_ray(ray_cluster: str, mini: TaskSet, tmp_path: Path) -> None:
    from tgsuite.cli import main

    out = tmp_path / "run"
    assert main(["eval", "--tasks", mini.path, "--policy", "oracle", "--out", str(out), "--sandbox", "local",
                 "--workers", "2", "--executor", "ray", "--ray-address", ray_cluster, "--no-progress"]) == 0
    got = [EpisodeResult.model_validate_json(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(got) == len(mini.instances) and all(r.resolved for r in got)  # oracle built on the workers


def test_cli_ray_flags(tmp_path: Path, mini: TaskSet, capsys: pytest.CaptureFixture[str]) -> None:
    from tgsuite.cli import main
    from tgsuite.commands.eval import ray_arms

    policies = {"oracle": object(), "m": object()}
    got = ray_arms(policies, {"oracle": "oracle", "m": "hf:ckpt"})
    assert got["oracle"] == "oracle" and got["m"] is policies["m"]  # scripted: built on the worker
    # a per-arm request cap cannot hold across actors (and its lock does not pickle): refused before any request
    assert main(["eval", "--tasks", mini.path, "--policy", "openai:http://127.0.0.1:9/v1#m", "--out",
                 str(tmp_path / "rc"), "--executor", "ray", "--max-concurrency", "2", "--sandbox", "local"]) == 2
    err = capsys.readouterr().err
    assert "--max-concurrency with --executor ray" in err and "fix:" in err and "preflight" not in err
    assert main(["eval", "--tasks", mini.path, "--policy", "null", "--out", str(tmp_path / "r"),
                 "--ray-address", "127.0.0.1:1"]) == 2
    assert "--executor ray" in capsys.readouterr().err and not (tmp_path / "r").exists()
