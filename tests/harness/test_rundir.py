"""harness.rundir: the one run-directory module (load_run, the manifest, result and trajectory readers) and its
attempt rules, shared by resume (plan_work), results.jsonl (rebuild_results), regrade, the analysis and the report
(both through load_run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.rundir import (
    RunDirError,
    attempt_indices,
    counting_attempt,
    latest_results,
    load_run,
    read_manifest,
    read_result,
)
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


def _report_episodes(run: Path) -> list[EpisodeResult]:
    """The episodes the report lists: build_descriptive_report over the run, capturing what it hands the view."""
    import reports.descriptive as descriptive
    from evalsuite.run_summary import aggregate_run_dir
    from reports.build import build_descriptive_report

    seen: list[EpisodeResult] = []
    real = descriptive.descriptive_view

    def spy(agg, eps, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.extend(eps)
        return real(agg, eps, **kw)

    descriptive.descriptive_view = spy
    try:
        build_descriptive_report(run, aggregate_run_dir(run), out_dir=run.parent / "report", max_trajectory_pages=0)
    finally:
        descriptive.descriptive_view = real
    return seen


def test_every_reader_applies_the_same_rule(tmp_path: Path) -> None:
    from harness.runner import rebuild_results

    run = _run(tmp_path)
    _manifest(run)
    want = [(r.instance_id, r.attempt) for r in latest_results(run).results]
    loaded = load_run(run)
    assert [(r.instance_id, r.attempt) for r in loaded.results] == want and loaded.superseded == 1
    assert [(r.instance_id, r.attempt) for r in _report_episodes(run)] == want
    assert [(r.instance_id, r.attempt) for r in rebuild_results(run)] == want


def test_the_analysis_and_the_report_read_the_same_episodes(tmp_path: Path) -> None:
    """One run directory, whatever its derived results.jsonl says: the analysis's per-episode rows and the
    report's episode list are the same records (the counting attempt of every episode under episodes/)."""
    from evalsuite.studies import episode_frame

    run = _run(tmp_path)
    _manifest(run)
    stale = _res("t1", "tg", 0, 0, False).model_dump_json()  # a results.jsonl from before the retry
    (run / "results.jsonl").write_text(stale + "\n")
    report = _report_episodes(run)
    analysis = load_run(run).results
    assert [r.model_dump() for r in report] == [r.model_dump() for r in analysis]
    assert [(r.instance_id, r.attempt) for r in report] == [("t1", 1), ("t2", 0)]
    frame = episode_frame([run])  # the analysis's per-episode rows of the same run
    assert list(zip(frame["instance_id"], frame["code_ok"], strict=True)) == [(r.instance_id, r.resolved) for r in report]


def test_bad_result_names_the_file_and_the_fix(tmp_path: Path) -> None:
    d = _write(tmp_path / "run", None)
    (d / "result.json").write_text('{"run_id": 3}')
    with pytest.raises(RunDirError, match=r"a0/result\.json: not an episode result \(not a valid EpisodeResult.*fix: restore it from a copy"):
        read_result(d)
    _manifest(tmp_path / "run")
    with pytest.raises(RunDirError, match="not a valid EpisodeResult"):
        load_run(tmp_path / "run")
    (tmp_path / "run" / "manifest.json").write_text('{"run_id": 3}')
    with pytest.raises(RunDirError, match=r"manifest\.json: not a run manifest \(not a valid RunManifest.*fix: use"):
        read_manifest(tmp_path / "run")


def test_rundir_needs_neither_docker_nor_torch() -> None:
    tree = ast.parse((Path(__file__).resolve().parents[2] / "harness" / "rundir.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m.split(".")[0] for m in mods if m} <= {"__future__", "hashlib", "json", "re", "collections", "dataclasses",
                                                      "pathlib", "pydantic", "harness"}
    assert {m for m in mods if m and m.startswith("harness")} == {"harness.schema"}
