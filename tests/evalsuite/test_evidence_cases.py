"""Issue #37: the eight constructions that produced a wrong SHIP, each built as run directories on disk and run
through the library's ``analyze``; each must end INCONCLUSIVE or be refused with the fix."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from evalsuite.analyze import analyze
from evalsuite.outcomes import EvalDataError
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from harness.schema import EpisodeResult, RunManifest
from protocols.anchor import anchor_path
from protocols.deviations import record_deviation
from protocols.freeze import freeze_plan
from protocols.schema import FrozenProtocol, Protocol

SHA = "d" * 64
S5 = (0, 1, 2, 3, 4)
T0 = "2026-01-01T00:00:00Z"


def _plan(*, criteria: list[dict], n_tasks: int = 40, n_repos: int = 8, k: int = 1, estimand: str = "method",
          seeds: int = 5, **extra: object) -> Protocol:  # fmt: skip
    arms = [{"name": "tg", "role": "treatment"}, {"name": "grpo", "role": "baseline"}]
    if estimand == "artifact":
        arms = [{**a, "artifact_seed": 0} for a in arms]
    return Protocol.model_validate({
        "name": "t", "question": "q", "estimand": estimand, "analysis_seed": 1, "arms": arms,
        "task_set": {"name": "synthetic", "sha256": SHA},
        "design": {"seeds_per_arm": seeds, "n_tasks": n_tasks, "n_repositories": n_repos, "episodes_per_task": k},
        "endpoints": [{"id": e, "role": "primary"} for e in ("behaviour_ok", "code_ok", "joint_ok")],
        "criteria": criteria, "coverage_threshold": 0.9, **extra,
    })  # fmt: skip


NI = [{"endpoint": "code_ok", "kind": "noninferiority", "margin": 0.05}]


def _runs(root: Path, rec: FrozenProtocol, design: SyntheticDesign, seed: int = 0) -> list[Path]:
    return write_synthetic_runs(root, design, rng=np.random.default_rng(seed), protocol_hash=rec.sha256,
                                task_set_sha256=SHA)  # fmt: skip


def _results(run: Path) -> list[tuple[Path, EpisodeResult]]:
    return [(p, EpisodeResult.model_validate_json(p.read_text())) for p in sorted(run.glob("episodes/*/*/s*/a*/result.json"))]


def _edit(run: Path, fn: Callable[[Path, EpisodeResult], EpisodeResult | None]) -> None:
    """Rewrite (or delete, when ``fn`` returns None) every result.json of ``run``."""
    for p, r in _results(run):
        new = fn(p, r)
        if new is None:
            shutil.rmtree(p.parent.parent)
        elif new != r:
            p.write_text(new.model_dump_json())


def _manifest(run: Path, **update: object) -> None:
    m = RunManifest.model_validate_json((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(m.model_copy(update=update).model_dump_json(indent=2))


def _ok(r: EpisodeResult, code: bool) -> EpisodeResult:
    return r.model_copy(update={"resolved": code, "joint_ok": code and r.behaviour_ok, "status": "ok" if code else
                                "tests_failed", "failure_class": "none" if code else "agent"})  # fmt: skip


# 1. superiority against a constant arm -----------------------------------------------------------------------------
@pytest.mark.parametrize("min_events, verdict", [(10, "INCONCLUSIVE"), (0, "NO_SHIP")])
def test_1_superiority_against_a_constant_arm_needs_evidence(tmp_path, min_events, verdict):
    """behaviour 2/500 vs 0/500 (Fisher one-sided p 0.25) shipped; now the preregistered minimum event count makes
    it not evidence, and without that rule the restricted-MLE variance floor keeps L below 0."""
    plan = _plan(criteria=[{"endpoint": "behaviour_ok", "kind": "superiority"}], n_tasks=500, n_repos=50,
                 estimand="artifact", seeds=1, decision={"min_events": min_events})  # fmt: skip
    rec = freeze_plan(plan, now=T0)
    d = SyntheticDesign(arms=(SyntheticArm("tg", 1e-6, 0.5, (0,)), SyntheticArm("grpo", 1e-6, 0.5, (0,))),
                        n_repos=50, tasks_per_repo=10)  # fmt: skip
    runs = _runs(tmp_path, rec, d)
    hits = {"repo3__t1", "repo40__t7"}
    _edit(runs[0], lambda p, r: r.model_copy(update={"behaviour_ok": True, "joint_ok": r.resolved})
          if r.arm == "tg@s0" and r.instance_id in hits else r)  # fmt: skip
    res = analyze(rec, runs)
    assert res.arm_summaries and res.decision.verdict == verdict and res.decision.claims == []
    c = res.criteria[0]
    if min_events:
        assert any("fewer than the preregistered decision.min_events = 10" in x for x in res.decision.reasons)
    else:
        assert c.lower_one_sided is not None and c.lower_one_sided < 0 and c.p_value > 0.05


# 2. a missing anchor file -------------------------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "project"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    (r / "README").write_text("x")
    _git(r, "add", "README")
    _git(r, "commit", "-qm", "init")
    return r


NI_DESIGN = SyntheticDesign(arms=(SyntheticArm("tg", 0.5, 0.45, S5), SyntheticArm("grpo", 0.5, 0.6, S5)),
                            n_repos=8, tasks_per_repo=5, seed_sd=0.05)  # fmt: skip


def test_2_a_loosened_rehashed_plan_with_its_anchor_deleted_is_inconclusive(repo):
    out = repo / "t.frozen.json"
    freeze_plan(_plan(criteria=NI), out=out, now=T0)
    loose = _plan(criteria=[{**NI[0], "margin": 0.30}])
    out.unlink()
    anchor_path(out).unlink()
    rec = freeze_plan(loose, out=out, now=T0, anchor=False)
    res = analyze(out, _runs(repo.parent / "runs", rec, NI_DESIGN))
    anchor = next(c for c in res.prereg_checks if c.name == "anchor")
    assert anchor.status == "fail" and "restore t.frozen.json.anchor.json" in anchor.detail
    assert res.decision.verdict == "INCONCLUSIVE" and res.decision.claims == []


# 3. re-freezing after results ---------------------------------------------------------------------------------------
def test_3_refreezing_at_the_same_path_after_results_is_inconclusive(repo):
    out = repo / "t.frozen.json"
    strict = freeze_plan(_plan(criteria=NI), out=out, now=T0)
    runs = _runs(repo.parent / "runs", strict, NI_DESIGN)
    assert analyze(out, runs).decision.verdict == "NO_SHIP"
    loose = freeze_plan(_plan(criteria=[{**NI[0], "margin": 0.30}]), out=out, overwrite=True)
    for r in runs:  # the manifests moved after the new freeze and pointed at it
        _manifest(r, protocol_hash=loose.sha256, created_at="2101-01-01T00:00:00Z")
    res = analyze(out, runs)
    first = next(c for c in res.prereg_checks if c.name == "first_record")
    assert first.status == "fail" and "earlier, different record at t.frozen.json" in first.detail
    assert res.decision.verdict == "INCONCLUSIVE"


def test_3b_episodes_finished_before_the_freeze_are_a_second_clock(repo):
    out = repo / "t.frozen.json"
    rec = freeze_plan(_plan(criteria=NI), out=out)
    runs = _runs(repo.parent / "runs", rec, NI_DESIGN)
    _edit(runs[0], lambda p, r: r.model_copy(update={"finished_at": "2000-01-01T00:00:00Z"}))
    res = analyze(out, runs)
    late = next(c for c in res.prereg_checks if c.name == "before_results")
    assert late.status == "fail" and "first episode finished" in late.detail
    assert res.decision.verdict == "INCONCLUSIVE"


# 4. tasks removed ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_removed", [5, 20])
def test_4_tasks_removed_from_the_manifest_are_inconclusive_without_a_deviation(tmp_path, n_removed):
    plan = _plan(criteria=NI, n_tasks=100, n_repos=10)
    rec = freeze_plan(plan, now=T0)
    d = SyntheticDesign(arms=(SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5)), n_repos=10,
                        tasks_per_repo=10, seed_sd=0.05)  # fmt: skip
    run = _runs(tmp_path / "runs", rec, d)[0]
    m = RunManifest.model_validate_json((run / "manifest.json").read_text())
    fails = {}
    for _, r in _results(run):
        if r.arm.startswith("tg@"):
            fails[r.instance_id] = fails.get(r.instance_id, 0) + (not r.resolved)
    worst = sorted(fails, key=lambda t: -fails[t])[:n_removed]
    _manifest(run, instance_ids=[i for i in m.instance_ids if i not in worst])
    for t in worst:
        shutil.rmtree(run / "episodes" / t)
    res = analyze(rec, [run])
    assert res.decision.verdict == "INCONCLUSIVE" and res.decision.claims == []
    assert any(f"the runs list {100 - n_removed} instances, the plan pinned n_tasks = 100" in x
               and "--kind data_exclusion" in x for x in res.decision.reasons)  # fmt: skip
    dev = record_deviation(tmp_path / "dev.json", protocol_hash=rec.sha256, kind="data_exclusion",
                           description=f"{n_removed} tasks had broken images", justification="rebuilt set failed")  # fmt: skip
    res2 = analyze(rec, [run], deviations_path=tmp_path / "dev.json")
    assert not any("the plan pinned n_tasks" in x for x in res2.decision.reasons) and res2.deviations == [dev]


# 5. two checkpoints per seed, the better kept per task --------------------------------------------------------------
@pytest.mark.parametrize("hashed", [False, True])
def test_5_two_checkpoints_behind_one_seed_are_refused(tmp_path, hashed):
    rec = freeze_plan(_plan(criteria=NI), now=T0)
    a = _runs(tmp_path / "a", rec, NI_DESIGN, seed=0)[0]
    b = _runs(tmp_path / "b", rec, NI_DESIGN, seed=1)[0]
    tasks = sorted(p.name for p in (a / "episodes").iterdir())
    # run b keeps only the treatment's seed-0 episodes, produced by another checkpoint, on the tasks where it did better
    score = {r.instance_id: r.resolved for _, r in _results(a) if r.arm == "tg@s0"}
    better = {r.instance_id for _, r in _results(b) if r.arm == "tg@s0" and r.resolved and not score[r.instance_id]}
    _edit(b, lambda p, r: r.model_copy(update={"policy": "hf:/ckpt/tg-s0-retry"})
          if r.arm == "tg@s0" and r.instance_id in better else None)  # fmt: skip
    _edit(a, lambda p, r: None if r.arm == "tg@s0" and r.instance_id in better else r)
    mb = RunManifest.model_validate_json((b / "manifest.json").read_text())
    spec_b = [s.model_copy(update={"policy": "hf:/ckpt/tg-s0-retry", "checkpoint_sha256": "2" * 64 if hashed else None})
              for s in mb.arms if s.name == "tg@s0"]  # fmt: skip
    _manifest(b, run_id="synthetic-b", arms=spec_b, instance_ids=tasks)
    if hashed:
        ma = RunManifest.model_validate_json((a / "manifest.json").read_text())
        _manifest(a, arms=[s.model_copy(update={"checkpoint_sha256": "1" * 64}) for s in ma.arms])
    assert better
    with pytest.raises(EvalDataError, match="arm tg training seed 0 was evaluated with 2 different") as exc:
        analyze(rec, [a, b])
    assert "analyse the runs of one checkpoint only" in str(exc.value)


def test_5b_an_episode_from_another_policy_inside_one_run_is_refused(tmp_path):
    rec = freeze_plan(_plan(criteria=NI), now=T0)
    run = _runs(tmp_path, rec, NI_DESIGN)[0]
    _edit(run, lambda p, r: r.model_copy(update={"policy": "hf:/other"}) if r.instance_id == "repo0__t0" and
          r.arm == "tg@s1" else r)  # fmt: skip
    with pytest.raises(EvalDataError, match="was produced by 'hf:/other'.*remove the episodes of the other policy"):
        analyze(rec, [run])


# 6. failed episodes re-run ------------------------------------------------------------------------------------------
def test_6_an_agent_failure_rerun_as_a_new_attempt_is_refused(tmp_path):
    rec = freeze_plan(_plan(criteria=NI), now=T0)
    run = _runs(tmp_path, rec, NI_DESIGN)[0]
    n = 0
    for p, r in _results(run):
        if r.arm.startswith("tg@") and not r.resolved and n < 10:
            a1 = p.parent.parent / "a1" / "result.json"
            a1.parent.mkdir()
            a1.write_text(_ok(r, True).model_copy(update={"attempt": 1}).model_dump_json())
            n += 1
    with pytest.raises(EvalDataError, match="10 episode.* re-run after an outcome that was not an infrastructure") as e:
        analyze(rec, [run])
    assert "delete the later attempt directories" in str(e.value) and "/a0 (agent, tests_failed)" in str(e.value)


def test_6b_an_infra_failure_may_be_superseded(tmp_path):
    rec = freeze_plan(_plan(criteria=NI), now=T0)
    run = _runs(tmp_path, rec, NI_DESIGN)[0]
    p, r = next((p, r) for p, r in _results(run) if r.arm == "tg@s0")
    (p.parent.parent / "a1").mkdir()
    shutil.copy(p, p.parent.parent / "a1" / "result.json")
    p.write_text(r.model_copy(update={"status": "infra_error", "failure_class": "infra", "resolved": False,
                                      "behaviour_ok": False, "joint_ok": False}).model_dump_json())  # fmt: skip
    res = analyze(rec, [run])
    assert res.missing_data.superseded_attempts == 1 and res.decision.verdict in ("SHIP", "NO_SHIP")


# 7. K = 2: half-observed cells and copied episodes -----------------------------------------------------------------
K2 = SyntheticDesign(arms=(SyntheticArm("tg", 0.5, 0.58, S5), SyntheticArm("grpo", 0.5, 0.6, S5)), n_repos=12,
                     tasks_per_repo=10, seed_sd=0.05, episodes=2)  # fmt: skip


def _cells(run: Path) -> dict[tuple[str, str], list[tuple[Path, EpisodeResult]]]:
    cells: dict[tuple[str, str], list[tuple[Path, EpisodeResult]]] = {}
    for p, r in _results(run):
        cells.setdefault((r.arm, r.instance_id), []).append((p, r))
    return cells


def _mixed(run: Path) -> list[list[tuple[Path, EpisodeResult]]]:
    """The treatment's cells with one success and one failure."""
    return [v for k, v in _cells(run).items() if k[0].startswith("tg@") and len({r.resolved for _, r in v}) == 2]


def test_7_half_observed_cells_count_as_missing(tmp_path):
    """Deleting 2 % of the treatment's failures (10 of ~500), each from a cell whose other episode succeeded: counted
    as observed, those cells read 1.0 instead of 0.5 and this construction shipped (L -0.0462 > -0.05, measured on
    main at ffe6b74); counted as missing, their tasks leave the analysis and the honest NO_SHIP stands."""
    plan = _plan(criteria=NI, k=2, n_tasks=120, n_repos=12)
    rec = freeze_plan(plan, now=T0)
    run = _runs(tmp_path, rec, K2, seed=2)[0]
    honest = analyze(rec, [run])
    n_fail = sum(not r.resolved for _, r in _results(run) if r.arm.startswith("tg@"))
    cut = {next(p for p, r in v if not r.resolved) for v in _mixed(run)[: int(0.02 * n_fail)]}
    _edit(run, lambda p, r: None if p in cut else r)
    res = analyze(rec, [run])
    partial = [m for m in res.missing_data.missing if m.reason == "partial"]
    tasks = {p.parts[-5] for p in cut}
    assert len(cut) == 10 and len(partial) == 10 and res.missing_data.dropped_tasks == sorted(tasks)
    assert res.missing_data.per_arm_coverage == {"tg": 1 - len(tasks) / 120, "grpo": 1 - len(tasks) / 120}
    assert honest.decision.verdict == "NO_SHIP" and res.decision.verdict == "NO_SHIP"


def test_7_partly_observed_cells_are_filled_by_the_worst_case(tmp_path):
    """A SHIP with a partly observed cell must survive that cell's missing episode counted against the treatment."""
    from evalsuite.assurance import worst_case
    from evalsuite.outcomes import build_outcome_table
    from harness.rundir import load_run

    plan = _plan(criteria=NI, k=2, n_tasks=120, n_repos=12)
    rec = freeze_plan(plan, now=T0)
    run = _runs(tmp_path, rec, K2, seed=2)[0]
    victim = next(p for p, r in _mixed(run)[0] if not r.resolved)
    _edit(run, lambda p, r: None if p == victim else r)
    loaded = [load_run(run)]
    table = build_outcome_table(plan, loaded, missing_fill="worst_case")
    cell = table.episodes[(table.episodes["arm"] == "tg") & (table.episodes["instance_id"] == victim.parts[-5])]
    seed = int(victim.parts[-4].split("@s")[1])
    cell = cell[cell["train_seed"] == seed]
    assert len(cell) == 2 and cell["code_ok"].tolist().count(False) == 1 and (cell["status"] == "missing").sum() == 1
    assert worst_case(plan, loaded, plan.ordered_criteria())  # the NI criterion does not pass the worst case


def test_7b_a_copied_success_in_a_cell_is_refused(tmp_path):
    rec = freeze_plan(_plan(criteria=NI, k=2, n_tasks=120, n_repos=12), now=T0)
    run = _runs(tmp_path, rec, K2, seed=2)[0]
    for v in _mixed(run)[:4]:
        good = next(p for p, r in v if r.resolved)
        bad = next(p for p, r in v if not r.resolved)
        shutil.copy(good, bad)
    with pytest.raises(EvalDataError, match="hold the same episode seed more than once") as e:
        analyze(rec, [run])
    assert "remove the copied result.json" in str(e.value)


# 8. relabelled seeds ------------------------------------------------------------------------------------------------
def test_8_a_relabelled_seed_is_refused_by_its_recorded_train_seed(tmp_path):
    rec = freeze_plan(_plan(criteria=NI), now=T0)
    run = _runs(tmp_path, rec, NI_DESIGN)[0]
    m = RunManifest.model_validate_json((run / "manifest.json").read_text())
    best = {0: 7, 1: 3, 2: 11, 3: 14, 4: 9}  # the best 5 of 15 trained seeds, renamed s0..s4
    _manifest(run, arms=[s.model_copy(update={"train_seed": best[s.train_seed]}) if s.name.startswith("tg@") else s
                         for s in m.arms])  # fmt: skip
    with pytest.raises(EvalDataError, match=r"arm 'tg@s0' is labelled training seed 0 but its manifest records "
                                            r"train_seed 7.*name the arm 'tg@s7'"):  # fmt: skip
        analyze(rec, [run])


def test_8b_a_relabelled_seed_is_refused_by_its_checkpoint_record(tmp_path):
    rec = freeze_plan(_plan(criteria=NI), now=T0)
    run = _runs(tmp_path / "runs", rec, NI_DESIGN)[0]
    m = RunManifest.model_validate_json((run / "manifest.json").read_text())
    arms = []
    for s in m.arms:
        ck = tmp_path / "ckpt" / s.name.replace("@", "_") / "step_10"
        ck.mkdir(parents=True)
        seed = 12 if s.name == "tg@s2" else s.train_seed
        (ck / "checkpoint.json").write_text(json.dumps({"seed": seed, "created_at": "2099-01-01T00:00:00Z"}))
        arms.append(s.model_copy(update={"policy": f"hf:{ck}", "train_seed": None}))
    _manifest(run, arms=arms)
    _edit(run, lambda p, r: r.model_copy(update={"policy": next(a.policy for a in arms if a.name == r.arm)}))
    with pytest.raises(EvalDataError, match=r"arm 'tg@s2' is labelled training seed 2 but .*checkpoint.json records "
                                            r"seed 12.*seeds cannot be relabelled"):  # fmt: skip
        analyze(rec, [run])


# issue 36: single-checkpoint plans -----------------------------------------------------------------------------------
def test_single_checkpoint_plan_maps_plain_arm_names(tmp_path):
    """A user who evaluated arms `cand`/`prod` (no '@s0', no train_seed) under a one-seed plan is not refused."""
    plan = _plan(criteria=NI, n_tasks=40, estimand="artifact", seeds=1).model_copy()
    data = plan.model_dump(mode="json")
    data["arms"] = [{"name": "cand", "role": "treatment", "artifact_seed": 0},
                    {"name": "prod", "role": "baseline", "artifact_seed": 0}]  # fmt: skip
    plan = Protocol.model_validate(data)
    rec = freeze_plan(plan, now=T0)
    d = SyntheticDesign(arms=(SyntheticArm("cand", 0.5, 0.6, (0,)), SyntheticArm("prod", 0.5, 0.6, (0,))), n_repos=8,
                        tasks_per_repo=5, arm_style="per_run")  # fmt: skip
    runs = _runs(tmp_path, rec, d)
    for r in runs:
        m = RunManifest.model_validate_json((r / "manifest.json").read_text())
        _manifest(r, arms=[a.model_copy(update={"train_seed": None}) for a in m.arms])
    res = analyze(rec, runs)
    assert res.arms == {"treatment": "cand", "baseline": "prod"} and res.missing_data.coverage == 1.0
    two_seeds = freeze_plan(_plan(criteria=NI), now=T0)
    for r in runs:
        _manifest(r, protocol_hash=two_seeds.sha256)
    with pytest.raises(EvalDataError, match="arm 'cand' carries no training seed"):
        analyze(two_seeds, runs)


def test_protocol_power_works_for_single_checkpoint_plans(capsys):
    from tgsuite.commands.protocol import _power

    class A:
        plan, seeds, tasks, simulate = "protocols/plans/artifact_checkpoint.toml", None, None, 200

    assert _power(A()) == 0
    out = capsys.readouterr().out
    assert "one checkpoint per arm (artifact estimand)" in out and "code_ok" in out
    assert "simulated (200 sims of the plan's own [power] model, analysed with the interval `tgsuite analyze` uses)" in out


# the CLI agrees with the library ------------------------------------------------------------------------------------
def test_cli_agrees_inconclusive_for_removed_tasks_and_refuses_relabelled_seeds(tmp_path, capsys):
    from tgsuite.cli import main

    rec_path = tmp_path / "rec" / "t.frozen.json"
    rec = freeze_plan(_plan(criteria=NI), out=rec_path, now=T0)
    run = _runs(tmp_path / "runs", rec, NI_DESIGN)[0]
    m = RunManifest.model_validate_json((run / "manifest.json").read_text())
    _manifest(run, instance_ids=m.instance_ids[:-2])
    for t in m.instance_ids[-2:]:
        shutil.rmtree(run / "episodes" / t)
    assert main(["analyze", "--protocol", str(rec_path), "--runs", str(run), "--out", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "decision: INCONCLUSIVE" in out and "reason: the runs list 38 instances, the plan pinned n_tasks = 40" in out
    _manifest(run, instance_ids=m.instance_ids,
              arms=[s.model_copy(update={"train_seed": 9}) if s.name == "tg@s4" else s for s in m.arms])
    assert main(["analyze", "--protocol", str(rec_path), "--runs", str(run), "--out", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert "arm 'tg@s4' is labelled training seed 4 but its manifest records train_seed 9" in err
