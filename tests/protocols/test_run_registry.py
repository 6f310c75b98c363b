"""Runs registered under a frozen plan (``protocols.run_registry``): without a record of the runs made under a plan,
an analyst could evaluate twice and pass the better run, or freeze a looser plan after seeing a run and evaluate
again, and the analysis had no way to tell. Every run made with ``protocol_record`` is committed to the prereg ref
before its first episode, and ``tgsuite analyze`` reports ``registered_runs`` and ``no_earlier_runs``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evalsuite.analyze import analyze
from harness.infra import RetryPolicy
from harness.rundir import read_manifest
from harness.runner import run_eval
from harness.schema import TaskSet
from protocols.anchor import PREREG_REF
from protocols.deviations import default_log_path, record_deviation
from protocols.freeze import freeze_plan, load_frozen
from protocols.run_registry import registrations, registry_path
from protocols.schema import DeviationKind, Protocol
from tests.harness_fakes import FakeFactory, FixPolicy, NullFinishPolicy, calc_task_set

SHA = "c" * 64


class Fix(FixPolicy):
    name = spec = "fix"


class Null(NullFinishPolicy):
    spec = "null"


def _plan(margin: float) -> Protocol:
    return Protocol.model_validate({
        "name": "t", "question": "q", "estimand": "artifact", "analysis_seed": 1,
        "arms": [{"name": "tg", "role": "treatment", "artifact_seed": 0},
                 {"name": "grpo", "role": "baseline", "artifact_seed": 0}],
        "task_set": {"name": "calc", "sha256": SHA},
        "design": {"seeds_per_arm": 1, "n_tasks": 2, "n_repositories": 1},
        "endpoints": [{"id": "code_ok", "role": "primary"}],
        "criteria": [{"endpoint": "code_ok", "kind": "noninferiority", "margin": margin}], "coverage_threshold": 0.9,
    })  # fmt: skip


@pytest.fixture
def tasks(tmp_path: Path) -> tuple[TaskSet, dict[str, Path]]:
    return calc_task_set(tmp_path, SHA)


@pytest.fixture
def record(tmp_path: Path) -> Path:
    out = tmp_path / "prereg" / "plan.frozen.json"
    freeze_plan(_plan(0.2), out=out, now="2026-01-01T00:00:00Z")
    return out


def _eval(tasks, out: Path, record: Path | None, *, seeds=(0,), arms=None, protocol_hash=None) -> Path:  # noqa: ANN001
    ts, repos = tasks
    run_eval(ts, arms or {"tg@s0": Fix(), "grpo@s0": Null()}, list(seeds), out, sandbox_factory=FakeFactory(repos),
             protocol_record=record, protocol_hash=protocol_hash, retry=RetryPolicy(backoff_s=0.0))
    return out


def _check(res, name: str):  # noqa: ANN001, ANN202
    return next(c for c in res.prereg_checks if c.name == name)


def _deviate(record: Path, kind: DeviationKind, run_id: str, description: str, justification: str) -> None:
    """Record a deviation in the log next to ``record`` (as `tgsuite protocol deviation` does)."""
    record_deviation(default_log_path(record), protocol_hash=load_frozen(record).sha256, kind=kind, run_id=run_id,
                     description=description, justification=justification)  # fmt: skip


def _ref_commits(repo: Path) -> int:
    return int(subprocess.run(["git", "rev-list", "--count", PREREG_REF], cwd=repo, capture_output=True, text=True,
                              check=True).stdout)  # fmt: skip


def test_a_run_is_registered_before_its_first_episode_and_passes(tmp_path, tasks, record) -> None:  # noqa: ANN001
    run = _eval(tasks, tmp_path / "run", record)
    m = read_manifest(run)
    assert m is not None and m.registration is not None
    regs = registrations(record.parent)
    assert [r.run_id for r in regs] == [m.run_id]
    assert regs[0].path_in_ref == registry_path(m.protocol_hash or "", m.run_id)
    assert regs[0].manifest["task_set_sha256"] == SHA and "host" not in regs[0].manifest
    assert regs[0].run_dir == str(run.resolve())  # outside the record's repository: the full path
    res = analyze(record, [run])
    assert _check(res, "registered_runs").status == "pass"
    assert _check(res, "no_earlier_runs").status == "pass"
    assert not any("registered_runs" in r or "no_earlier_runs" in r for r in res.decision.reasons)


def test_a_resume_registers_again_only_when_the_run_changed(tmp_path, tasks, record) -> None:  # noqa: ANN001
    run = _eval(tasks, tmp_path / "run", record)
    first = _ref_commits(record.parent)
    _eval(tasks, run, record)  # the same command again: nothing new to register
    assert _ref_commits(record.parent) == first
    _eval(tasks, run, record, seeds=(0, 1))  # a seed added: the registration follows the run
    assert _ref_commits(record.parent) == first + 1
    (reg,) = registrations(record.parent)
    assert reg.manifest["seeds"] == [0, 1]
    assert read_manifest(run).registration == subprocess.run(  # type: ignore[union-attr]
        ["git", "rev-parse", PREREG_REF], cwd=record.parent, capture_output=True, text=True).stdout.strip()


def test_evaluating_twice_and_passing_one_run_fails_the_check(tmp_path, tasks, record) -> None:  # noqa: ANN001
    """The hole: two complete evaluations under one plan, the better one passed to the analysis."""
    first = _eval(tasks, tmp_path / "first", record)
    second = _eval(tasks, tmp_path / "second", record)
    res = analyze(record, [second])
    chk = _check(res, "registered_runs")
    first_id = read_manifest(first).run_id  # type: ignore[union-attr]
    assert chk.status == "fail" and first_id in chk.detail and "data_exclusion" in chk.detail
    assert res.decision.verdict == "INCONCLUSIVE"
    assert any("registered_runs" in r for r in res.decision.reasons)
    # set aside for a reason stated in the deviation log: the check passes and the report shows the deviation
    _deviate(record, "data_exclusion", first_id, "first run used a broken image",
             "the grader image was rebuilt before any result was read")
    res = analyze(record, [second])
    assert _check(res, "registered_runs").status == "pass" and "set aside" in _check(res, "registered_runs").detail
    assert any(d.run_id == first_id for d in res.deviations)


def test_a_run_on_another_task_set_or_arm_is_not_counted(tmp_path, tasks, record) -> None:  # noqa: ANN001
    """Exploratory runs under the plan (the SFT start, another arm) did not evaluate its cells."""
    main = _eval(tasks, tmp_path / "main", record)
    _eval(tasks, tmp_path / "base", record, arms={"base": Null()})
    assert len(registrations(record.parent)) == 2
    assert _check(analyze(record, [main]), "registered_runs").status == "pass"


def test_a_run_made_without_registration_is_reported_not_available(tmp_path, tasks, record) -> None:  # noqa: ANN001
    run = _eval(tasks, tmp_path / "run", None, protocol_hash=load_frozen(record).sha256)
    assert read_manifest(run).registration is None  # type: ignore[union-attr]
    res = analyze(record, [run])
    chk = _check(res, "registered_runs")
    assert chk.status == "not_available" and "not registered" in chk.detail
    assert any("registered_runs" in w for w in res.warnings)


def test_a_looser_plan_frozen_after_a_run_fails_no_earlier_runs(tmp_path, tasks, record) -> None:  # noqa: ANN001
    """The other hole: a run under plan A, then plan B (a looser margin) frozen into a new file and evaluated."""
    early = _eval(tasks, tmp_path / "early", record)
    looser = record.with_name("looser.frozen.json")
    freeze_plan(_plan(0.5), out=looser, now="2026-01-02T00:00:00Z")
    late = _eval(tasks, tmp_path / "late", looser)
    res = analyze(looser, [late])
    chk = _check(res, "no_earlier_runs")
    early_id = read_manifest(early).run_id  # type: ignore[union-attr]
    assert chk.status == "fail" and early_id in chk.detail and "run_before_freeze" in chk.detail
    assert res.decision.verdict == "INCONCLUSIVE"
    assert _check(res, "registered_runs").status == "pass"
    _deviate(looser, "run_before_freeze", early_id, "margin widened after run " + early_id,
             "the first margin was below the grader's noise floor")
    assert _check(analyze(looser, [late]), "no_earlier_runs").status == "pass"
    # the earlier plan is unaffected by the later one's runs: they were registered after it was frozen
    assert _check(analyze(record, [early]), "no_earlier_runs").status == "pass"


def test_a_registration_gone_from_the_ref_fails(tmp_path, tasks, record) -> None:  # noqa: ANN001
    run = _eval(tasks, tmp_path / "run", record)
    subprocess.run(["git", "update-ref", "-d", PREREG_REF], cwd=record.parent, check=True)
    chk = _check(analyze(record, [run]), "registered_runs")
    assert chk.status == "fail" and "holds no such registration" in chk.detail


def test_a_record_without_its_anchor_cannot_take_a_run(tmp_path, tasks, record) -> None:  # noqa: ANN001
    record.with_name(record.name + ".anchor.json").unlink()
    with pytest.raises(ValueError, match=r"no plan.frozen.json.anchor.json next to the record, so runs made under it "
                                         r"cannot be registered.*fix: freeze the plan"):  # fmt: skip
        _eval(tasks, tmp_path / "run", record)
    assert not (tmp_path / "run" / "episodes").exists()  # refused before any episode


def test_a_record_whose_repository_is_elsewhere_cannot_take_a_run(tmp_path, tasks, record) -> None:  # noqa: ANN001
    moved = tmp_path / "moved"
    record.parent.rename(moved)  # the record and its anchor copied to another machine, without the repository
    with pytest.raises(ValueError, match=r"prereg repository .* is not on this machine.*fix: start the evaluation "
                                         "where the record was frozen"):  # fmt: skip
        _eval(tasks, tmp_path / "run", moved / record.name)


def test_protocol_check_lists_the_registered_runs(tmp_path, tasks, record, capsys) -> None:  # noqa: ANN001
    from tgsuite.cli import main

    run = _eval(tasks, tmp_path / "run", record)
    assert main(["protocol", "check", str(record)]) == 0
    out = capsys.readouterr().out
    assert "1 run(s) registered under this plan:" in out
    run_id = read_manifest(run).run_id  # type: ignore[union-attr]
    assert f"{run_id}: registered " in out and "arms tg@s0, grpo@s0" in out


def test_a_run_begun_unregistered_stays_so_on_a_resume(tmp_path, tasks, record, caplog) -> None:  # noqa: ANN001
    """Registering a run that already holds results would not show it was the only one: it stays unregistered."""
    run = _eval(tasks, tmp_path / "run", None, protocol_hash=load_frozen(record).sha256)
    _eval(tasks, run, record)
    assert read_manifest(run).registration is None and registrations(record.parent) == []  # type: ignore[union-attr]
    assert "holds episodes but was never registered" in caplog.text
    assert _check(analyze(record, [run]), "registered_runs").status == "not_available"


def test_concurrent_registrations_are_all_kept(record) -> None:  # noqa: ANN001
    """Evaluations started together under one record each move the ref; none may overwrite another's registration."""
    from concurrent.futures import ThreadPoolExecutor

    from protocols.run_registry import register_run

    sha = load_frozen(record).sha256
    manifests = [{"run_id": f"run-{i}", "protocol_hash": sha, "task_set_sha256": SHA, "arms": []} for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        commits = list(pool.map(lambda m: register_run(record, m, record.parent / str(m["run_id"])), manifests))
    assert len(set(commits)) == 6
    assert sorted(r.run_id for r in registrations(record.parent)) == [f"run-{i}" for i in range(6)]


def test_a_damaged_anchor_fails_its_check_and_the_analysis_runs(tmp_path, tasks, record) -> None:  # noqa: ANN001
    run = _eval(tasks, tmp_path / "run", record)
    record.with_name(record.name + ".anchor.json").write_text("{not json")
    res = analyze(record, [run])
    assert _check(res, "anchor").status == "fail" and res.decision.verdict == "INCONCLUSIVE"
    assert _check(res, "registered_runs").status == "not_available"
