"""harness.rundir: the one run-directory reader and its attempt rules, shared by resume (plan_work),
results.jsonl (rebuild_results), regrade, the analysis (evalsuite.outcomes.load_run) and the report
(reports.episodes.read_results)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.rundir import RunDirError, attempt_indices, counting_attempt, latest_results, read_result
from harness.schema import ArmSpec, EpisodeResult, RunManifest


def _res(iid: str, arm: str, seed: int, attempt: int, resolved: bool) -> EpisodeResult:
    return EpisodeResult(run_id="r", instance_id=iid, repo="repo", cluster="repo", arm=arm, policy="p", seed=seed, attempt=attempt,
                         status="ok" if resolved else "tests_failed", failure_class="none" if resolved else "agent",
                         resolved=resolved, behaviour_ok=True, joint_ok=resolved)


def _write(run: Path, res: EpisodeResult | None, iid: str = "t1", arm: str = "tg", seed: int = 0,
           attempt: int = 0) -> Path:
    d = run / "episodes" / iid / arm / f"s{seed}" / f"a{attempt}"
    d.mkdir(parents=True, exist_ok=True)
    if res is not None:
        (d / "result.json").write_text(res.model_dump_json())
    return d


def _manifest(run: Path) -> None:
    man = RunManifest(run_id="r", created_at="2026-01-01T00:00:00Z", task_set_name="t", task_set_sha256="0" * 64,
                      instance_ids=["t1", "t2", "t3"], arms=[ArmSpec(name="tg", policy="p")], seeds=[0], sandbox="local",
                      isolated=False)
    (run / "manifest.json").write_text(man.model_dump_json())


def _run(tmp_path: Path) -> Path:
    """t1: a0 finished (failed), a1 finished (resolved), a2 crashed; t2: a0 finished; t3: a0 crashed only."""
    run = tmp_path / "run"
    _write(run, _res("t1", "tg", 0, 0, False), attempt=0)
    _write(run, _res("t1", "tg", 0, 1, True), attempt=1)
    _write(run, None, attempt=2)
    _write(run, _res("t2", "tg", 0, 0, False), iid="t2")
    _write(run, None, iid="t3")
    return run


def test_the_highest_finished_attempt_counts(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ep = run / "episodes" / "t1" / "tg" / "s0"
    assert attempt_indices(ep) == [0, 1, 2] and attempt_indices(tmp_path / "none") == []
    assert counting_attempt(ep) is not None and counting_attempt(ep)[0] == 1
    assert counting_attempt(run / "episodes" / "t3" / "tg" / "s0") is None
    latest = latest_results(run)
    assert [(r.instance_id, r.attempt, r.resolved) for r in latest.results] == [("t1", 1, True), ("t2", 0, False)]
    assert latest.superseded == 1


def test_every_reader_applies_the_same_rule(tmp_path: Path) -> None:
    from evalsuite.outcomes import load_run as analysis_load
    from harness.runner import rebuild_results
    from reports.episodes import read_results as report_read

    run = _run(tmp_path)
    _manifest(run)
    want = [(r.instance_id, r.attempt) for r in latest_results(run).results]
    report = [(r.instance_id, r.attempt) for r in report_read(run)]  # no results.jsonl: it kept every attempt before
    assert report == want
    loaded = analysis_load(run)
    assert sorted((r.instance_id, r.attempt) for r in loaded.results) == want and loaded.superseded == 1
    assert [(r.instance_id, r.attempt) for r in rebuild_results(run)] == want
    assert [(r.instance_id, r.attempt) for r in report_read(run)] == want  # now from the rebuilt results.jsonl


def test_bad_result_names_the_file_and_the_fix(tmp_path: Path) -> None:
    d = _write(tmp_path / "run", None)
    (d / "result.json").write_text('{"run_id": 3}')
    with pytest.raises(RunDirError, match=r"a0/result\.json: not an episode result \(not a valid EpisodeResult.*fix: delete"):
        read_result(d)
    from evalsuite.outcomes import EvalDataError, load_run

    _manifest(tmp_path / "run")
    with pytest.raises(EvalDataError, match="not a valid EpisodeResult"):
        load_run(tmp_path / "run")


def test_rundir_needs_neither_docker_nor_torch() -> None:
    tree = ast.parse((Path(__file__).resolve().parents[2] / "harness" / "rundir.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m.split(".")[0] for m in mods if m} <= {"__future__", "re", "collections", "dataclasses", "pathlib",
                                                      "pydantic", "harness"}
    assert {m for m in mods if m and m.startswith("harness")} == {"harness.schema"}
