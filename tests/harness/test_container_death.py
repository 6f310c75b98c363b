"""A container that dies under an episode is infrastructure, never the agent's (issue #38 item 3).

The work directory is read back only from a running container (before and after the copy): under the tmpfs disk
mode a stopped container's work directory reads as empty, which was graded as a patch deleting every file. An
exec the engine cannot start because the container is dying (exit 126, "OCI runtime exec failed") raises
``SandboxUnavailable`` instead of reaching the agent as a tool result; the same text printed by a command in a
running container stays the command's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.sandbox import SandboxSpec, SandboxUnavailable

SMALL = SandboxSpec(mem_bytes=256 << 20, pids=64)


@pytest.mark.docker
def test_copy_out_of_a_killed_container_is_infra(docker_provider: Any, docker_client: Any, tmp_path: Path) -> None:
    with docker_provider.create(SMALL, instance_id="dead-copy") as box:
        box.exec("echo kept > a.txt", timeout=10)
        box.copy_out(".", tmp_path / "alive")
        assert (tmp_path / "alive" / "a.txt").read_text() == "kept\n"
        docker_client.api.kill(box.id)
        with pytest.raises(SandboxUnavailable):
            box.copy_out(".", tmp_path / "dead")


@pytest.mark.docker
def test_exec_that_cannot_start_in_a_dying_container_is_infra(docker_provider: Any, docker_client: Any) -> None:
    fake = "echo 'OCI runtime exec failed: exec failed: unable to start container process'; exit 126"
    with docker_provider.create(SMALL, instance_id="oci") as box:
        res = box.exec(fake, timeout=10)  # printed by a command in a running container: the command's result
        assert res.returncode == 126 and "OCI runtime exec failed" in res.stdout
        real_inspect = box._api.exec_inspect

        def dying(exec_id: str) -> dict:  # the engine reports exit 126 while the container is being killed
            info = real_inspect(exec_id)
            if info.get("ExitCode") == 126:
                docker_client.api.kill(box.id)
            return info

        box._api.exec_inspect = dying
        try:
            with pytest.raises(SandboxUnavailable):
                box.exec(fake, timeout=10)
        finally:
            box._api.exec_inspect = real_inspect


class _KillThenFinish:
    """Turn 0: edit a file; turn 1: kill this run's agent container (as an engine failure would), then finish."""

    name = "killer"

    def __init__(self, client: Any, run_id: str) -> None:
        self.client, self.run_id, self.turn = client, run_id, 0

    def act(self, messages, *, tools, rng):
        import json

        from harness.interfaces import PolicyOutput

        self.turn += 1
        if self.turn == 1:
            call = {"name": "bash", "arguments": {"command": "echo x >> README.md"}}
            return PolicyOutput(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        for c in self.client.api.containers(filters={"label": [f"tgsuite.run_id={self.run_id}",
                                                               "tgsuite.role=agent"]}):
            self.client.api.kill(c["Id"])
        call = {"name": "finish", "arguments": {"message": "Done."}}
        return PolicyOutput(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")


@pytest.mark.docker
def test_agent_container_killed_before_extraction_is_infra(docker_client: Any, tmp_path: Path) -> None:
    from harness.infra import RetryPolicy
    from harness.interfaces import EpisodeLimits
    from harness.minirepos import make_mini
    from harness.run_control import sandbox_run_id
    from harness.runner import run_eval
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set

    make_mini(tmp_path / "tasks", split="heldout", repos=1, tasks_per_repo=1, seed=5)
    ts = load_task_set(tmp_path / "tasks")
    run_id = sandbox_run_id(tmp_path / "run")
    with TaskSandboxFactory(ts, kind="docker", run_id=run_id, spec=SMALL) as fac:
        fac.preflight()
        res = run_eval(ts, {"killer": _KillThenFinish(docker_client, run_id)}, [0], tmp_path / "run",
                       sandbox_factory=fac, limits=EpisodeLimits(max_turns=4),
                       retry=RetryPolicy(max_attempts=1))
    (r,) = res
    print(f"\ndisk mode {fac.disk_limit().get('mode')}: status {r.status} ({r.failure_class}, {r.infra_kind})")
    assert r.failure_class == "infra" and not r.scored, (r.status, r.error)
