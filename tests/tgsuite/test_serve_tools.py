"""``tgsuite serve-tools`` as a user runs it: a separate process serving a mini task over stdio (the client launches
it) or over HTTP on 127.0.0.1; our MCP client (``tests.mcp_agent``) plays the scripted expert, which solves it,
and the null policy, which fails; both are graded and judged as ``tgsuite eval`` grades them. Docker-marked tests
use the default Docker sandbox; the others run the task in the local sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from harness.policies.scripted import NullPolicy, ScriptedExpert  # noqa: E402
from harness.rundir import latest_results  # noqa: E402
from harness.schema import EpisodeResult, TaskSet  # noqa: E402
from tests.mcp_agent import play  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("mini") / "tasks"
    make_mini(out, split="heldout", repos=1, tasks_per_repo=2, seed=3)
    return load_task_set(out)


def _argv(mini: TaskSet, out: Path, iid: str, *extra: str) -> list[str]:
    return ["-m", "tgsuite", "serve-tools", "--tasks", mini.path, "--instance", iid, "--out", str(out), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _stdio(mini: TaskSet, out: Path, iid: str, policy: Any, *extra: str) -> Any:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=_argv(mini, out, iid, *extra), env=_env(),
                                   cwd=str(ROOT))

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=120) as client:
            return await play(client, policy)

    return anyio.run(main)


def _result(out: Path, iid: str, arm: str) -> EpisodeResult:
    # the server records the episode after the client has gone: wait for its results.jsonl line
    for _ in range(600):
        got = [r for r in latest_results(out).results if r.instance_id == iid and r.arm == arm]
        if got and (out / "results.jsonl").is_file() and iid in (out / "results.jsonl").read_text():
            return got[0]
        time.sleep(0.1)
    raise AssertionError(f"no result for {iid}/{arm} in {out}")


def _check_expert_and_null(mini: TaskSet, out: Path, expert: ScriptedExpert, *extra: str) -> None:
    iid = mini.instances[0].instance_id
    seen = _stdio(mini, out, iid, expert, "--arm", "expert", *extra)
    assert seen.calls[-1][0] == "finish" and any(c[0] == "edit_file" for c in seen.calls)
    good = _result(out, iid, "expert")
    assert good.status == "ok" and good.resolved and good.failure_class == "none"
    assert [b.checker for b in good.behaviour] == mini.instances[0].behaviour
    assert good.behaviour_ok == all(b.ok for b in good.behaviour)  # judged on the served trajectory
    _stdio(mini, out, iid, NullPolicy(), "--arm", "null", *extra)
    bad = _result(out, iid, "null")
    assert bad.status == "empty_patch" and not bad.resolved and bad.failure_class == "agent" and bad.scored
    man = json.loads((out / "manifest.json").read_text())
    assert {a["name"]: a["policy"] for a in man["arms"]} == {"expert": "mcp", "null": "mcp"}
    assert man["instance_ids"] == [i.instance_id for i in mini.instances]
    traj = out / "episodes" / iid / "expert" / "s0" / "a0" / "trajectory.jsonl"
    assert traj.is_file() and '"finished": true' in traj.read_text().splitlines()[0]


def test_stdio_expert_resolves_and_null_fails_in_the_local_sandbox(mini: TaskSet, tmp_path: Path) -> None:
    from harness.rundir import read_trajectory
    from tgsuite.cli import main

    out, ev, iid = tmp_path / "run", tmp_path / "eval", mini.instances[0].instance_id
    _check_expert_and_null(mini, out, ScriptedExpert(), "--sandbox", "local")
    # the same agent under `tgsuite eval`: the same calls, the same grade, the same behaviour verdicts
    assert main(["eval", "--tasks", mini.path, "--policy", "expert", "--instance", iid, "--out", str(ev),
                 "--sandbox", "local", "--no-progress"]) == 0
    ref, got = latest_results(ev).results[0], _result(out, iid, "expert")
    assert (got.status, got.resolved, got.behaviour_ok) == (ref.status, ref.resolved, ref.behaviour_ok)
    assert [(b.checker, b.ok, b.violations) for b in got.behaviour] == [
        (b.checker, b.ok, b.violations) for b in ref.behaviour]

    def calls(run: Path) -> list[str]:
        traj = read_trajectory(run / "episodes" / iid / "expert" / "s0" / "a0" / "trajectory.jsonl")
        return [c.name for m in traj.messages for c in m.tool_calls]

    assert calls(out) == calls(ev) and calls(out)[-1] == "finish"


@pytest.mark.docker
def test_stdio_expert_resolves_and_null_fails_in_docker(mini: TaskSet, tmp_path: Path, docker_provider: Any) -> None:
    _check_expert_and_null(mini, tmp_path / "run", ScriptedExpert(screen_sandbox=docker_provider.create))
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["sandbox"] == "docker" and man["isolated"] is True


def test_http_on_loopback_and_a_finished_episode_is_not_served_again(mini: TaskSet, tmp_path: Path) -> None:
    from mcp import Client

    out, iid = tmp_path / "run", mini.instances[1].instance_id
    proc = subprocess.Popen([sys.executable, *_argv(mini, out, iid, "--sandbox", "local", "--transport", "http",
                                                    "--port", "0")],
                            cwd=ROOT, env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        url = ""
        while not url:
            line = proc.stderr.readline() if proc.stderr else ""
            assert line, f"serve-tools exited ({proc.poll()}) before serving"
            if " at http://127.0.0.1:" in line:
                url = line.split(" at ", 1)[1].split()[0]

        async def main() -> Any:
            async with Client(url) as client:
                return await play(client, NullPolicy())

        seen = anyio.run(main)
        assert seen.calls and seen.calls[0][0] == "finish"
        assert proc.wait(120) == 0  # the server stops once the episode is recorded
    finally:
        proc.kill()
        proc.wait()
    assert _result(out, iid, "mcp").status == "empty_patch"
    again = subprocess.run([sys.executable, *_argv(mini, out, iid, "--sandbox", "local")], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and "already finished" in again.stderr and again.stdout == ""


def test_unknown_instance_and_missing_flags_name_the_fix(mini: TaskSet, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tgsuite.cli import main

    assert main(["serve-tools", "--tasks", mini.path, "--instance", "nope", "--out", str(tmp_path / "r")]) == 2
    assert "--instance 'nope' is not a runnable instance" in capsys.readouterr().err
