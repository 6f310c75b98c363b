"""End-to-end analysis on SYNTHETIC run directories: decisions, provenance refusals, arm encodings, missing data,
the CLI, and JSON round trips."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import numpy as np
import pytest

from evalsuite.analyze import analyze
from evalsuite.outcomes import build_outcome_table
from evalsuite.schema import AnalysisResult
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from harness.schema import EpisodeResult
from protocols.deviations import default_log_path, record_deviation
from protocols.freeze import freeze_plan
from protocols.load import ProtocolError
from protocols.schema import FrozenProtocol, Protocol

SHA = "a" * 64


def make_plan(**over) -> Protocol:
    data = {
        "name": "t", "question": "q", "estimand": "method", "analysis_seed": 3,
        "arms": [{"name": "tg", "role": "treatment"}, {"name": "grpo", "role": "baseline"}],
        "task_set": {"name": "synthetic", "sha256": SHA},
        "design": {"seeds_per_arm": 5, "n_tasks": 40, "n_repositories": 8},
        "endpoints": [{"id": e, "role": "primary"} for e in ("behaviour_ok", "code_ok", "joint_ok")]
        + [{"id": "steps", "role": "secondary"}],
        "criteria": [
            {"endpoint": "code_ok", "kind": "noninferiority", "margin": 0.2},
            {"endpoint": "behaviour_ok", "kind": "superiority_margin", "threshold": 0.2},
            {"endpoint": "joint_ok", "kind": "superiority"},
        ],
        "coverage_threshold": 0.9, "bootstrap_resamples": 500,
    }  # fmt: skip
    data.update(over)
    return Protocol.model_validate(data)


def make_runs(root: Path, frozen: FrozenProtocol, *, tg=(0.9, 0.6), grpo=(0.2, 0.6), seeds=(0, 1, 2, 3, 4), seed=0,
              **design) -> list[Path]:  # fmt: skip
    d = SyntheticDesign(arms=(SyntheticArm("tg", *tg, seeds=seeds), SyntheticArm("grpo", *grpo, seeds=seeds)),
                        n_repos=8, tasks_per_repo=5, seed_sd=0.05, **design)  # fmt: skip
    return write_synthetic_runs(root, d, rng=np.random.default_rng(seed), protocol_hash=frozen.sha256,
                                task_set_sha256=SHA)  # fmt: skip


@pytest.fixture
def frozen() -> FrozenProtocol:
    return freeze_plan(make_plan(), now="2026-01-01T00:00:00Z")


def test_clear_effect_ships_and_round_trips(tmp_path, frozen):
    res = analyze(frozen, make_runs(tmp_path, frozen))
    assert res.decision.verdict == "SHIP", res.decision.reasons
    assert [c.endpoint for c in res.criteria] == ["code_ok", "behaviour_ok", "joint_ok"]
    assert res.decision.claims == ["code_ok", "behaviour_ok", "joint_ok"]
    b = res.criterion("behaviour_ok")
    assert b.lower_one_sided > 0.2 and b.n_seeds_treatment == 5 and b.n_repos == 8 and b.variance is not None
    assert b.variance.var_total == pytest.approx(b.variance.var_training_seeds + b.variance.var_task_given_ckpts)
    assert {a.role for a in res.arm_summaries} == {"treatment", "baseline"}
    assert sum(a.joint_table.n for a in res.arm_summaries) == res.missing_data.analysed_episodes == 400
    assert res.missing_data.coverage == 1.0 and res.run_ids == ["synthetic-all"]
    assert {r.by for r in res.breakdowns} >= {"repo", "difficulty"}
    assert res.secondary[0].endpoint == "steps"
    assert AnalysisResult.model_validate_json(res.model_dump_json()) == res


def test_no_behaviour_gain_is_no_ship(tmp_path, frozen):
    res = analyze(frozen, make_runs(tmp_path, frozen, tg=(0.2, 0.6)))
    assert res.decision.verdict == "NO_SHIP"
    assert res.criterion("behaviour_ok").verdict == "fail"
    assert res.decision.claims == ["code_ok"]  # fixed sequence stops at the first failure


def test_low_coverage_is_inconclusive(tmp_path, frozen):
    drop = tuple(("tg", s, f"repo{g}__t{t}") for s in (0, 1, 2) for g in range(8) for t in range(2))
    res = analyze(frozen, make_runs(tmp_path, frozen, drop=drop))
    assert res.decision.verdict == "INCONCLUSIVE"
    assert res.decision.reasons[0].startswith("coverage")
    md = res.missing_data
    # coverage is counted after the 16 incomplete tasks are dropped, per arm: 24 of 40 tasks remain
    assert md.coverage == pytest.approx(24 / 40) and not md.coverage_ok and len(md.missing) == 48
    assert md.per_arm_coverage == {"tg": pytest.approx(0.6), "grpo": pytest.approx(0.6)}
    assert len(md.dropped_tasks) == 16


def test_one_seed_per_arm_is_inconclusive(tmp_path, frozen):
    res = analyze(frozen, make_runs(tmp_path, frozen, seeds=(0,)))
    assert res.decision.verdict == "INCONCLUSIVE"
    assert all(c.verdict == "not_evaluated" for c in res.criteria)
    assert any("2 training seeds per arm" in r for r in res.decision.reasons)


def test_provenance_refusals_and_deviations(tmp_path):
    plan_path = tmp_path / "plan.json"
    rec = freeze_plan(make_plan(), out=tmp_path / "p.frozen.json", now="2026-01-01T00:00:00Z")
    other = freeze_plan(make_plan(analysis_seed=4))
    runs = make_runs(tmp_path / "runs", other)  # manifest names another plan
    with pytest.raises(ProtocolError, match="names .* the frozen plan is"):
        analyze(tmp_path / "p.frozen.json", runs)
    record_deviation(default_log_path(tmp_path / "p.frozen.json"), protocol_hash=rec.sha256,
                     kind="protocol_hash_mismatch", description="runs tagged with a draft plan",
                     justification="typo in the runner flag", run_id="synthetic-all")  # fmt: skip
    res = analyze(tmp_path / "p.frozen.json", runs)
    assert [d.kind for d in res.deviations] == ["protocol_hash_mismatch"]
    early = freeze_plan(make_plan(), now="2200-01-01T00:00:00Z")  # runs (2100) predate this freeze
    with pytest.raises(ProtocolError, match="before .* the freeze"):
        analyze(early, make_runs(tmp_path / "runs2", early))
    changed = make_plan(coverage_threshold=0.5)
    with pytest.raises(ProtocolError, match="changed after freezing"):
        analyze(rec, make_runs(tmp_path / "runs3", rec), plan=changed)
    assert not plan_path.exists()


def test_task_set_mismatch_refused(tmp_path):
    rec = freeze_plan(make_plan(task_set={"name": "x", "sha256": "c" * 64}))
    with pytest.raises(ProtocolError, match="task set"):
        analyze(rec, make_runs(tmp_path, rec))


def test_arm_encodings_agree(tmp_path, frozen):
    a = analyze(frozen, make_runs(tmp_path / "at", frozen, seed=5))
    b = analyze(frozen, make_runs(tmp_path / "per", frozen, seed=5, arm_style="per_run"))
    assert len(b.run_ids) == 10
    for ca, cb in zip(a.criteria, b.criteria, strict=True):
        assert ca.estimate == pytest.approx(cb.estimate) and ca.lower_one_sided == pytest.approx(cb.lower_one_sided)


def test_highest_attempt_wins_and_infra_rules(tmp_path, frozen):
    runs = make_runs(tmp_path, frozen, infra_rate=0.05, seed=11)
    ep_dir = next((runs[0] / "episodes").glob("*/tg@s0/s0"))
    first = EpisodeResult.model_validate_json((ep_dir / "a0" / "result.json").read_text())
    retry = first.model_copy(update={"attempt": 1, "status": "ok", "failure_class": "none", "resolved": True,
                                     "behaviour_ok": True, "joint_ok": True, "infra_kind": None})  # fmt: skip
    (ep_dir / "a1").mkdir()
    (ep_dir / "a1" / "result.json").write_text(retry.model_dump_json())
    plan = frozen.protocol
    t_ex = build_outcome_table(plan, runs)
    t_ct = build_outcome_table(plan, runs, infra="count_as_failure")
    assert t_ex.superseded == 1
    row = t_ex.episodes[(t_ex.episodes.instance_id == first.instance_id) & (t_ex.episodes.arm == "tg")
                        & (t_ex.episodes.train_seed == 0)]  # fmt: skip
    assert len(row) in (0, 1) and (len(row) == 0 or bool(row.code_ok.iloc[0]))
    assert t_ex.infra_excluded > 0 and t_ct.infra_counted == t_ex.infra_excluded
    assert len(t_ct.episodes) >= len(t_ex.episodes)


def test_artifact_estimand(tmp_path):
    rec = freeze_plan(make_plan(estimand="artifact", arms=[
        {"name": "tg", "role": "treatment", "artifact_seed": 1}, {"name": "grpo", "role": "baseline", "artifact_seed": 0}],
        sensitivity=["gee"]))  # fmt: skip
    res = analyze(rec, make_runs(tmp_path, rec))
    c = res.criterion("behaviour_ok")
    assert c.estimand == "artifact" and c.df == 7 and c.verdict == "pass"
    assert c.sensitivity[0].name == "gee" and c.sensitivity[0].status == "ok"


def test_sensitivities_are_reported_with_agreement(tmp_path):
    rec = freeze_plan(make_plan(sensitivity=["hierarchical_bootstrap", "conservative_df", "per_seed_pairs",
                                             "repo_weighted", "leave_one_repo_out", "infra_as_failure"]))  # fmt: skip
    res = analyze(rec, make_runs(tmp_path, rec))
    c = res.criterion("behaviour_ok")
    names = [s.name for s in c.sensitivity]
    assert names == ["hierarchical_bootstrap", "per_seed_pairs", "conservative_df", "repo_weighted",
                     "leave_one_repo_out", "infra_as_failure"]  # fmt: skip
    boot = c.sensitivity[0]
    assert boot.agrees_with_primary is True and boot.ci_low < c.estimate < boot.ci_high
    assert c.sensitivity[-1].status == "skipped"  # no infra failures
    assert c.sensitivity_agree is not None


def _cli(argv: list[str]) -> int:
    from tgsuite.commands import analyze as analyze_cmd
    from tgsuite.commands import protocol as protocol_cmd
    from tgsuite.commands.common import CLIError

    parser = argparse.ArgumentParser(prog="tgsuite")
    sub = parser.add_subparsers(dest="command")
    protocol_cmd.register(sub)
    analyze_cmd.register(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CLIError:
        return 2


def test_cli_freeze_check_analyze(tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    src = Path("protocols/plans/smoke.toml").read_text().replace('sha256 = "set-by-pipeline"', f'sha256 = "{SHA}"')
    plan.write_text(src.replace("seeds_per_arm = 2", "seeds_per_arm = 5").replace("n_tasks = 12", "n_tasks = 40"))
    frozen_path = tmp_path / "plan.frozen.json"
    assert _cli(["protocol", "freeze", str(plan), "--out", str(frozen_path)]) == 0
    assert _cli(["protocol", "check", str(frozen_path), "--plan", str(plan)]) == 0
    assert _cli(["protocol", "power", str(plan), "--seeds", "3,5", "--tasks", "40,400"]) == 0
    rec = json.loads(frozen_path.read_text())
    runs = make_runs(tmp_path / "runs", FrozenProtocol.model_validate(rec))
    out = tmp_path / "analysis.json"
    assert _cli(["analyze", "--protocol", str(frozen_path), "--runs", *map(str, runs), "--out", str(out)]) == 0
    res = AnalysisResult.model_validate_json(out.read_text())
    assert res.decision.verdict in ("SHIP", "NO_SHIP", "INCONCLUSIVE") and res.protocol_hash == rec["sha256"]
    assert "decision:" in capsys.readouterr().out
    assert _cli(["protocol", "deviation", "--frozen", str(frozen_path), "--kind", "other", "--description", "d",
                 "--justification", "j"]) == 0  # fmt: skip
    assert _cli(["analyze", "--protocol", str(frozen_path), "--runs", *map(str, runs), "--out", str(out)]) == 0
    assert [d.description for d in AnalysisResult.model_validate_json(out.read_text()).deviations] == ["d"]
    assert _cli(["analyze", "--protocol", str(frozen_path), "--runs", str(tmp_path / "nope")]) == 2
    assert _cli(["protocol", "check", str(tmp_path / "missing.json")]) == 2


def test_evalsuite_never_imports_torch_or_docker():
    for path in Path("evalsuite").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for n in names:
                    top = n.split(".")[0]
                    assert top not in {"torch", "docker", "transformers", "repro", "reports"}, f"{path}: {n}"
                    assert n in ("harness.schema", "harness.rundir") or top != "harness", (
                        f"{path}: only harness.schema and harness.rundir (the run-directory reader) allowed, got {n}")


def test_degenerate_primary_falls_back_to_newcombe(tmp_path):
    rec = freeze_plan(make_plan(criteria=[{"endpoint": "behaviour_ok", "kind": "superiority"}]))
    d = SyntheticDesign(arms=(SyntheticArm("tg", 0.999999, 0.5, seeds=(0, 1, 2)),
                              SyntheticArm("grpo", 0.000001, 0.5, seeds=(0, 1, 2))),
                        n_repos=4, tasks_per_repo=5, seed_sd=0.0, task_sd=0.0)  # fmt: skip
    runs = write_synthetic_runs(tmp_path, d, rng=np.random.default_rng(0), protocol_hash=rec.sha256, task_set_sha256=SHA)
    rec = freeze_plan(make_plan(criteria=[{"endpoint": "behaviour_ok", "kind": "superiority"}],
                                design={"seeds_per_arm": 3, "n_tasks": 20, "n_repositories": 4}))  # fmt: skip
    for r in runs:  # re-tag the manifest with the plan actually frozen
        m = json.loads((r / "manifest.json").read_text())
        m["protocol_hash"] = rec.sha256
        (r / "manifest.json").write_text(json.dumps(m))
    c = analyze(rec, runs).criterion("behaviour_ok")
    assert c.fallback_used and "newcombe" in c.fallback_used and c.verdict == "pass"
    assert c.lower_one_sided > 0.8 and any("primary variance was 0" in n for n in c.notes)


def test_dual_power_accounts_for_the_estimate_condition():
    from evalsuite import power_ni_crossed

    kw = dict(margin=0.0, seeds_treatment=5, seeds_baseline=5, n_tasks=500, tasks_per_repo=10, sigma_seed=0.02,
              tau=0.15, icc_repo=0.1, sigma_e2=0.25, true_difference=0.10)  # fmt: skip
    plain = power_ni_crossed(**kw).power
    dual = power_ni_crossed(**kw, min_estimate=0.10).power
    assert dual < plain and dual == pytest.approx(0.5, abs=0.05)  # P(T >= λ) ≈ 1/2 for a noncentral t
