"""Fault injection (issue #14 items 6 and 7, and its done-when): SIGINT and SIGTERM stop a run promptly, remove
its containers, write what finished and leave a run that resumes; ``docker kill`` of a live container and
``kill -9`` of the runner lose nothing and score no infrastructure failure as the model's. Each test prints its
counts (``episodes lost``, ``infra scored``) and asserts both are 0. Concurrent runs stay apart (unique run ids,
cleanup of this process's containers only).

Every policy here fixes its task, so an episode that is not ``resolved`` in the end is an infrastructure error
scored as an agent failure (``infra scored``) and a planned episode without a result is ``lost``.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.run_control import run_id_for, sandbox_run_id
from harness.runner import run_eval
from harness.schema import EpisodeResult, TaskSet
from tests.harness_fakes import FakeFactory, FixPolicy, make_calc_task

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys, pickle
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from harness.runner import run_eval, RunInterrupted
    from tests.harness_fakes import FakeFactory, FixPolicy
    ts, repos = pickle.loads(Path({state!r}).read_bytes())
    try:
        run_eval(ts, {{"fix": FixPolicy(sleep_s={sleep})}}, [0, 1], {out!r}, sandbox_factory=FakeFactory(repos),
                 workers=2)
    except RunInterrupted as exc:
        print("INTERRUPTED", exc.exit_code, flush=True)
        import os
        os._exit(exc.exit_code)  # as `tgsuite eval` does: in-flight threads are not waited for
""")


def _task_set(tmp: Path, n: int) -> tuple[TaskSet, dict[str, Path]]:
    insts, repos = [], {}
    for k in range(n):
        inst, repo = make_calc_task(tmp / "repos", f"calc-{k}")
        insts.append(inst)
        repos[inst.instance_id] = repo
    return TaskSet(name="calc", path=str(tmp), sha256="f" * 64, instances=insts), repos


def _results(out: Path) -> list[Path]:
    return sorted(out.glob("episodes/*/*/s*/a*/result.json"))


def counts(results: list[EpisodeResult], planned: int) -> dict[str, int]:
    """``lost``: planned episodes without a result; ``infra_scored``: scored episodes that did not resolve
    although their policy fixes the task (an infrastructure error counted as the model's)."""
    return {"planned": planned, "lost": planned - len(results),
            "infra_scored": sum(r.scored and not r.resolved for r in results),
            "infra_retried": sum(r.attempt > 0 for r in results)}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_promptly_writes_results_and_resumes(tmp_path: Path, sig: signal.Signals) -> None:
    ts, repos = _task_set(tmp_path, 8)
    state = tmp_path / "state.pkl"
    state.write_bytes(pickle.dumps((ts, repos)))
    out = tmp_path / "run"
    code = SCRIPT.format(root=str(ROOT), state=str(state), out=str(out), sleep=0.3)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(_results(out)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=60)
    stop_s = time.monotonic() - t0
    done = len(_results(out))
    assert proc.returncode == 128 + sig and "INTERRUPTED" in stdout, (proc.returncode, stdout)
    assert done < 16, "the stop must land mid-run"
    assert stop_s < 15, f"stopping took {stop_s:.1f} s"
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == done, "results.jsonl holds what finished"
    res = run_eval(ts, {"fix": FixPolicy()}, [0, 1], out, sandbox_factory=FakeFactory(repos), workers=2)
    c = counts(res, 16)
    print(f"\nfault injection {sig.name}: stopped in {stop_s:.2f} s with {done}/16 done; after resume {c}")
    assert c["lost"] == 0 and c["infra_scored"] == 0 and len(_results(out)) == 16


def test_run_ids_are_unique_and_kept_on_resume(tmp_path: Path) -> None:
    a, b = tmp_path / "x" / "run", tmp_path / "y" / "run"
    assert sandbox_run_id(a) != sandbox_run_id(b) and sandbox_run_id(a) != sandbox_run_id(a)
    assert run_id_for(a) != run_id_for(b) and run_id_for(a).startswith("run-")
    ts, repos = _task_set(tmp_path, 1)
    res = run_eval(ts, {"fix": FixPolicy()}, [0], a, sandbox_factory=FakeFactory(repos))
    assert run_id_for(a) == res[0].run_id != "run"  # the manifest keeps it; a resume reuses it


# ---------------------------------------------------------------- Docker

DOCKER_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from harness.policies.scripted import OraclePolicy
    from harness.runner import run_eval, RunInterrupted
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxSpec
    from harness.tasks import load_task_set

    class Slow(OraclePolicy):
        name = "oracle"
        def act(self, messages, **kw):
            time.sleep(0.5)
            return super().act(messages, **kw)

    ts = load_task_set({tasks!r})
    spec = SandboxSpec(env={{"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}})
    with TaskSandboxFactory(ts, kind="docker", run_id={run_id!r}, spec=spec) as fac:
        fac.preflight()
        try:
            run_eval(ts, {{"oracle": Slow(ts)}}, [0, 1], {out!r}, sandbox_factory=fac, workers=2)
        except RunInterrupted as exc:
            fac.close()
            print("INTERRUPTED", flush=True)
            import os
            os._exit(exc.exit_code)
""")


def _containers(client, run_id: str) -> list[dict]:
    return client.api.containers(all=True, filters={"label": [f"tgsuite.run_id={run_id}"]})


def _wait(cond, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory):
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("fault") / "tasks"
    make_mini(out, split="heldout", repos=3, tasks_per_repo=1, seed=3)
    return load_task_set(out)


@pytest.mark.docker
def test_docker_kill_kill9_sigint_resume(mini: TaskSet, tmp_path: Path, docker_client) -> None:
    out, planned = tmp_path / "run", 2 * len(mini.instances)
    run_ids = [f"pytest-fault-{k}-{os.getpid()}" for k in range(3)]

    def start(k: int) -> subprocess.Popen:
        code = DOCKER_SCRIPT.format(root=str(ROOT), tasks=mini.path, out=str(out), run_id=run_ids[k])
        return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)

    killed = {"docker_kill": 0}
    proc = start(0)  # 1) docker kill a live container mid-episode, then kill -9 the runner
    def kill_one() -> bool:  # an agent container; a short-lived one may be gone before the kill lands
        import docker

        for c in _containers(docker_client, run_ids[0]):
            if (c.get("Labels") or {}).get("tgsuite.role") == "agent" and c.get("State") == "running":
                try:
                    docker_client.api.kill(c["Id"])
                except docker.errors.APIError:
                    continue
                killed["docker_kill"] += 1
                return True
        return proc.poll() is not None

    _wait(kill_one)
    _wait(lambda: len(_results(out)) >= 2 or proc.poll() is not None)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    after_kill9 = len(_results(out))
    proc = start(1)  # 2) resume, then SIGINT
    _wait(lambda: len(_results(out)) > after_kill9 or proc.poll() is not None)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=90)
    stop_s = time.monotonic() - t0
    left = [c for rid in run_ids[1:2] for c in _containers(docker_client, rid)]
    proc = start(2)  # 3) resume to the end
    stdout3, _ = proc.communicate(timeout=600)
    from harness.runner import rebuild_results

    res = rebuild_results(out)
    c = counts(res, planned)
    print(f"\nfault injection docker: docker kill {killed['docker_kill']}, kill -9 after {after_kill9} results, "
          f"SIGINT stopped in {stop_s:.2f} s ({'INTERRUPTED' in stdout}); containers left {len(left)}; {c}")
    assert killed["docker_kill"] == 1 and "INTERRUPTED" in stdout and stop_s < 30 and not left
    assert proc.returncode == 0, stdout3
    assert c["lost"] == 0 and c["infra_scored"] == 0


@pytest.mark.docker
def test_cleanup_removes_only_this_process_containers(mini: TaskSet, tmp_path: Path) -> None:
    from harness.runner_sandbox import TaskSandboxFactory

    a = TaskSandboxFactory(mini, kind="docker", run_id=sandbox_run_id(tmp_path / "one" / "run"))
    b = TaskSandboxFactory(mini, kind="docker", run_id=sandbox_run_id(tmp_path / "two" / "run"))
    try:
        sb, _ = a.open(mini.instances[0], role="agent", attempt=0)
        b.close()  # the other run (same --out folder name) ends and cleans up
        assert sb.exec("echo alive", timeout=30).stdout.strip() == "alive"
        sb.close()
    finally:
        a.close()
        b.close()

