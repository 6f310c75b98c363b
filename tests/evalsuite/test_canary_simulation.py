"""CANARY.md §5.7 simulation smoke tests: continuous monitoring keeps its error rates, naive peeking does not.

Seeded, 1,000 replications each, asserted against the Monte Carlo SE (3 SE above the nominal level). The naive
lower limits guard against anyone "simplifying" the procedures back to repeated fixed-horizon tests.
"""

from __future__ import annotations

import numpy as np

from evalsuite.canary import mixture, simulate

REPS = 1000


def test_iid_h0_false_alarms_stay_below_alpha_and_naive_peeking_does_not():
    r = simulate.iid(REPS, rng=np.random.default_rng(7), n_units=10_000, share=0.1, step=250, start=500)
    bound = 0.05 + 3 * simulate.mc_se(0.05, REPS)
    assert r["msprt"] <= bound and r["msprt_harm"] <= bound, r
    assert r["naive"] >= 0.25, r  # 37 looks of a repeated 1.96 z-test
    assert abs(r["fixed"] - 0.05) <= 3 * simulate.mc_se(0.05, REPS), r  # one look: the plain test is fine
    assert r["gst"] <= bound, r


def test_clustered_h0_needs_unit_level_variances():
    r = simulate.clustered(REPS, rng=np.random.default_rng(8))
    assert r["unit_msprt"] <= 0.05 + 3 * simulate.mc_se(0.05, REPS), r
    assert r["episode_naive"] >= 0.12 and r["episode_msprt"] > 0.1, r  # episode-level variance: too small


def test_ni_boundary_promotes_at_most_alpha_promote():
    r = simulate.ni_boundary(REPS, rng=np.random.default_rng(9))
    assert r["msprt"] <= 0.025 + 3 * simulate.mc_se(0.025, REPS), r
    assert r["naive"] >= 0.10, r


def test_a_harm_is_detected():
    """Power sanity check: a 5-point drop at 50 % share is caught (the bounds are not vacuous)."""
    r = simulate.iid(300, rng=np.random.default_rng(10), n_units=6000, share=0.5, delta=-0.05)
    assert r["msprt_harm"] >= 0.8, r


def test_vectorised_one_sided_halfwidth_matches_brentq():
    v = np.array([1e-6, 1e-5, 1e-4, 1e-3, 0.05])
    want = [mixture.one_sided_halfwidth(x, tau2=1e-3, alpha=0.025) for x in v]
    np.testing.assert_allclose(mixture.one_sided_halfwidth_vec(v, tau2=1e-3, alpha=0.025), want, rtol=1e-10)


def test_exact_fast_path_keeps_alpha_and_catches_a_large_harm_in_burn_in():
    """The exact harm fast path (a PrPl-EB union CS) at alpha = 0.05 under H0, 10 % canary, 2,000 units, checked at
    every unit: false harm <= alpha + 3 SE; a 30-point drop is caught before 200 canary units in >= 90 %."""
    r = simulate.fast_path(REPS, rng=np.random.default_rng(12), alpha=0.05)
    assert r["harm"] <= 0.05 + 3 * simulate.mc_se(0.05, REPS), r
    big = simulate.fast_path(300, rng=np.random.default_rng(13), delta=-0.3)
    assert big["harm_in_burn_in"] >= 0.9, big
