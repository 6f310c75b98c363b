"""The faults ``fault_injection_bench.py`` injects inside a run (its child processes import this module).

``FaultyFactory`` wraps the real ``TaskSandboxFactory``. When it opens a sandbox for attempt 0 or 1 of an episode it
draws, from a hash of (run seed, instance, attempt, role), whether that sandbox gets a fault and which one; the last
attempt (2 of ``--max-attempts 3``) is never faulted, so every episode can finish. Each injection is appended to a
JSON Lines log (kind, instance, arm, attempt, role) when it fires (a drawn fault whose moment never comes, e.g. a
2nd command of an agent that runs one, is not logged). The Docker faults are real: the container is
killed or paused through the engine's API; the others raise what the sandbox layer raises for that failure.

Kinds (role: what happens):
- agent ``create_fail``: the container cannot be created (``SandboxUnavailable``, CONTAINER_CREATE);
- agent ``exec_transport``: the engine's exec stream breaks at the agent's 2nd command (EXEC_TRANSPORT);
- agent ``kill_exec``: the container is killed (``docker kill``) just before the agent's 2nd command;
- agent ``kill_idle``: the container is killed while the agent is done and before its work tree is read back;
- agent ``pause``: the container is paused (``docker pause``) before the 2nd command, unpaused 2 s later;
- agent ``oci_126``: the 2nd command cannot start, the engine answers exit 126 "OCI runtime exec failed" while
  the container is being killed;
- agent ``policy_crash``: the model endpoint fails (``ConnectionError``) on the first turn;
- agent ``copy_out_fail``: reading the work tree back fails in the engine (EXEC_TRANSPORT);
- grade ``kill_grade``: the grading container is killed before its tests run (step 2 of the grader);
- grade ``grader_crash``: the grader's first script dies without output;
- grade ``grade_transport``: the engine's exec stream breaks while the hidden tests run (EXEC_TRANSPORT).
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from harness.sandbox import ExecResult, Sandbox, SandboxUnavailable

AGENT_KINDS_DOCKER = ("create_fail", "exec_transport", "kill_exec", "kill_idle", "pause", "oci_126", "policy_crash",
                      "copy_out_fail")
AGENT_KINDS_LOCAL = ("create_fail", "exec_transport", "policy_crash", "copy_out_fail")
GRADE_KINDS_DOCKER = ("kill_grade", "grader_crash", "grade_transport")
GRADE_KINDS_LOCAL = ("grader_crash", "grade_transport")
OCI_TEXT = "OCI runtime exec failed: exec failed: unable to start container process: container is stopping"
_CURRENT = threading.local()  # this worker thread's attempt: instance_id, attempt, agent fault, arm (set by the policy)


def draw(seed: int, instance_id: str, attempt: int, role: str, rate: float, kinds: tuple[str, ...]) -> str | None:
    """The fault (or None) of one sandbox: a pure function of its coordinates."""
    if attempt >= 2 or not kinds:
        return None
    h = hashlib.sha256(f"{seed}|{instance_id}|{attempt}|{role}".encode()).digest()
    if int.from_bytes(h[:4], "big") / 2**32 >= rate:
        return None
    return kinds[h[4] % len(kinds)]


class _DyingApi:
    """The engine API of one sandbox, which kills that container when it reports an exec's exit code 126."""

    def __init__(self, api: Any, kill: Any) -> None:
        self._api, self._kill, self._done = api, kill, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def exec_inspect(self, exec_id: str) -> dict:
        info = self._api.exec_inspect(exec_id)
        if info.get("ExitCode") == 126 and not self._done:
            self._done = True
            self._kill()
        return info


class FaultySandbox(Sandbox):
    """Delegates to ``inner``; injects ``fault`` at the point its kind names (module docstring)."""

    def __init__(self, inner: Sandbox, fault: str | None, client: Any, fire: Any) -> None:
        self.inner, self.fault, self.client, self.n_exec, self._fire = inner, fault, client, 0, fire
        self.isolated = inner.isolated

    def _fired(self, kind: str) -> bool:
        if self.fault != kind:
            return False
        self._fire(kind)
        self.fault = None
        return True

    def _kill(self) -> None:
        try:
            self.client.api.kill(self.inner.id)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - already gone
            pass

    def exec(self, cmd, *, timeout, cwd=None, env=None, input=None) -> ExecResult:  # type: ignore[override]
        self.n_exec += 1
        if self.n_exec == 1 and self._fired("grader_crash"):
            return ExecResult(1, "", "injected: the grader's script died", False, False, 0.0)
        if self.n_exec == 2:
            if self._fired("grade_transport"):
                raise SandboxUnavailable("injected: the exec stream broke during the tests", kind="EXEC_TRANSPORT")
            if self._fired("kill_grade") or self._fired("kill_exec"):
                self._kill()
            if self._fired("exec_transport"):
                raise SandboxUnavailable("injected: the exec stream broke", kind="EXEC_TRANSPORT")
            if self._fired("pause"):
                self.client.api.pause(self.inner.id)  # type: ignore[attr-defined]
                threading.Timer(2.0, self._unpause).start()
            if self._fired("oci_126"):
                self.inner._api = _DyingApi(self.inner._api, self._kill)  # type: ignore[attr-defined]
                cmd = f"echo '{OCI_TEXT}'; exit 126"
        return self.inner.exec(cmd, timeout=timeout, cwd=cwd, env=env, input=input)

    def _unpause(self) -> None:
        try:
            self.client.api.unpause(self.inner.id)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - the sandbox may be closed by then
            pass

    def copy_out(self, src: str, dest: Path) -> None:
        if self._fired("kill_idle"):
            self._kill()
        if self._fired("copy_out_fail"):
            raise SandboxUnavailable("injected: copying the work tree out failed", kind="EXEC_TRANSPORT")
        self.inner.copy_out(src, dest)

    def read_file(self, path: str, *, max_bytes: int = 1 << 20) -> bytes:
        return self.inner.read_file(path, max_bytes=max_bytes)

    def write_file(self, path: str, data: bytes) -> None:
        self.inner.write_file(path, data)

    def copy_in(self, src: Path, dest: str) -> None:
        self.inner.copy_in(src, dest)

    def close(self) -> None:
        self.inner.close()


class FaultyFactory:
    """A ``SandboxFactory`` over ``inner`` whose sandboxes carry drawn faults, logged to ``log_path``."""

    def __init__(self, inner: Any, *, seed: int, rate: float, log_path: Path, docker: bool) -> None:
        self.inner, self.seed, self.rate, self.log_path = inner, seed, rate, Path(log_path)
        self.kind, self.isolated = inner.kind, inner.isolated
        self.agent_kinds = AGENT_KINDS_DOCKER if docker else AGENT_KINDS_LOCAL
        self.grade_kinds = GRADE_KINDS_DOCKER if docker else GRADE_KINDS_LOCAL
        self._lock = threading.Lock()
        self.client = None
        if docker:
            import docker as docker_sdk

            self.client = docker_sdk.from_env()

    def log(self, kind: str, role: str) -> None:
        """Record a fault that fires now, in this worker thread's attempt."""
        rec = {"kind": kind, "instance_id": _CURRENT.instance_id, "attempt": _CURRENT.attempt, "role": role,
               "arm": getattr(_CURRENT, "arm", None)}
        with self._lock, self.log_path.open("a") as fh:
            fh.write(json.dumps(rec) + "\n")

    def open(self, instance: Any, *, role: str, attempt: int) -> tuple[Sandbox, str]:
        kinds = {"agent": self.agent_kinds, "grade": self.grade_kinds}.get(role, ())
        fault = draw(self.seed, instance.instance_id, attempt, role, self.rate, kinds)
        if role == "agent":  # a new attempt starts in this thread (its policy names the arm on its first turn)
            _CURRENT.instance_id, _CURRENT.attempt, _CURRENT.fault, _CURRENT.arm = (
                instance.instance_id, attempt, fault, None)
            _CURRENT.log = self.log
        if fault == "create_fail":
            self.log("create_fail", role)  # before any turn: every arm's attempt gets it (arm None)
            raise SandboxUnavailable("injected: container create failed", kind="CONTAINER_CREATE")
        sb, head = self.inner.open(instance, role=role, attempt=attempt)
        return FaultySandbox(sb, fault if fault != "policy_crash" else None, self.client,
                             lambda kind: self.log(kind, role)), head

    def __getattr__(self, name: str) -> Any:  # image_digests, base_repo, disk_limit, interrupt, preflight, close
        return getattr(self.inner, name)


class FaultyPolicy:
    """A policy whose first turn fails like a model endpoint when its agent sandbox drew ``policy_crash``."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, inner.name
        self.spec = getattr(inner, "spec", inner.name)

    def act(self, messages: list, **kw: Any) -> Any:
        _CURRENT.arm = self.name
        if getattr(_CURRENT, "fault", None) == "policy_crash":
            _CURRENT.fault = None
            _CURRENT.log("policy_crash", "agent")
            raise ConnectionError("injected: the model endpoint refused the connection")
        return self.inner.act(messages, **kw)
