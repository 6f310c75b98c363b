"""Test helpers for grading/runner/validate tests: a subprocess sandbox in a temp dir and a tiny git task.

``DirSandbox`` is a *test fake*, not ``harness.sandbox_local.LocalSandbox``: it runs commands on the host in a
temporary directory with the test interpreter's directory first on PATH. It exists so that grading and runner
tests run real git and real pytest without depending on another part's sandbox.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.sandbox import ExecResult, Sandbox, SandboxUnavailable, cap_output
from harness.sandbox_providers import SandboxFactory
from harness.schema import TaskInstance, TaskSet

BIN = str(Path(sys.executable).parent)


class DirSandbox(Sandbox):
    isolated = False

    def __init__(self, repo: Path | None = None, *, fail_after: int | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tgs-fake-sbx-"))
        self.n_exec = 0
        self.fail_after = fail_after
        if repo is not None:
            shutil.copytree(repo, self.root, dirs_exist_ok=True)

    def _tick(self) -> None:
        self.n_exec += 1
        if self.fail_after is not None and self.n_exec > self.fail_after:
            raise SandboxUnavailable("injected engine failure", kind="EXEC_TRANSPORT")

    def exec(self, cmd, *, timeout, cwd=None, env=None, input=None) -> ExecResult:  # type: ignore[override]
        self._tick()
        full_env = {"PATH": BIN + os.pathsep + os.environ.get("PATH", ""), "HOME": str(self.root), "LANG": "C.UTF-8",
                    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        full_env.update(env or {})
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, shell=isinstance(cmd, str), cwd=self.root / (cwd or "."), env=full_env, input=input,
                capture_output=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            out, _ = cap_output(exc.stdout or b"", 1 << 20)
            return ExecResult(124, out, "", True, False, time.monotonic() - t0)
        out, t1 = cap_output(proc.stdout, 1 << 20)
        err, t2 = cap_output(proc.stderr, 1 << 20)
        return ExecResult(proc.returncode, out, err, False, t1 or t2, time.monotonic() - t0)

    def read_file(self, path, *, max_bytes=1 << 20):  # type: ignore[override]
        self._tick()
        return (self.root / path).read_bytes()[:max_bytes]

    def write_file(self, path, data):  # type: ignore[override]
        self._tick()
        p = self.root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def copy_in(self, src, dest):  # type: ignore[override]
        shutil.copytree(src, self.root / dest, dirs_exist_ok=True)

    def copy_out(self, src, dest):  # type: ignore[override]
        self._tick()
        shutil.copytree(self.root / src, dest, symlinks=True, dirs_exist_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


CALC_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
BASE_TESTS = "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"
HIDDEN_TESTS = BASE_TESTS + "\n\ndef test_add():\n    assert add(2, 2) == 4\n"
HIDDEN_TESTS = HIDDEN_TESTS.replace("from calc import sub", "from calc import add, sub")


def diff_of(repo: Path, edits: dict[str, str | bytes | None]) -> str:
    """Apply ``edits`` (path → new text or bytes, None = delete) in a scratch copy of ``repo``; return the git diff
    (binary, ignored files included)."""
    with tempfile.TemporaryDirectory() as d:
        work = Path(d) / "r"
        shutil.copytree(repo, work)
        for rel, text in edits.items():
            p = work / rel
            if text is None:
                p.unlink()
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(text if isinstance(text, bytes) else text.encode())
        _git(work, "add", "-A", "-f")
        return _git(work, "diff", "--binary", "--cached", "HEAD")


def make_calc_task(root: Path, instance_id: str = "calc-1") -> tuple[TaskInstance, Path]:
    """A one-bug git repo at ``root/instance_id`` and its TaskInstance (F2P test_add, P2P test_sub)."""
    repo = root / instance_id
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC_BUGGY)
    (repo / "tests" / "test_calc.py").write_text(BASE_TESTS)
    (repo / "pyproject.toml").write_text('[project]\nname = "calc"\nversion = "0"\n')
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    inst = TaskInstance(
        instance_id=instance_id, repo="calc", base_commit=base, problem_statement="add() subtracts",
        patch=diff_of(repo, {"calc.py": CALC_FIXED}),
        test_patch=diff_of(repo, {"tests/test_calc.py": HIDDEN_TESTS}),
        FAIL_TO_PASS=["tests/test_calc.py::test_add"], PASS_TO_PASS=["tests/test_calc.py::test_sub"],
    )
    return inst, repo


def calc_task_set(root: Path, sha256: str, n: int = 2) -> tuple[TaskSet, dict[str, Path]]:
    """``n`` calc tasks (``calc-0`` …) as one TaskSet with the given hash, and each task's repository."""
    insts, repos = [], {}
    for i in range(n):
        inst, repo = make_calc_task(root / "repos", f"calc-{i}")
        insts.append(inst)
        repos[inst.instance_id] = repo
    return TaskSet(name="calc", path=str(root), sha256=sha256, instances=insts), repos


def make_calc_src_task(root: Path, instance_id: str = "calc-src") -> tuple[TaskInstance, Path]:
    """The calc task with its code under ``src/`` and a SWE-bench-style ``PYTHONPATH=src python -m pytest``."""
    inst, repo = make_calc_task(root, instance_id)
    (repo / "src").mkdir()
    _git(repo, "mv", "calc.py", "src/calc.py")
    _git(repo, "commit", "-qm", "src layout")
    base = _git(repo, "rev-parse", "HEAD").strip()
    inst = inst.model_copy(update={"base_commit": base, "test_cmd": "PYTHONPATH=src python -m pytest",
                                   "patch": diff_of(repo, {"src/calc.py": CALC_FIXED})})
    return inst, repo


class FakeFactory(SandboxFactory):
    """SandboxFactory over ``DirSandbox``: each open() copies the instance's git repo into a new temp dir (the
    protocol's defaults for the rest: no disk limit recorded, local scratch sandboxes, nothing to interrupt).

    ``fail_agent_attempts``: attempt indices whose AGENT sandbox raises SandboxUnavailable after ``fail_after``
    exec calls (an engine failure injected mid-episode).
    """

    kind = "local"
    isolated = False

    def __init__(self, repos: dict[str, Path], *, fail_agent_attempts: set[int] = frozenset(),  # type: ignore[assignment]
                 fail_after: int = 0) -> None:
        self.repos, self.fail_agent_attempts, self.fail_after = repos, set(fail_agent_attempts), fail_after
        self.opened: list[tuple[str, str, int]] = []

    def open(self, instance: TaskInstance, *, role: str, attempt: int):
        self.opened.append((instance.instance_id, role, attempt))
        fail = self.fail_after if (role == "agent" and attempt in self.fail_agent_attempts) else None
        return DirSandbox(self.repos[instance.instance_id], fail_after=fail), instance.base_commit

    def image_digests(self) -> dict[str, str]:
        return {"base": "sha256:fake"}

    def base_repo(self, instance: TaskInstance) -> tuple[Path, str]:
        return self.repos[instance.instance_id], instance.base_commit


def _n_assistant(messages) -> int:
    return sum(m.role == "assistant" for m in messages)


def _call(name: str, **arguments) -> str:
    import json

    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class FixPolicy:
    """Turn 0: replace ``add`` in calc.py with ``new``; turn 1: finish. ``sleep_s`` slows each turn."""

    name = "fix"

    def __init__(self, new: str = "def add(a, b):\n    return a + b\n", sleep_s: float = 0.0) -> None:
        self.new, self.sleep_s = new, sleep_s

    def act(self, messages, *, tools, rng):
        from harness.interfaces import PolicyOutput

        time.sleep(self.sleep_s)
        if _n_assistant(messages) == 0:
            return PolicyOutput(_call("edit_file", path="calc.py", old="def add(a, b):\n    return a - b\n",
                                      new=self.new))
        return PolicyOutput(_call("finish", message="Fixed `add` in `calc.py`: it now adds its arguments."))


class NullFinishPolicy:
    name = "null"

    def act(self, messages, *, tools, rng):
        from harness.interfaces import PolicyOutput

        return PolicyOutput(_call("finish", message="Nothing to do."))


class WhereFinishPolicy:
    """Finishes (after ``sleep_s``), saying where it ran: ``pid <process id> node <Ray node id, or - outside Ray>``."""

    name = "where"

    def __init__(self, sleep_s: float = 0.0) -> None:
        self.sleep_s = sleep_s

    def act(self, messages, *, tools, rng):
        import os

        from harness.interfaces import PolicyOutput

        time.sleep(self.sleep_s)

        try:
            import ray

            node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "-"
        except ImportError:
            node = "-"
        return PolicyOutput(_call("finish", message=f"pid {os.getpid()} node {node}"))
