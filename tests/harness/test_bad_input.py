"""Bad input gets a clear error naming the file, the field and the fix, or a documented warning (issue #14
item 11). Each case was silently accepted or ended in a traceback before."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from harness.interfaces import EpisodeLimits
from harness.schema import EpisodeResult, Grade
from tests.harness_fakes import FakeFactory, FixPolicy, make_calc_task


@pytest.mark.parametrize(("field", "value", "flag"), [("max_turns", 0, "--max-turns"), ("max_turns", -1, "--max-turns"),
                                                      ("wall_s", -5.0, "--wall-s"), ("per_exec_timeout_s", 0, "")])
def test_non_positive_limits_are_refused(field: str, value: float, flag: str) -> None:
    with pytest.raises(ValueError, match=rf"EpisodeLimits\.{field}.*{flag}.*must be > 0; fix"):
        EpisodeLimits(**{field: value})


@pytest.mark.parametrize("timeout", [0.0, -5.0])
def test_grade_timeout_must_be_positive(tmp_path: Path, timeout: float) -> None:
    from harness.runner import run_eval
    from harness.schema import TaskSet

    inst, repo = make_calc_task(tmp_path)
    ts = TaskSet(name="t", path=str(tmp_path), sha256="0", instances=[inst])
    with pytest.raises(ValueError, match="--grade-timeout .* must be > 0"):
        run_eval(ts, {"fix": FixPolicy()}, [0], tmp_path / "run", sandbox_factory=FakeFactory({inst.instance_id: repo}),
                 grade_timeout_s=timeout)


def test_string_booleans_are_refused() -> None:
    with pytest.raises(ValueError, match="resolved"):
        Grade.model_validate_json('{"resolved": "yes", "valid": true}')
    with pytest.raises(ValueError, match="resolved"):
        EpisodeResult.model_validate({"run_id": "r", "instance_id": "i", "repo": "r", "cluster": "r", "arm": "a", "policy": "p",
                                      "seed": 0, "attempt": 0, "status": "ok", "failure_class": "none",
                                      "resolved": "yes"})


def test_truncated_result_json_names_the_file(tmp_path: Path) -> None:
    from harness.rundir import read_result

    (tmp_path / "result.json").write_text('{"run_id": "r", "instance')
    with pytest.raises(ValueError, match=r"result\.json: not an episode result .*fix: restore it from a copy"):
        read_result(tmp_path)


def test_corrupt_snapshot_archive_is_named_at_preflight(tmp_path: Path) -> None:
    from harness.minirepos import make_mini
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import TaskSetError, load_task_set

    make_mini(tmp_path / "tasks", split="heldout", repos=1, tasks_per_repo=1, seed=0, snapshot_format="tar.gz")
    ts = load_task_set(tmp_path / "tasks")
    archive = next((tmp_path / "tasks" / "snapshots").glob("*.tar.gz"))
    archive.write_bytes(archive.read_bytes()[:100])
    with TaskSandboxFactory(ts, kind="local", run_id="pytest-bad") as fac, \
            pytest.raises(TaskSetError, match=rf"{archive.name}: snapshot archive .* is corrupt.*fix"):
        fac.preflight()


def test_unbuildable_policy_is_a_clear_error(tmp_path: Path) -> None:
    from harness.runner import run_eval
    from harness.schema import TaskSet

    inst, repo = make_calc_task(tmp_path)
    ts = TaskSet(name="t", path=str(tmp_path), sha256="0", instances=[inst])
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match=r"--policy hf-x=hf:/nonexistent: cannot build it .*fix"):
        run_eval(ts, {"hf-x": "hf:/nonexistent"}, [0], tmp_path / "run",
                 sandbox_factory=FakeFactory({inst.instance_id: repo}))


def test_regrade_of_truncated_output_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from harness.runner import run_eval
    from harness.runner_regrade import regrade_run
    from harness.schema import TaskSet

    inst, repo = make_calc_task(tmp_path)
    ts = TaskSet(name="t", path=str(tmp_path), sha256="0", instances=[inst])
    out = tmp_path / "run"
    run_eval(ts, {"fix": FixPolicy()}, [0], out, sandbox_factory=FakeFactory({inst.instance_id: repo}))
    out_file = next(out.glob("episodes/*/*/s0/a0/grade/test_output.txt"))
    out_file.write_text(out_file.read_text().split(">>>>> Start Test Output")[0] + ">>>>> Start Test Output\nte")
    with caplog.at_level(logging.WARNING):
        res = regrade_run(out, ts)
    assert res[0].resolved and "the recorded grade is kept" in caplog.text and str(out_file) in caplog.text


def test_summary_says_when_a_rerun_will_not_help(capsys: pytest.CaptureFixture[str]) -> None:
    from tgsuite.commands.eval import _summary

    r = EpisodeResult(run_id="r", instance_id="i", repo="r", cluster="r", arm="a", policy="p", seed=0, attempt=2,
                      status="infra_error", failure_class="infra", infra_kind="DOCKER_DAEMON")
    assert _summary([r], 1, max_attempts=3) == 1
    err = capsys.readouterr().err
    assert "will NOT retry" in err and "--max-attempts" in err and "run the same command again" not in err
    assert _summary([r], 1, max_attempts=5) == 1
    assert "run the same command again" in capsys.readouterr().err


def test_frozen_protocol_given_the_plan_toml_or_truncated(tmp_path: Path) -> None:
    from protocols.freeze import load_frozen
    from protocols.load import ProtocolError

    plan = Path(__file__).resolve().parents[2] / "protocols" / "plans" / "smoke.toml"
    with pytest.raises(ProtocolError, match=r"this is a plan TOML, not a frozen record; fix: freeze it first"):
        load_frozen(plan)
    cut = tmp_path / "p.frozen.json"
    cut.write_text('{"sha256": "ab", "protocol": {"name": ')
    with pytest.raises(ProtocolError, match=r"JSON breaks at line 1 column \d+ .*truncated\?\); fix: restore"):
        load_frozen(cut)


def test_cli_out_paths_and_garbage_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.minirepos import make_mini
    from tgsuite.cli import main

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert main(["report", "--analysis", str(a_file), "--out", str(a_file)]) == 2
    assert "is a file; fix: give a folder" in capsys.readouterr().err
    assert main(["analyze", "--protocol", str(a_file), "--runs", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "is a directory; fix: give a file path" in capsys.readouterr().err
    make_mini(tmp_path / "tasks", split="heldout", repos=1, tasks_per_repo=1, seed=0)
    (tmp_path / "tasks" / "validation.json").write_text("garbage")
    assert main(["eval", "--tasks", str(tmp_path / "tasks"), "--policy", "null", "--out", str(tmp_path / "r"),
                 "--sandbox", "local"]) == 2
    assert "validation.json: not a validation report" in capsys.readouterr().err
    for bad in (["--max-turns", "0"], ["--wall-s", "-5"], ["--grade-timeout", "0"]):
        (tmp_path / "tasks" / "validation.json").unlink(missing_ok=True)
        assert main(["eval", "--tasks", str(tmp_path / "tasks"), "--policy", "null", "--out", str(tmp_path / "r2"),
                     "--sandbox", "local", *bad]) == 2
        assert "must be > 0" in capsys.readouterr().err
    assert main(["eval", "--tasks", str(tmp_path / "tasks"), "--policy", "null", "--out", str(tmp_path / "r4"),
                 "--sandbox", "local", "--max-turns", "4", "--finish-notice", "4"]) == 2
    assert "finish_notice_turns (--finish-notice) = 4 must be >= 0 and below max_turns (4)" in capsys.readouterr().err
    assert main(["eval", "--tasks", str(tmp_path / "tasks"), "--policy", "null", "--out", str(tmp_path / "r5"),
                 "--sandbox", "local", "--format-retries", "9"]) == 2
    assert "format_retries (--format-retries) = 9 must be between 0 and 8" in capsys.readouterr().err
    assert main(["eval", "--tasks", str(tmp_path / "tasks"), "--policy", "null", "--out", str(tmp_path / "r3"),
                 "--sandbox", "local", "--disk-mib", "0"]) == 2
    assert "--disk-mib must be >= 1" in capsys.readouterr().err
