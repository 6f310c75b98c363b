"""``tgsuite serve-tools`` without Docker: our MCP client (``tests.mcp_agent``) plays a fixing policy and one
that fails through the real MCP server (in process), and each episode is recorded, graded and behaviour-judged as
an eval episode is; the client leaving before ``finish`` is infra and the next serve resumes it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from harness.interfaces import EpisodeLimits  # noqa: E402
from harness.mcp_bridge import ToolBridge  # noqa: E402
from harness.mcp_episode import ServedEpisode, open_episode  # noqa: E402
from harness.mcp_server import build_server, instructions_for  # noqa: E402
from harness.rundir import (  # noqa: E402
    counting_attempt,
    latest_results,
    read_attempt_log,
    read_trajectory,  # noqa: E402
)
from harness.schema import EpisodeResult, TaskSet  # noqa: E402
from harness.tools import TOOL_NAMES  # noqa: E402
from tests.harness_fakes import FakeFactory, FixPolicy, NullFinishPolicy, make_calc_task  # noqa: E402
from tests.mcp_agent import PlayLog, play  # noqa: E402


def _tasks(tmp: Path) -> tuple[TaskSet, FakeFactory]:
    inst, repo = make_calc_task(tmp / "repos", "calc-1")
    inst = inst.model_copy(update={"behaviour": ["markdown@v1"]})
    return TaskSet(name="calc", path=str(tmp), sha256="e" * 64, instances=[inst]), FakeFactory({"calc-1": repo})


def _serve(tmp: Path, out: Path, client_body: Any, *, arm: str = "mine",
           limits: EpisodeLimits | None = None) -> tuple[EpisodeResult | None, Any]:
    """Serve calc-1 into ``out`` (episode thread) while ``client_body(client)`` runs against the in-process server."""
    from mcp import Client

    ts, factory = _tasks(tmp)
    settings = ServedEpisode(instance_id="calc-1", arm=arm, limits=limits or EpisodeLimits(max_turns=6, wall_s=60))
    box: dict[str, Any] = {}
    with open_episode(out, ts, settings, factory=factory) as session:
        if session.plan.job is None:
            return session.plan.finished, None
        server = build_server(session.bridge, ts.instances[0])
        t = threading.Thread(target=lambda: box.setdefault("res", session.run()))
        t.start()

        async def main() -> Any:
            async with Client(server) as client:
                return await client_body(client)

        try:
            seen = anyio.run(main)
        finally:
            session.bridge.close("the test client is done")
            t.join(60)
    return box.get("res"), seen


def test_fixing_agent_is_graded_resolved_and_judged_like_eval(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res, seen = _serve(tmp_path, out, lambda c: play(c, FixPolicy()))
    assert isinstance(seen, PlayLog) and seen.tool_names == list(TOOL_NAMES)
    assert seen.instructions and "add() subtracts" in seen.instructions
    assert [c[0] for c in seen.calls] == ["edit_file", "finish"] and "episode is over" in seen.calls[-1][2]
    assert res is not None and res.status == "ok" and res.resolved and res.failure_class == "none"
    assert [b.checker for b in res.behaviour] == ["markdown@v1"] and res.behaviour_ok and res.joint_ok
    d = out / "episodes" / "calc-1" / "mine" / "s0" / "a0"
    traj = read_trajectory(d / "trajectory.jsonl")
    assert traj.finished and traj.final_message and "`add`" in traj.final_message
    assert [m.role for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert traj.messages[2].tool_calls[0].name == "edit_file" and traj.messages[2].tool_calls[0].valid
    assert "calc.py" in (d / "patch.diff").read_text() and (d / "grade" / "grade.json").is_file()
    assert latest_results(out).results == [res]
    man = (out / "manifest.json").read_text()
    assert '"policy": "mcp"' in man and '"name": "mine"' in man


def test_failing_agent_is_an_agent_failure(tmp_path: Path) -> None:
    res, seen = _serve(tmp_path, tmp_path / "run", lambda c: play(c, NullFinishPolicy()))
    assert [c[0] for c in seen.calls] == ["finish"]
    assert res is not None and res.status == "empty_patch" and res.failure_class == "agent" and res.scored
    assert not res.resolved and not res.joint_ok


def test_bad_calls_are_recorded_as_in_eval_and_limits_end_the_episode(tmp_path: Path) -> None:
    async def body(client: Any) -> list[Any]:
        return [await client.call_tool("edit_file", {"path": "calc.py"}),  # missing old / new
                await client.call_tool("no_such_tool", {}),
                await client.call_tool("read_file", {"path": "calc.py"}),
                await client.call_tool("read_file", {"path": "calc.py"})]

    res, seen = _serve(tmp_path, tmp_path / "run", body, limits=EpisodeLimits(max_turns=3, wall_s=60))
    assert [r.is_error for r in seen[:3]] == [True, True, False]
    assert "missing required argument 'old'" in seen[0].content[0].text
    assert "turns limit (3)" in seen[2].content[0].text and "def add" in seen[2].content[0].text
    assert seen[3].is_error and "not executed" in seen[3].content[0].text
    assert res is not None and res.status == "limit_turns" and res.failure_class == "agent"
    traj = read_trajectory(tmp_path / "run" / "episodes" / "calc-1" / "mine" / "s0" / "a0" / "trajectory.jsonl")
    assert traj.protocol_violations == 2 and res.metrics.tool_call_validity == pytest.approx(1 / 3)


def test_client_leaving_before_finish_is_infra_and_the_next_serve_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"

    async def leave(client: Any) -> None:
        await client.call_tool("read_file", {"path": "calc.py"})  # then the client goes away

    res, _ = _serve(tmp_path, out, leave)
    assert res is not None and res.failure_class == "infra" and res.infra_kind == "MODEL_ENDPOINT" and not res.scored
    assert "no further tool call" in (res.error or "")
    res2, seen = _serve(tmp_path / "again", out, lambda c: play(c, FixPolicy()))
    assert res2 is not None and res2.attempt == 1 and res2.resolved
    got = counting_attempt(out / "episodes" / "calc-1" / "mine" / "s0")
    assert got is not None and got[0] == 1
    done, _ = _serve(tmp_path / "third", out, lambda c: play(c, FixPolicy()))  # finished: not served again
    assert done == res2
    logged = read_attempt_log(out)  # serve-tools logs each finished attempt as eval does (harness.attempt_log)
    assert logged is not None and [(x.attempt, x.failure_class, x.event) for x in logged] == [
        (0, "infra", "finish"), (1, "none", "finish")]


def test_instructions_hold_the_system_prompt_and_statement(tmp_path: Path) -> None:
    ts, _ = _tasks(tmp_path)
    text = instructions_for(ts.instances[0])
    assert text.endswith("add() subtracts") and "finish" in text


def test_bridge_refuses_calls_after_close() -> None:
    b = ToolBridge("x", wall_s=5)
    b.close("stopping")
    ans = b.call("read_file", {"path": "a"})
    assert ans.error and ans.over and "stopping" in ans.text and b.calls == 0


def test_no_call_within_the_wall_clock_is_the_agents_time_limit(tmp_path: Path) -> None:
    async def slow(client: Any) -> list[Any]:
        first = await client.call_tool("read_file", {"path": "calc.py"})
        await anyio.sleep(1.5)  # longer than --wall-s: the episode ends while the agent thinks
        return [first, await client.call_tool("read_file", {"path": "calc.py"})]

    res, seen = _serve(tmp_path, tmp_path / "run", slow, limits=EpisodeLimits(max_turns=6, wall_s=1.0))
    assert not seen[0].is_error and "def add" in seen[0].content[0].text
    assert seen[1].is_error and "episode is over" in seen[1].content[0].text
    assert res is not None and res.status == "limit_time" and res.failure_class == "agent" and res.scored


def test_missing_optional_packages_name_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from tgsuite.cli import main

    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp → ImportError
    monkeypatch.setitem(sys.modules, "inspect_ai", None)
    assert main(["serve-tools", "--tasks", str(tmp_path), "--instance", "x", "--out", str(tmp_path / "r")]) == 2
    assert "pip install 'tgsuite[mcp]'" in capsys.readouterr().err
    assert main(["export", "inspect", str(tmp_path)]) == 2
    assert "pip install 'tgsuite[inspect]'" in capsys.readouterr().err
