"""The ``score_components`` variance rule (plan mini v5, docs/STATS.md §2) and the limits of the score-type interval
(the infimum of the null values the test does not reject, also when T(Δ0) is not monotone)."""

from __future__ import annotations

import numpy as np
import pytest

from evalsuite import score_variance as sv
from evalsuite.simulate import SimDesign, superiority_power, superiority_type_one_error, type_one_error
from evalsuite.variance import crossed_effect, task_piece_split

MINI5 = SimDesign("method", seeds=5, n_repos=10, tasks_per_repo=4)
REPO = np.repeat(np.arange(10), 4)


# the behaviour endpoint of the v4 main run at be99445 (docs/RESULTS.md): per training seed, the tasks whose episode
# passed; tg 47/200, grpo 4/200, tasks in REPO's order (10 repositories x 4)
TG = ((0, 2, 4, 7, 8, 11, 12, 15, 17, 20, 23, 31, 32, 33, 35, 38), (2, 3, 6, 17, 19, 34), (9, 11, 15, 16, 19, 20, 24, 39),
      (2, 3, 4, 9, 13, 15, 17, 18, 20, 32, 35, 36, 38), (3, 15, 36, 38))
GRPO = ((), (26, 35), (34,), (16,), ())


def _rare_vs_common() -> tuple[np.ndarray, np.ndarray]:
    yt, yc = np.zeros((5, 40)), np.zeros((5, 40))
    for y, hits in ((yt, TG), (yc, GRPO)):
        for s, tasks in enumerate(hits):
            y[s, list(tasks)] = 1.0
    return yt, yc


def test_task_piece_split_adds_up_to_the_crossed_task_piece():
    rng = np.random.default_rng(4)
    yt, yc = (rng.random((5, 40)) < 0.3).astype(float), (rng.random((5, 40)) < 0.1).astype(float)
    tau_t, tau_c, cov = task_piece_split(yt, yc, REPO)
    est = crossed_effect(yt, yc, REPO)
    v_seed = np.var(yt.mean(1), ddof=1) / 5 + np.var(yc.mean(1), ddof=1) / 5
    assert max(tau_t + tau_c - 2 * cov, 0.0) == pytest.approx(est.var_total - v_seed, abs=1e-12)


def test_the_v4_rule_over_scales_bernoulli_noise_of_a_rare_arm_and_components_does_not():
    yt, yc = _rare_vs_common()
    old, new = sv.crossed_score(yt, yc, REPO), sv.crossed_score(yt, yc, REPO, variance="score_components")
    wald = crossed_effect(yt, yc, REPO)
    assert old.estimate == new.estimate == pytest.approx(0.215)
    assert old.lower_one_sided < 0 < wald.lower_one_sided  # the v4 rule: below 0 where the Wald bound is above
    assert new.lower_one_sided > 0 and new.p_value(0.0) < 0.025
    assert "by components" in new.method and "by components" not in old.method


def test_components_interval_inverts_its_test_at_the_infimum():
    """L is where T meets the critical value, and every null value below L is rejected (grid check)."""
    yt, yc = _rare_vs_common()
    for rule in ("score", "score_components"):
        e = sv.crossed_score(yt, yc, REPO, variance=rule)
        assert e.p_value(e.lower_one_sided) == pytest.approx(0.025, abs=1e-4)
        below = np.linspace(-0.999, e.lower_one_sided - 1e-3, 300)
        assert all(e.p_value(float(d)) < 0.025 for d in below), rule


def test_limit_is_the_infimum_when_the_statistic_is_not_monotone():
    """The v4 rule on the v4 behaviour data: T(Δ0) falls to about 2.06 near Δ0 = −0.05, rises to 2.10 near +0.05,
    then falls to 0 at Δ̂. At a critical value of 2.085 the not-rejected set is two intervals; the bound is the
    infimum of both, not whichever root a bracketing solver on [−1, Δ̂] lands on."""
    yt, yc = _rare_vs_common()
    est = crossed_effect(yt, yc, REPO)
    w = np.full(40, 1 / 40)
    v_t, v_c = float(np.var(yt @ w, ddof=1) / 5), float(np.var(yc @ w, ddof=1) / 5)
    s = sv.ScoreInputs(0.235, 0.02, 200, 200, v_t, v_c, max(est.var_total - v_t - v_c, 0.0))
    crit = 2.085
    grid = np.linspace(-1 + 1e-9, est.estimate, 4000)
    ok = np.array([sv.score_stat(est, s, float(d)) <= crit for d in grid])
    assert (np.diff(ok.astype(int)) != 0).sum() >= 2  # not rejected, rejected, not rejected again: two intervals
    assert sv._limits(est, s, (crit,), 1)[0] == pytest.approx(float(grid[ok][0]), abs=1e-3)


def test_components_rule_is_refused_for_an_unknown_name():
    yt, yc = _rare_vs_common()
    with pytest.raises(ValueError, match="variance rule"):
        sv.crossed_score(yt, yc, REPO, variance="wald")  # type: ignore[arg-type]


@pytest.mark.parametrize("baseline", [0.02, 0.05, 0.10])
def test_components_superiority_type_one_error_at_rare_baselines(baseline):
    r = superiority_type_one_error(MINI5, baseline=baseline, n_sims=300, rng=np.random.default_rng([3, int(baseline * 100)]),
                                   min_events=10, estimator="score_components")  # fmt: skip
    assert r.rate <= 0.03, r


@pytest.mark.parametrize("baseline", [0.20, 0.50])
def test_components_noninferiority_type_one_error(baseline):
    r = type_one_error(MINI5, baseline=baseline, margin=0.10, n_sims=300, rng=np.random.default_rng([4, int(baseline * 100)]),
                       min_baseline_rate=0.20, estimator="score_components")  # fmt: skip
    assert r.rate <= 0.03, r


def test_components_has_more_power_than_the_v4_rule_at_a_rare_baseline():
    kw = {"p_t": 0.15, "p_c": 0.02, "n_sims": 200, "min_events": 10}
    old = superiority_power(MINI5, rng=np.random.default_rng(5), estimator="score", **kw)
    new = superiority_power(MINI5, rng=np.random.default_rng(5), estimator="score_components", **kw)
    assert new > old + 0.3, (old, new)
