"""Property tests (STATS §6.4): CI/test duality, antisymmetry, monotonicity, crossed-estimator invariances, and a
coverage simulation smoke test."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from evalsuite import crossed_effect, hierarchical_bootstrap, ni_test, ni_test_paired, rd_ci, rd_ci_paired
from evalsuite.noninferiority import tango_z
from evalsuite.rates import score_z


@st.composite
def two_binomials(draw):
    n1 = draw(st.integers(1, 60))
    n2 = draw(st.integers(1, 60))
    return draw(st.integers(0, n1)), n1, draw(st.integers(0, n2)), n2


@st.composite
def paired_tables(draw):
    cells = draw(st.lists(st.integers(0, 30), min_size=4, max_size=4).filter(lambda c: sum(c) > 0))
    return tuple(cells)


METHODS = ["newcombe", "mn", "mee", "wald", "agresti_caffo"]


@settings(max_examples=60, deadline=None)
@given(two_binomials(), st.sampled_from(METHODS))
def test_antisymmetry(c, method):
    x1, n1, x2, n2 = c
    lo, hi = rd_ci(x1, n1, x2, n2, method=method)
    lo2, hi2 = rd_ci(x2, n2, x1, n1, method=method)
    assert lo == pytest.approx(-hi2, abs=1e-7) and hi == pytest.approx(-lo2, abs=1e-7)


@settings(max_examples=40, deadline=None)
@given(two_binomials(), st.sampled_from(["newcombe", "mn", "mee", "agresti_caffo"]))
def test_lower_bound_monotone_in_x1(c, method):
    x1, n1, x2, n2 = c
    if x1 == n1:
        return
    assert rd_ci(x1 + 1, n1, x2, n2, method=method)[0] >= rd_ci(x1, n1, x2, n2, method=method)[0] - 1e-9


@settings(max_examples=40, deadline=None)
@given(two_binomials(), st.sampled_from(["mn", "mee"]))
def test_score_ci_limits_have_p_equal_alpha_over_2(c, method):
    x1, n1, x2, n2 = c
    lo, hi = rd_ci(x1, n1, x2, n2, method=method, alpha=0.05)
    for limit in (lo, hi):
        if -1 + 1e-6 < limit < 1 - 1e-6:
            z = score_z(x1, n1, x2, n2, limit, correction=(method == "mn"))
            assert 2 * stats.norm.sf(abs(z)) == pytest.approx(0.05, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(two_binomials(), st.floats(0.01, 0.3), st.sampled_from(["mn", "fm", "wald"]))
def test_ni_duality(c, margin, method):
    """one-sided p < alpha  <=>  lower limit of the (1 - 2 alpha) CI > -margin (away from exact ties)."""
    r = ni_test(*c, margin=margin, method=method, alpha=0.025)
    if np.isnan(r.p_value):  # Wald at 0/n and n/n: undefined, and never a pass
        assert method == "wald" and not r.passed
        return
    if abs(r.lower + margin) > 1e-7 and abs(r.p_value - 0.025) > 1e-7:
        assert (r.p_value < 0.025) == (r.lower > -margin)


@settings(max_examples=60, deadline=None)
@given(paired_tables(), st.floats(0.01, 0.3))
def test_paired_ni_duality_and_antisymmetry(t, margin):
    a, b, c, d = t
    r = ni_test_paired(a, b, c, d, margin=margin)
    if abs(r.lower + margin) > 1e-7 and abs(r.p_value - 0.025) > 1e-7:
        assert (r.p_value < 0.025) == (r.lower > -margin)
    for method in ("tango", "newcombe"):
        lo, hi = rd_ci_paired(a, b, c, d, method=method)
        lo2, hi2 = rd_ci_paired(a, c, b, d, method=method)
        assert lo == pytest.approx(-hi2, abs=1e-7) and hi == pytest.approx(-lo2, abs=1e-7)
        assert lo - 1e-9 <= (b - c) / sum(t) <= hi + 1e-9


@settings(max_examples=30, deadline=None)
@given(paired_tables())
def test_tango_limits_are_roots(t):
    a, b, c, d = t
    n = sum(t)
    lo, hi = rd_ci_paired(a, b, c, d, method="tango", alpha=0.05)
    for limit in (lo, hi):
        if -1 + 1e-6 < limit < 1 - 1e-6:
            assert abs(tango_z(b, c, n, limit)) == pytest.approx(stats.norm.ppf(0.975), abs=1e-6)


def _random_design(rng, m=3, g=5, per=4):
    repo = np.repeat(np.arange(g), per)
    yt = (rng.random((m, g * per)) < 0.6).astype(float)
    yc = (rng.random((m, g * per)) < 0.5).astype(float)
    return yt, yc, repo


def test_crossed_permutation_invariance_and_swap():
    rng = np.random.default_rng(0)
    yt, yc, repo = _random_design(rng)
    e = crossed_effect(yt, yc, repo)
    perm = rng.permutation(yt.shape[1])
    e2 = crossed_effect(yt[:, perm], yc[:, perm], repo[perm])
    e3 = crossed_effect(yt[rng.permutation(3)], yc, repo)
    for other in (e2, e3):
        assert other.estimate == pytest.approx(e.estimate) and other.var_total == pytest.approx(e.var_total)
        assert other.df == pytest.approx(e.df)
    sw = crossed_effect(yc, yt, repo)
    assert sw.estimate == pytest.approx(-e.estimate) and sw.ci_low == pytest.approx(-e.ci_high)


def test_crossed_degenerate_flag():
    yt = np.ones((3, 6))
    yc = np.zeros((3, 6))
    e = crossed_effect(yt, yc, [0, 0, 1, 1, 2, 2])
    assert e.degenerate and np.isnan(e.lower_one_sided) and e.notes


def test_bootstrap_reproducible_and_centred():
    rng = np.random.default_rng(1)
    yt, yc, repo = _random_design(rng, m=5)
    b1 = hierarchical_bootstrap(yt, yc, repo, n_resamples=2000, rng=np.random.default_rng(7))
    b2 = hierarchical_bootstrap(yt, yc, repo, n_resamples=2000, rng=np.random.default_rng(7))
    assert np.array_equal(b1.draws, b2.draws)
    assert b1.ci_low < b1.estimate < b1.ci_high
    assert b1.draws.mean() == pytest.approx(b1.estimate, abs=0.02)


def test_coverage_simulation_smoke():
    """200 simulated crossed designs with seed, repo and task effects; the 95% CI must cover 0.90-0.99 (≤ 10 s)."""
    rng = np.random.default_rng(2026)
    m, g, per = 3, 10, 5
    repo = np.repeat(np.arange(g), per)
    hits = 0
    for _ in range(200):
        task = rng.normal(0, 1, g * per) + rng.normal(0, 0.5, g)[repo]
        delta_task = rng.normal(0, 0.3, g * per)
        yt, yc = _arm(rng, 0.3, task + delta_task, m), _arm(rng, 0.0, task, m)
        # true Δ: expectation over seeds/tasks of this super-population, by Monte Carlo on the same task draw
        e = crossed_effect(yt, yc, repo)
        truth = _true_delta(rng, task, delta_task, m_draws=400)
        hits += e.ci_low <= truth <= e.ci_high
    assert 0.90 <= hits / 200 <= 0.99, hits / 200


def _arm(rng, shift, task_logit, m):
    logit = shift + task_logit + rng.normal(0, 0.25, (m, 1))
    return (rng.random((m, task_logit.size)) < 1 / (1 + np.exp(-logit))).astype(float)


def _true_delta(rng, task, delta_task, m_draws):
    s = rng.normal(0, 0.25, (m_draws, 1))
    pt = 1 / (1 + np.exp(-(0.3 + task + delta_task + s)))
    pc = 1 / (1 + np.exp(-(task + s)))
    return float(pt.mean() - pc.mean())


def test_vectorised_bootstrap_matches_a_naive_loop_in_distribution():
    """Same two-stage scheme written as a plain loop: the draw distributions agree (mean and SD within MC error)."""
    rng = np.random.default_rng(3)
    yt, yc, repo = _random_design(rng, m=4, g=6, per=3)
    fast = hierarchical_bootstrap(yt, yc, repo, n_resamples=4000, rng=np.random.default_rng(0)).draws
    r = np.random.default_rng(1)
    groups = [np.flatnonzero(repo == k) for k in range(6)]
    slow = np.empty(4000)
    for i in range(4000):
        cols = np.concatenate([groups[k] for k in r.integers(0, 6, 6)])
        st = yt[r.integers(0, 4, 4)][:, cols]
        sc = yc[r.integers(0, 4, 4)][:, cols]
        slow[i] = st.mean() - sc.mean()
    assert fast.mean() == pytest.approx(slow.mean(), abs=0.01)
    assert fast.std() == pytest.approx(slow.std(), rel=0.06)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(-0.3, 0.3))
def test_crossed_p_value_dual_to_lower_bound(seed, bar):
    e = crossed_effect(*_random_design(np.random.default_rng(seed)))
    p = e.p_value(bar)
    if abs(e.lower_one_sided - bar) > 1e-9:
        assert (p < 0.025) == (e.lower_one_sided > bar)
