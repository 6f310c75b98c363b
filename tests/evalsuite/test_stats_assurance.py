"""Issue #15: degenerate data, assay sensitivity, preregistered seeds, missing data, the plan's fallback, Holm's family
and claims under INCONCLUSIVE — each case on SYNTHETIC run directories through the full ``analyze`` path."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from evalsuite.analyze import analyze
from evalsuite.multiplicity import holm_adjust
from evalsuite.outcomes import EvalDataError
from evalsuite.schema import SensitivityResult
from evalsuite.sensitivity import mark_informative
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from protocols.freeze import freeze_plan
from protocols.schema import FrozenProtocol, Protocol

SHA = "b" * 64
NI_CODE = {"endpoint": "code_ok", "kind": "noninferiority", "margin": 0.05}


def plan(**over: object) -> Protocol:
    data: dict[str, object] = {
        "name": "t", "question": "q", "estimand": "method", "analysis_seed": 3,
        "arms": [{"name": "tg", "role": "treatment"}, {"name": "grpo", "role": "baseline"}],
        "task_set": {"name": "synthetic", "sha256": SHA},
        "design": {"seeds_per_arm": 5, "n_tasks": 24, "n_repositories": 4},
        "endpoints": [{"id": e, "role": "primary"} for e in ("behaviour_ok", "code_ok", "joint_ok")],
        "criteria": [NI_CODE], "coverage_threshold": 0.9, "bootstrap_resamples": 200,
        "assay_sensitivity": {"min_baseline_rate": 0.1, "max_baseline_rate": 0.9},
    }  # fmt: skip
    data.update(over)
    return Protocol.model_validate(data)


def runs(root: Path, rec: FrozenProtocol, arms: tuple[SyntheticArm, ...], *, n_repos: int = 4, per_repo: int = 6,
         seed: int = 0, **kw: object) -> list[Path]:  # fmt: skip
    d = SyntheticDesign(arms=arms, n_repos=n_repos, tasks_per_repo=per_repo, seed_sd=0.05, **kw)  # type: ignore[arg-type]
    return write_synthetic_runs(root, d, rng=np.random.default_rng(seed), protocol_hash=rec.sha256, task_set_sha256=SHA)


S5 = (0, 1, 2, 3, 4)
NEVER, ALWAYS = 1e-9, 1 - 1e-9


@pytest.mark.parametrize("p", [NEVER, ALWAYS])
def test_floor_and_ceiling_are_not_evidence(tmp_path, p):
    """0/120 vs 0/120 and 120/120 vs 120/120 used to pass NI through the pooled Newcombe fallback (SHIP)."""
    rec = freeze_plan(plan())
    res = analyze(rec, runs(tmp_path, rec, (SyntheticArm("tg", 0.5, p, S5), SyntheticArm("grpo", 0.5, p, S5))))
    c = res.criterion("code_ok")
    assert res.decision.verdict == "INCONCLUSIVE" and c.verdict == "not_evaluated"
    assert any("not evidence" in n and "120 vs" in n for n in c.notes), c.notes
    assert res.decision.claims == [] and not c.claimed
    assert [a.status for a in res.assay_checks] == ["fail"]


def _flip_one(run_dir: Path, arm: str) -> None:
    path = next(p for p in sorted(run_dir.glob(f"episodes/*/{arm}@s0/*/a0/result.json")))
    r = json.loads(path.read_text())
    r.update(resolved=True, status="ok", failure_class="none", joint_ok=r["behaviour_ok"])
    path.write_text(json.dumps(r))


def test_one_in_120_against_zero_fails_assay_sensitivity(tmp_path):
    """1/120 vs 0/120 used to pass the primary estimator itself (df 2)."""
    rec = freeze_plan(plan())
    dirs = runs(tmp_path, rec, (SyntheticArm("tg", 0.5, NEVER, S5), SyntheticArm("grpo", 0.5, NEVER, S5)))
    _flip_one(dirs[0], "tg")
    res = analyze(rec, dirs)
    c = res.criterion("code_ok")
    assert res.decision.verdict == "INCONCLUSIVE" and c.verdict == "not_evaluated"
    assert any("assay sensitivity not shown" in n and "0/120" in n and "below the preregistered minimum" in n
               for n in c.notes), c.notes  # fmt: skip


def test_positive_control_must_fail_noninferiority(tmp_path):
    pc = {"arm": "bad", "description": "known-worse checkpoint"}
    rec = freeze_plan(plan(assay_sensitivity={"positive_control": pc}, design={"seeds_per_arm": 5, "n_tasks": 200,
                                                                                 "n_repositories": 20}))  # fmt: skip
    good = (SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5))
    worse = runs(tmp_path / "a", rec, (*good, SyntheticArm("bad", 0.5, 0.3, S5)), n_repos=20, per_repo=10)
    res = analyze(rec, worse)
    assert res.decision.verdict == "SHIP", res.decision.reasons
    assert [(a.name, a.status) for a in res.assay_checks][-1] == ("positive_control:code_ok", "pass")
    blind = runs(tmp_path / "b", rec, (*good, SyntheticArm("bad", 0.5, 0.6, S5)), n_repos=20, per_repo=10)
    res = analyze(rec, blind)
    assert res.decision.verdict == "INCONCLUSIVE" and res.decision.claims == []
    assert any("cannot tell a worse checkpoint from the baseline" in r for r in res.decision.reasons)


def test_unplanned_seeds_are_refused(tmp_path):
    rec = freeze_plan(plan(design={"seeds_per_arm": 3, "n_tasks": 24, "n_repositories": 4, "seed_ids": [0, 2, 4]}))
    dirs = runs(tmp_path, rec, (SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5)))
    with pytest.raises(EvalDataError, match=r"seeds \[1, 3\] are not preregistered"):
        analyze(rec, dirs)


def test_a_missing_seed_lowers_coverage_or_counts_as_failure(tmp_path):
    arms = (SyntheticArm("tg", 0.9, 0.6, (0, 1, 2, 3)), SyntheticArm("grpo", 0.2, 0.6, S5))
    rec = freeze_plan(plan())
    res = analyze(rec, runs(tmp_path / "a", rec, arms))
    assert res.missing_data.per_arm_coverage["tg"] == pytest.approx(0.8) and res.decision.verdict == "INCONCLUSIVE"
    assert res.criterion("code_ok").n_seeds_treatment == 4
    itt = freeze_plan(plan(missing_data={"missing_cell": "count_as_failure"}))
    res = analyze(itt, runs(tmp_path / "b", itt, arms))
    c = res.criterion("code_ok")
    assert c.n_seeds_treatment == 5  # the untrained seed is scored as failures (intention to treat)
    assert sum(m.reason == "missing_seed" for m in res.missing_data.missing) == 24


def test_coverage_counts_dropped_tasks_per_arm(tmp_path):
    """One treatment seed missing on a quarter of the tasks drops those tasks: coverage reads 0.75, not 0.975."""
    rec = freeze_plan(plan(design={"seeds_per_arm": 5, "n_tasks": 40, "n_repositories": 4}))
    drop = tuple(("tg", 0, f"repo{g}__t{t}") for g in range(4) for t in range(10) if t < 3 or (g < 2 and t == 3))
    dirs = runs(tmp_path, rec, (SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5)),
                per_repo=10, drop=drop)  # fmt: skip
    res = analyze(rec, dirs)
    md = res.missing_data
    assert len(drop) == 14 and len(md.dropped_tasks) == 14
    assert md.coverage == pytest.approx(26 / 40) and md.per_arm_coverage["grpo"] == pytest.approx(26 / 40)
    assert res.decision.verdict == "INCONCLUSIVE" and res.decision.claims == []


def test_worst_case_missing_cells_can_block_a_ship(tmp_path):
    rec = freeze_plan(plan(criteria=[{**NI_CODE, "margin": 0.07}], coverage_threshold=0.5,
                           design={"seeds_per_arm": 5, "n_tasks": 200, "n_repositories": 20}))  # fmt: skip
    drop = tuple(("tg", 0, f"repo{g}__t{t}") for g in range(20) for t in range(3))
    arms = (SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5))
    full = analyze(rec, runs(tmp_path / "a", rec, arms, n_repos=20, per_repo=10, seed=1))
    assert full.decision.verdict == "SHIP", full.decision.reasons
    res = analyze(rec, runs(tmp_path / "b", rec, arms, n_repos=20, per_repo=10, seed=1, drop=drop))
    assert res.criterion("code_ok").verdict == "pass"
    assert res.decision.verdict == "INCONCLUSIVE"
    assert any("missing cells could flip the verdict" in r for r in res.decision.reasons)


def _artifact_plan(fallback: str, k: int) -> Protocol:
    return plan(estimand="artifact", arms=[{"name": "tg", "role": "treatment", "artifact_seed": 0},
                                           {"name": "grpo", "role": "baseline", "artifact_seed": 0}],
                design={"seeds_per_arm": 3, "n_tasks": 24, "n_repositories": 4, "episodes_per_task": k},
                decision={"fallback_method": fallback},
                criteria=[{"endpoint": "behaviour_ok", "kind": "superiority"}])  # fmt: skip


def test_artifact_fallback_uses_the_artifact_seeds_and_the_plans_method(tmp_path):
    rec = freeze_plan(_artifact_plan("newcombe", 2))
    kw = {"episodes": 2, "arm_style": "per_run"}
    d1 = runs(tmp_path, rec, (SyntheticArm("tg", ALWAYS, 0.5, (0,)), SyntheticArm("grpo", NEVER, 0.5, (0, 1, 2))), **kw)
    d2 = runs(tmp_path, rec, (SyntheticArm("tg", NEVER, 0.5, (1, 2)),), **kw)
    c = analyze(rec, sorted({*d1, *d2})).criterion("behaviour_ok")
    assert c.fallback_used and "artifact checkpoints" in c.fallback_used
    assert c.estimate == pytest.approx(1.0) and c.ci_low > 0.85  # 48/48 vs 0/48 (0.895), not the pooled 48/144
    assert c.p_value is not None and c.p_value < 1e-6 and c.holm_p is not None  # not NaN
    rec = freeze_plan(_artifact_plan("newcombe", 1))
    d = runs(tmp_path / "k1", rec, (SyntheticArm("tg", ALWAYS, 0.5, (0,)), SyntheticArm("grpo", NEVER, 0.5, (0,))))
    c = analyze(rec, d).criterion("behaviour_ok")
    assert "newcombe" in (c.fallback_used or "")  # the plan says newcombe: tango is not used
    rec = freeze_plan(_artifact_plan("tango", 1))
    c = analyze(rec, runs(tmp_path / "t", rec, (SyntheticArm("tg", ALWAYS, 0.5, (0,)),
                                                 SyntheticArm("grpo", NEVER, 0.5, (0,))))).criterion("behaviour_ok")  # fmt: skip
    assert "tango" in (c.fallback_used or "") and c.p_value is not None


def test_tango_fallback_needs_the_artifact_estimand_and_one_episode():
    with pytest.raises(ValueError, match="'tango' pairs the two artifact checkpoints"):
        _artifact_plan("tango", 2)


def test_holm_keeps_untestable_criteria_in_the_family():
    adj = holm_adjust([0.01, float("nan"), 0.02])
    assert adj[1] is None and adj[0] == pytest.approx(0.03) and adj[2] == pytest.approx(0.04)


def test_three_seeds_cannot_ship_a_method_claim(tmp_path):
    rec = freeze_plan(plan(design={"seeds_per_arm": 3, "n_tasks": 24, "n_repositories": 4}))
    res = analyze(rec, runs(tmp_path, rec, (SyntheticArm("tg", 0.5, 0.6, (0, 1, 2)),
                                              SyntheticArm("grpo", 0.5, 0.6, (0, 1, 2))), n_repos=4, per_repo=6))  # fmt: skip
    assert res.criterion("code_ok").verdict in ("pass", "fail")
    assert res.decision.verdict != "SHIP" and res.decision.claims == []
    assert any("needs at least 5" in r and "0.050" in r for r in res.decision.reasons)
    boot = [s for s in res.criterion("code_ok").sensitivity if s.name == "hierarchical_bootstrap"]
    assert all(not s.informative and "not counted" in s.note for s in boot)


def test_gee_is_quiet_and_exact_when_the_baseline_never_succeeds(tmp_path):
    """GRPO's Markdown replies can be 0/200: the GEE intercept's variance is then -0 up to rounding. statsmodels'
    ``bse`` took its square root and printed a RuntimeWarning into the main job's log; the treatment's SE is read
    on its own now, and equals ``bse``'s."""
    import pandas as pd
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    from evalsuite.outcomes import build_outcome_table

    rec = freeze_plan(plan(criteria=[{"endpoint": "behaviour_ok", "kind": "superiority"}], sensitivity=["gee"]))
    rd = runs(tmp_path, rec, (SyntheticArm("tg", 0.5, 0.5, S5), SyntheticArm("grpo", NEVER, 0.5, S5)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        gee = analyze(rec, rd).criterion("behaviour_ok").sensitivity[0]
    assert gee.name == "gee" and gee.status == "ok", gee.note
    ep = build_outcome_table(rec.protocol, rd).episodes
    df = pd.DataFrame({"y": ep["behaviour_ok"].astype(float), "treat": (ep["role"] == "treatment").astype(float),
                       "repo": ep["repo"].astype(str)})  # fmt: skip
    fit = smf.gee("y ~ treat", groups="repo", data=df, family=sm.families.Gaussian(),
                  cov_struct=sm.cov_struct.Independence()).fit(cov_type="bias_reduced")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bse = fit.bse
    assert np.isnan(bse["Intercept"]) or bse["Intercept"] == 0  # the case this test is about
    assert gee.estimate == pytest.approx(fit.params["treat"])
    q = stats.t.ppf(0.975, df["repo"].nunique() - 1)
    assert (gee.ci_high - gee.ci_low) / (2 * q) == pytest.approx(bse["treat"], rel=1e-12)


def test_uninformative_sensitivities_do_not_count_as_disagreement():
    rs = [SensitivityResult(name=n, method=n, verdict="pass", agrees_with_primary=False)
          for n in ("gee", "hierarchical_bootstrap", "conservative_df", "bayes_mixed")]  # fmt: skip
    marked = mark_informative(rs, estimand="method", min_seeds=3)
    assert [r.informative for r in marked] == [False, False, True, False]
    assert "ignores training-seed variance" in marked[0].note
    assert [r.informative for r in mark_informative(rs, estimand="artifact", min_seeds=10)] == [True, True, True, False]


def test_consort_items_are_reported(tmp_path):
    rec = freeze_plan(plan(criteria=[{**NI_CODE, "acceptable_loss": "5 points buys the behaviour"}]))
    res = analyze(rec, runs(tmp_path, rec, (SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5))))
    items = {i.item: i for i in res.consort}
    assert items["7a"].covered and "code_ok" in items["7a"].detail and items["6a"].covered
    bare = freeze_plan(plan())
    res = analyze(bare, runs(tmp_path / "b", bare, (SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5))))
    assert not {i.item: i for i in res.consort}["7a"].covered
