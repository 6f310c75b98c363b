"""Offline episode metrics: counts, validity, rework, hallucinations (tool calls and summary), repo indexes."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from harness.agent import run_episode
from harness.interfaces import EpisodeLimits, PolicyOutput
from harness.metrics import (
    RepoIndex,
    compute_metrics,
    count_hallucinations,
    metrics_for,
    python_definitions,
    snapshot_index,
    summary_hallucinations,
)
from harness.schema import Message, TaskSet, Trajectory
from harness.tools import ERROR_PREFIX, parse_tool_calls
from harness.tools import format_tool_call as fc
from tests.harness_fakes import DirSandbox, make_calc_task

FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\nclass Calc:\n    def mul(self, a, b):\n        return a * b\n",
    "tests/test_calc.py": "def test_sub():\n    pass\n",
    "README.md": "",
}
INDEX = RepoIndex.from_files(FILES)


def _a(text: str) -> Message:
    return Message(role="assistant", content=text, tool_calls=parse_tool_calls(text))


def _t(content: str) -> Message:
    return Message(role="tool", content=content)


def _traj(msgs: list[Message], final: str | None = None) -> Trajectory:
    return Trajectory(instance_id="i", policy="p", seed=0, messages=msgs, final_message=final, n_tokens=42,
                      timings={"wall_s": 1.5})


def test_repo_index_from_files() -> None:
    assert INDEX.files == {"calc.py", "tests/test_calc.py", "README.md"}
    assert INDEX.dirs == {".", "tests"}
    assert INDEX.symbols == {"add", "Calc", "mul", "test_sub"}
    assert python_definitions("def broken(:\n  pass\nclass Ok:\n") == {"broken", "Ok"}


def test_counts_validity_edits_rework() -> None:
    msgs = [
        _a(fc("read_file", {"path": "calc.py"}) + "<tool_call>{bad}</tool_call>"),
        _t("def add..."), _t(ERROR_PREFIX + "malformed"),
        _a(fc("edit_file", {"path": "calc.py", "old": "zzz", "new": "y"})), _t(ERROR_PREFIX + "`old` was not found"),
        _a(fc("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})), _t("edited calc.py"),
        _a(fc("run_tests", {})), _t("[exit code 1]"),
        _a(fc("run_tests", {}) + fc("run_tests", {"tests": ["tests/test_calc.py"]})), _t("[exit code 0]"), _t("ok"),
        _a("no call"), Message(role="user", content="nudge"),
        _a(fc("finish", {"message": "Fixed `add()` in `calc.py`."}) + fc("run_tests", {})), _t("Task finished."),
    ]
    m = compute_metrics(_traj(msgs, "Fixed `add()` in `calc.py`."), INDEX)
    assert m.steps == 7 and m.tool_calls == 9 and m.tool_call_validity == pytest.approx(8 / 9)
    assert m.edits == 1 and m.test_runs == 3 and m.rework == 2  # the run_tests after finish never ran
    assert m.hallucinations == 0 and m.tokens == 42 and m.wall_s == 1.5


def test_no_calls_gives_none_validity() -> None:
    m = compute_metrics(_traj([_a("hello")]), INDEX)
    assert m.tool_calls == 0 and m.tool_call_validity is None and m.steps == 1


def test_tool_call_hallucinations() -> None:
    msgs = [
        _a(fc("read_file", {"path": "utils.py"})), _t(ERROR_PREFIX + "not a file"),
        _a(fc("search", {"pattern": "x", "path": "src"})), _t(ERROR_PREFIX + "does not exist"),
        _a(fc("run_tests", {"tests": ["tests/test_utils.py::test_x"]})), _t("[exit code 4]"),
        _a(fc("edit_file", {"path": "helpers.py", "old": "x", "new": "y"})), _t(ERROR_PREFIX + "not a file"),
        # creating a file, then reading and editing it, is not a hallucination
        _a(fc("edit_file", {"path": "pkg/new.py", "old": "", "new": "def helper():\n    pass\n"})), _t("created"),
        _a(fc("read_file", {"path": "pkg/new.py"}) + fc("list_files", {"path": "pkg"})), _t("..."), _t("..."),
        _a(fc("read_file", {"path": "./tests/../calc.py"}) + fc("list_files", {})), _t("..."), _t("..."),
    ]
    n, found = count_hallucinations(_traj(msgs, "I added `helper()` in `pkg/new.py`."), INDEX)
    assert n == 4, found
    assert [f.split("(")[0] for f in found] == ["read_file", "search", "run_tests", "edit_file"]


@pytest.mark.parametrize(
    ("summary", "bad"),
    [
        ("Fixed `add()` in `calc.py` and `Calc.mul()`; see README.md.", []),
        ("Fixed add() in calc.py; `len()` and `print()` are builtins.", []),
        ("Fixed `subtract()` in `calc.py`.", ["subtract()"]),
        ("Updated `src/calc.py` and `utils/helpers.py`.", ["src/calc.py", "utils/helpers.py"]),
        ("Edited `test_calc.py` (matched by suffix) and `calc.py`.", []),
        ("Ran:\n```\n$ python missing_script.py\nundefined_fn()\n```\nAll good in `calc.py`.", []),
        ("Changed `Calc.divide()` and `Calc.divide()` again.", ["Calc.divide()"]),
        ("I edited the config in setup.cfg.", ["setup.cfg"]),
    ],
)
def test_summary_hallucinations(summary: str, bad: list[str]) -> None:
    assert summary_hallucinations(summary, INDEX.files, INDEX.symbols) == bad


def test_symbols_written_by_the_agent_count_as_existing() -> None:
    msgs = [_a(fc("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b\n\ndef neg(a):\n    return -a"})),
            _t("edited calc.py")]
    assert count_hallucinations(_traj(msgs, "Added `neg()` to `calc.py`."), INDEX)[0] == 0
    failed = [msgs[0], _t(ERROR_PREFIX + "not found")]
    # a failed edit defines nothing: claiming `neg()` then is a hallucination
    assert count_hallucinations(_traj(failed, "Added `neg()` to `calc.py`."), INDEX)[0] == 1
    # but a failed create leaves no file behind
    create = [_a(fc("edit_file", {"path": "x.py", "old": "", "new": ""})), _t(ERROR_PREFIX + "exists")]
    assert count_hallucinations(_traj(create, "Created `x.py`."), INDEX)[0] == 1


def test_index_from_dir_and_tar(tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path)
    from_dir = RepoIndex.from_dir(repo)
    assert from_dir.files == {"calc.py", "tests/test_calc.py", "pyproject.toml"}
    assert {"add", "sub", "test_sub"} <= from_dir.symbols
    archive = tmp_path / "snap.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(repo, arcname=inst.instance_id, filter=lambda ti: None if "/.git" in ti.name else ti)
    assert RepoIndex.from_tar(archive) == from_dir


def test_metrics_on_a_real_episode(tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path)

    class P:
        name = "p"

        def __init__(self) -> None:
            self.turns = iter([
                fc("read_file", {"path": "calc.py"}),
                fc("edit_file", {"path": "calc.py", "old": "    return a - b\n\n\ndef sub",
                                 "new": "    return a + b\n\n\ndef sub"}),
                fc("run_tests", {}), fc("run_tests", {}),
                fc("finish", {"message": "Fixed `add()` in `calc.py`; also tuned `mul()` in `ops.py`."}),
            ])

        def act(self, messages, *, tools, rng):
            return PolicyOutput(text=next(self.turns))

    with DirSandbox(repo) as sbx:
        traj = run_episode(inst, P(), sbx, EpisodeLimits(), seed=0)
    m = compute_metrics(traj, RepoIndex.from_dir(repo))
    assert (m.steps, m.tool_calls, m.edits, m.test_runs, m.rework, m.hallucinations) == (5, 5, 1, 2, 1, 2)
    assert m.tool_call_validity == 1.0 and m.tokens == traj.n_tokens and m.wall_s > 0


def test_metrics_for_a_task_set(tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path / "build")
    root = tmp_path / "ts"
    (root / "snapshots").mkdir(parents=True)
    repo.rename(root / "snapshots" / inst.instance_id)
    ts = TaskSet(name="t", path=str(root), sha256="0" * 64, instances=[inst])
    assert "calc.py" in snapshot_index(root, inst.instance_id).files
    fn = metrics_for(ts)
    traj = _traj([_a(fc("read_file", {"path": "nope.py"})), _t(ERROR_PREFIX + "x")], "Fixed `add()` in `calc.py`.")
    assert fn(traj, inst).hallucinations == 1 and fn(traj, inst).steps == 1
    with pytest.raises(FileNotFoundError, match="snapshots/missing"):
        snapshot_index(root, "missing")
