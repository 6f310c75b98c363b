"""Results produced more than once: two evaluations of the same cells, mixed cell by cell, read as one complete run
(coverage 1.0) and could turn two NO_SHIP runs into a SHIP. ``evalsuite.integrity.one_evaluation_per_cell``."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from evalsuite.analyze import analyze
from evalsuite.outcomes import EvalDataError
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from harness.rundir import load_run
from harness.schema import EpisodeResult, RunManifest
from protocols.freeze import freeze_plan
from protocols.schema import FrozenProtocol, Protocol

SHA = "e" * 64
CRITERIA = [{"endpoint": "code_ok", "kind": "noninferiority", "margin": 0.2},
            {"endpoint": "behaviour_ok", "kind": "superiority_margin", "threshold": 0.2},
            {"endpoint": "joint_ok", "kind": "superiority"}]  # fmt: skip


@pytest.fixture
def rec() -> FrozenProtocol:
    plan = Protocol.model_validate({
        "name": "t", "question": "q", "estimand": "method", "analysis_seed": 3,
        "arms": [{"name": "tg", "role": "treatment"}, {"name": "grpo", "role": "baseline"}],
        "task_set": {"name": "synthetic", "sha256": SHA},
        "design": {"seeds_per_arm": 5, "n_tasks": 40, "n_repositories": 8},
        "endpoints": [{"id": e, "role": "primary"} for e in ("behaviour_ok", "code_ok", "joint_ok")],
        "criteria": CRITERIA, "coverage_threshold": 0.9, "bootstrap_resamples": 500,
    })  # fmt: skip
    return freeze_plan(plan, now="2026-01-01T00:00:00Z")


def _run(root: Path, rec: FrozenProtocol, seed: int, run_id: str) -> Path:
    """One synthetic evaluation of every cell, renamed to ``run_id`` (as a second `tgsuite eval --out` would be)."""
    arms = (SyntheticArm("tg", 0.52, 0.6, seeds=(0, 1, 2, 3, 4)), SyntheticArm("grpo", 0.3, 0.6, seeds=(0, 1, 2, 3, 4)))
    d = SyntheticDesign(arms=arms, n_repos=8, tasks_per_repo=5, seed_sd=0.05)
    run = write_synthetic_runs(root, d, rng=np.random.default_rng(seed), protocol_hash=rec.sha256,
                               task_set_sha256=SHA)[0]  # fmt: skip
    m = RunManifest.model_validate_json((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(m.model_copy(update={"run_id": run_id}).model_dump_json())
    for p in run.glob("episodes/*/*/s*/a*/result.json"):
        r = EpisodeResult.model_validate_json(p.read_text())
        p.write_text(r.model_copy(update={"run_id": run_id}).model_dump_json())
    return run


def _score(r: EpisodeResult) -> int:
    return 2 * r.joint_ok + r.behaviour_ok + r.resolved


def test_two_evaluations_mixed_cell_by_cell_are_refused(tmp_path, rec):
    a, b = _run(tmp_path / "a", rec, 1, "eval-a"), _run(tmp_path / "b", rec, 2, "eval-b")
    assert analyze(rec, [a]).decision.verdict == "NO_SHIP"
    assert analyze(rec, [b]).decision.verdict == "NO_SHIP"
    other = {(r.instance_id, r.arm, r.seed): _score(r) for r in load_run(b).results}
    for r in load_run(a).results:  # keep the treatment's better episode of the two, and run a's baseline
        better_in_b = r.arm.startswith("tg@") and other[(r.instance_id, r.arm, r.seed)] > _score(r)
        shutil.rmtree((a if better_in_b else b) / "episodes" / r.instance_id / r.arm / f"s{r.seed}")
    # before the check: no duplicate left, coverage 1.0, and the two NO_SHIP evaluations read SHIP
    with pytest.raises(EvalDataError, match=r"runs eval-a .* and eval-b .* both evaluated 400 cell\(s\)") as exc:
        analyze(rec, [a, b])
    assert "analyse one evaluation of each arm and seed" in str(exc.value)


def test_a_run_given_twice_is_refused(tmp_path, rec):
    a = _run(tmp_path / "a", rec, 1, "eval-a")
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    with pytest.raises(EvalDataError, match="run eval-a is given twice"):
        analyze(rec, [a, copy])


def test_an_episode_copied_from_another_run_is_refused(tmp_path, rec):
    a, b = _run(tmp_path / "a", rec, 1, "eval-a"), _run(tmp_path / "b", rec, 2, "eval-b")
    ep = "episodes/repo0__t0/tg@s0/s0"
    shutil.rmtree(a / ep)
    shutil.copytree(b / ep, a / ep)
    with pytest.raises(EvalDataError, match=r"1 episode\(s\) were written by another run .*names run 'eval-b'"):
        analyze(rec, [a])


def test_runs_that_split_the_cells_are_accepted(tmp_path, rec):
    """One run per arm x seed (or per instance subset) evaluates each cell once: not refused."""
    d = SyntheticDesign(arms=(SyntheticArm("tg", 0.9, 0.6, seeds=(0, 1, 2, 3, 4)),
                              SyntheticArm("grpo", 0.2, 0.6, seeds=(0, 1, 2, 3, 4))),
                        n_repos=8, tasks_per_repo=5, seed_sd=0.05, arm_style="per_run")  # fmt: skip
    runs = write_synthetic_runs(tmp_path, d, rng=np.random.default_rng(0), protocol_hash=rec.sha256,
                                task_set_sha256=SHA)  # fmt: skip
    assert len(runs) == 10 and analyze(rec, runs).decision.verdict == "SHIP"


def test_a_deviation_log_that_does_not_exist_is_an_error(tmp_path, rec):
    """A mistyped --deviations path read as 'no deviations': the recorded ones vanished from the analysis silently."""
    from protocols.load import ProtocolError

    a = _run(tmp_path / "a", rec, 1, "eval-a")
    with pytest.raises(ProtocolError, match=r"devs.json: deviation log not found.*leave --deviations out"):
        analyze(rec, [a], deviations_path=tmp_path / "devs.json")


def test_a_policy_object_without_a_spec_is_its_own_arm(tmp_path, rec):
    """``run_eval`` given a policy object without ``spec`` records ``object:<name>`` in the manifest and ``<name>`` in
    the episodes; the analysis refused such a run as "produced by another policy". Another name is still refused."""
    from evalsuite.integrity import checkpoint_identity

    run = _run(tmp_path / "a", rec, 1, "eval-a")
    m = RunManifest.model_validate_json((run / "manifest.json").read_text())
    arms = [a.model_copy(update={"policy": f"object:{a.name.split('@')[0]}"}) for a in m.arms]
    (run / "manifest.json").write_text(m.model_copy(update={"arms": arms}).model_dump_json())
    for p in run.glob("episodes/*/*/s*/a*/result.json"):
        r = EpisodeResult.model_validate_json(p.read_text())
        p.write_text(r.model_copy(update={"policy": r.arm.split("@")[0]}).model_dump_json())
    checkpoint_identity(rec.protocol, [load_run(run)])
    p = next(run.glob("episodes/*/*/s*/a*/result.json"))
    r = EpisodeResult.model_validate_json(p.read_text())
    p.write_text(r.model_copy(update={"policy": "someone-else"}).model_dump_json())
    with pytest.raises(EvalDataError, match="was produced by 'someone-else'"):
        checkpoint_identity(rec.protocol, [load_run(run)])
