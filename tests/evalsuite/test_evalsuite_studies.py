"""Study analyses: noisy feedback (trend), equal compute (matched budget), can-do vs does-do (paired change);
power simulation and the Bayesian mixed-model sensitivity on a small data set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalsuite import StatsInputError, simulate_power
from evalsuite.schema import CanDoRow, CheckpointEval
from evalsuite.studies import can_do_study, cochran_armitage, equal_compute_study, noisy_feedback_study, wrong_fraction


def test_cochran_armitage_textbook_direction_and_null():
    z, p = cochran_armitage(np.array([40, 30, 10]), np.array([50, 50, 50]), np.array([0, 0.5, 1]))
    assert z < -5 and p < 1e-6
    z0, p0 = cochran_armitage(np.array([25, 25, 25]), np.array([50, 50, 50]), np.array([0, 0.5, 1]))
    assert z0 == pytest.approx(0) and p0 == pytest.approx(1)
    # hand check: x=(1,3), n=(4,4), s=(0,1): p=.5, s̄=.5, var=.25*(4*.25*2)=.5, T=-.5+1.5=1 -> z=1/sqrt(.5)
    assert cochran_armitage(np.array([1, 3]), np.array([4, 4]), np.array([0, 1]))[0] == pytest.approx(2**0.5)


def test_noisy_feedback_study():
    rng = np.random.default_rng(0)
    rows = []
    for kind, p in (("correct", 0.8), ("irrelevant", 0.6), ("wrong", 0.3), ("wrong=0.25", 0.7)):
        for _ in range(60):
            b = bool(rng.random() < p)
            c = bool(rng.random() < 0.5)
            rows.append({"arm": "tg", "feedback_kind": kind, "behaviour_ok": b, "code_ok": c})
    res = noisy_feedback_study(pd.DataFrame(rows))
    assert len(res.rows) == 8 and len(res.trends) == 2
    tb = next(t for t in res.trends if t.endpoint == "behaviour_ok")
    assert tb.statistic < 0 and tb.p_value < 0.001 and tb.slope < 0
    assert wrong_fraction("wrong=0.25") == 0.25
    with pytest.raises(StatsInputError, match="feedback_kind"):
        wrong_fraction("sarcastic")
    with pytest.raises(StatsInputError, match="no episode carries a feedback_kind"):
        noisy_feedback_study(pd.DataFrame({"arm": ["tg"], "feedback_kind": [""], "behaviour_ok": [True],
                                           "code_ok": [True]}))  # fmt: skip


def _ckpt(arm, seed, step, flops, rate_b, n=100):
    return CheckpointEval(arm=arm, seed=seed, step=step, flops=flops, rollout_tokens=10 * step,
                          teacher_forward_tokens=5 * step if arm == "tg" else 0, trainer_tokens=step, wall_s=step,
                          successes={"behaviour_ok": int(rate_b * n), "code_ok": 50, "joint_ok": int(rate_b * 50)},
                          n=n)  # fmt: skip


def test_equal_compute_study_matches_budget():
    evals = []
    for s in range(3):
        for step in (1, 2, 3):
            evals.append(_ckpt("tg", s, step, flops=1.5 * step, rate_b=0.5 + 0.1 * step + 0.01 * s))
            evals.append(_ckpt("grpo", s, step, flops=1.0 * step, rate_b=0.4 + 0.05 * step + 0.01 * s))
    res = equal_compute_study(evals, treatment="tg", baseline="grpo", endpoints=("behaviour_ok",))
    cmp = res.comparisons[0]
    assert cmp.budget == pytest.approx(3.0)  # tg's final flops 4.5 vs grpo 3.0: largest common budget
    # at budget 3: tg step 2 (flops 3.0, rate .7+.01s), grpo step 3 (rate .55+.01s)
    assert cmp.estimate == pytest.approx(0.70 - 0.55, abs=1e-9)
    assert res.ratios["flops"] == pytest.approx(1.5) and res.totals["tg"]["teacher_forward_tokens"] == 15
    assert cmp.note == "seed rates have no spread: no CI" or cmp.ci_low is not None
    with pytest.raises(StatsInputError, match="both arms"):
        equal_compute_study(evals, treatment="tg", baseline="sft")


def test_can_do_study_paired_change():
    rows = [CanDoRow(arm="tg", state_id=f"s{i}", plain_behaviour_ok=i < 10, plain_code_ok=i % 2 == 0,
                     corrective_behaviour_ok=i < 25, corrective_code_ok=i % 2 == 0) for i in range(40)]  # fmt: skip
    res = can_do_study(rows)[0]
    b = next(c for c in res.changes if c.endpoint == "behaviour_ok")
    assert (b.a, b.b, b.c, b.d) == (10, 15, 0, 15) and b.estimate == pytest.approx(15 / 40)
    assert b.ci_low > 0 and b.mcnemar_p < 0.001
    code = next(c for c in res.changes if c.endpoint == "code_ok")
    assert code.estimate == 0 and code.mcnemar_p == 1.0
    with pytest.raises(StatsInputError, match="duplicate state_id"):
        can_do_study(rows + rows[:1])


def test_simulate_power_small():
    r = simulate_power(p_baseline={"behaviour_ok": 0.4, "code_ok": 0.5}, effect_logit={"behaviour_ok": 2.0},
                       bars={"code_ok": -0.2, "behaviour_ok": 0.0}, seeds=3, n_repos=6, tasks_per_repo=5,
                       n_sims=30, rng=np.random.default_rng(0))  # fmt: skip
    assert 0 <= r.joint_pass <= min(r.per_endpoint.values()) <= 1
    assert r.per_endpoint["behaviour_ok"] > 0.5


def test_bayes_mixed_sensitivity_runs_on_small_data():
    from evalsuite.sensitivity import s3_bayes
    from protocols.schema import CriterionSpec

    rng = np.random.default_rng(4)
    rows = []
    for role, arm, p in (("treatment", "tg", 0.8), ("baseline", "grpo", 0.3)):
        for s in range(2):
            for t in range(30):
                rows.append({"role": role, "arm": arm, "train_seed": s, "repo": f"r{t % 5}", "instance_id": f"t{t}",
                             "behaviour_ok": bool(rng.random() < p)})  # fmt: skip
    res = s3_bayes(pd.DataFrame(rows), "behaviour_ok", CriterionSpec(endpoint="behaviour_ok", kind="superiority"), "pass")
    assert res.status == "ok" and res.scale == "logit" and res.estimate > 0 and res.verdict == "pass"
    assert res.agrees_with_primary is True and "sd_seed" in res.extra


def test_episode_frame_splits_runner_arm_names(tmp_path):
    from evalsuite.studies import episode_frame
    from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs

    d = SyntheticDesign(arms=(SyntheticArm("tg", 0.5, 0.5, seeds=(0, 1)),), n_repos=2, tasks_per_repo=2)
    runs = write_synthetic_runs(tmp_path, d, rng=np.random.default_rng(0), protocol_hash=None, task_set_sha256="x")
    df = episode_frame(runs)
    assert set(df["arm"]) == {"tg"} and sorted(df["train_seed"].unique()) == [0, 1] and len(df) == 8


def test_build_exploratory_only_runs_studies_with_inputs():
    from evalsuite.studies import build_exploratory

    rows = [CanDoRow(arm="tg", state_id=f"s{i}", plain_behaviour_ok=False, plain_code_ok=False,
                     corrective_behaviour_ok=True, corrective_code_ok=False) for i in range(5)]  # fmt: skip
    ex = build_exploratory(can_do_rows=rows)
    assert ex.noisy_feedback is None and ex.equal_compute is None and ex.can_do_vs_does_do[0].n_states == 5
