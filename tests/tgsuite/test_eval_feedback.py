"""``tgsuite eval --feedback``: hinted evaluation from the command line, recorded in the manifest, and a resume
with other hints refused (finished episodes would mix two conditions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.schema import TaskSet


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("mini") / "tasks"
    make_mini(out, split="heldout", repos=1, tasks_per_repo=2, seed=3)
    return load_task_set(out)


def _eval(mini: TaskSet, out: Path, *extra: str) -> int:
    from tgsuite.cli import main

    return main(["eval", "--tasks", mini.path, "--policy", "oracle", "--out", str(out), "--sandbox", "local",
                 "--no-progress", "--limit", "1", *extra])


def test_feedback_hints_every_episode_and_is_recorded(mini: TaskSet, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from harness.rundir import read_trajectory

    hinted, plain = tmp_path / "hinted", tmp_path / "plain"
    assert _eval(mini, hinted, "--feedback", "correct") == 0
    assert _eval(mini, plain) == 0
    th = read_trajectory(next(hinted.glob("episodes/*/oracle/s0/a0/trajectory.jsonl")))
    tp = read_trajectory(next(plain.glob("episodes/*/oracle/s0/a0/trajectory.jsonl")))
    hints = [m.content for m in th.messages if m.is_hint]
    assert len(hints) == 1 and "Markdown" in hints[0] and th.hint_turns
    assert not any(m.is_hint for m in tp.messages)
    man_h = json.loads((hinted / "manifest.json").read_text())
    man_p = json.loads((plain / "manifest.json").read_text())
    assert "ReminderFeedback(kind='correct', placement='before_finish'" in man_h["feedback"]["oracle"]
    assert man_p["feedback"] == {}

    capsys.readouterr()
    assert _eval(mini, hinted) == 2  # resuming the hinted run without hints would mix two conditions
    err = capsys.readouterr().err
    assert "arm 'oracle' ran with feedback ReminderFeedback(kind='correct'" in err and "now none" in err
    assert _eval(mini, hinted, "--feedback", "correct") == 0  # the same hints: resumes (nothing left to run)


def test_bad_feedback_spec_names_the_flag_and_the_fix(mini: TaskSet, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for spec in ("sometimes", "mix:correct", "correct@nowhere"):
        assert _eval(mini, tmp_path / "r", "--feedback", spec) == 2
        err = capsys.readouterr().err
        assert f"--feedback {spec!r}" in err and "fix: e.g. --feedback correct" in err
    assert not (tmp_path / "r" / "manifest.json").exists()


def test_a_manifest_without_feedback_ran_without_hints(mini: TaskSet, tmp_path: Path) -> None:
    """Run directories written before the field existed ran without hints: they resume without, not with."""
    from harness.runner_manifest import describe_feedback

    out = tmp_path / "old"
    assert _eval(mini, out) == 0
    man = json.loads((out / "manifest.json").read_text())
    del man["feedback"]
    (out / "manifest.json").write_text(json.dumps(man))
    assert _eval(mini, out) == 0
    assert _eval(mini, out, "--feedback", "wrong") == 2

    class Opaque:  # a provider that is not a dataclass is named by its class (a repr would hold an address)
        def hint_for(self, *a: object) -> None:
            return None

    assert describe_feedback({"a": Opaque(), "b": None}, ["a", "b"]) == {"a": f"{__name__}.{Opaque.__qualname__}"}
    assert describe_feedback(None, ["a"]) == {}
