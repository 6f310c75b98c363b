"""CANARY.md §5.7 oracles: published and reference values for evalsuite.canary's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalsuite.canary import delta, gsd, mixture, srm

# ---- O1: confseq C++ unit tests (values from a reference R implementation) -----------------------------------


def test_o1_normal_mixture_reference_values():
    rho = mixture.best_rho(100, alpha=0.05)
    assert rho == pytest.approx(12.60056, abs=1e-5)
    assert float(mixture.nm_log_m_two_sided(10, 100, rho=rho)) == pytest.approx(-0.6510052, abs=1e-6)
    assert float(mixture.nm_bound_two_sided(100, alpha=0.05, rho=rho)) == pytest.approx(30.35209, abs=1e-5)
    rho1 = mixture.best_rho(100, alpha=0.10)  # one-sided at 0.05 uses best_rho(v, 2 alpha)
    assert float(mixture.nm_log_m_one_sided(10, 100, rho=rho1)) == pytest.approx(-0.06502391, abs=1e-7)
    assert mixture.nm_bound_one_sided(100, alpha=0.05, rho=rho1) == pytest.approx(27.66071, abs=1e-5)


# ---- O2: estimator-scale mSPRT == sum-scale mixture; Johari's closed form ------------------------------------


def test_o2_msprt_equals_mixture_and_johari():
    rho = mixture.best_rho(100, alpha=0.05)
    v_hat, tau2 = 0.01, 1 / rho
    assert float(mixture.msprt_log_lr(0.1, v_hat, tau2=tau2)) == pytest.approx(-0.6510052, abs=1e-6)
    assert float(mixture.cs_halfwidth(v_hat, tau2=tau2, alpha=0.05)) / v_hat == pytest.approx(30.35209, abs=1e-5)
    n, s2, t2, dbar = 400, 0.24, 0.002, 0.03
    johari = 0.5 * math.log(2 * s2 / (2 * s2 + n * t2)) + n * n * t2 * dbar**2 / (4 * s2 * (2 * s2 + n * t2))
    assert float(mixture.msprt_log_lr(dbar, 2 * s2 / n, tau2=t2)) == pytest.approx(johari, abs=1e-12)
    # one-sided: estimator scale == Howard's one-sided mixture, and the half-width == the sum-scale boundary · V
    rho1 = mixture.best_rho(100, alpha=0.10)
    assert float(mixture.msprt_log_lr_one_sided(0.1, 0.01, tau2=1 / rho1)) == pytest.approx(-0.06502391, abs=1e-7)
    assert mixture.one_sided_halfwidth(0.01, tau2=1 / rho1, alpha=0.05) / 0.01 == pytest.approx(27.66071, abs=1e-5)


def test_horizon_k_factors():
    """At the tuned horizon the half-width is k·√V_h: k = 3.035 (two-sided .05), 3.036 (one-sided .025)."""
    vh = 1e-4
    hw2 = float(mixture.cs_halfwidth(vh, tau2=mixture.tau2_for_horizon(vh, alpha=0.05), alpha=0.05))
    assert hw2 / math.sqrt(vh) == pytest.approx(3.035, abs=1e-3)
    t1 = mixture.tau2_for_horizon(vh, alpha=0.025, sides=1)
    assert mixture.one_sided_halfwidth(vh, tau2=t1, alpha=0.025) / math.sqrt(vh) == pytest.approx(3.036, abs=1e-3)
    assert mixture.tau2_for_horizon(1.0, alpha=0.05) == pytest.approx(7.936, abs=1e-3)
    assert mixture.tau2_for_horizon(1.0, alpha=0.025) == pytest.approx(9.503, abs=1e-3)


# ---- O4 / O-naive: group-sequential boundaries ---------------------------------------------------------------


def test_o4_classical_boundaries():
    c, b = gsd.gs_bounds_classical(5, alpha=0.05, sides=2, kind="obf")
    assert c == pytest.approx(2.040, abs=5e-4)
    assert np.round(b, 2).tolist() == [4.56, 3.23, 2.63, 2.28, 2.04]
    c, _ = gsd.gs_bounds_classical(5, alpha=0.05, sides=2, kind="pocock")
    assert c == pytest.approx(2.413, abs=5e-4)


def test_o4_lan_demets_obf_spending():
    b = gsd.gs_bounds_spending(np.arange(1, 6) / 5, alpha=0.05, sides=2, spending="obf")
    np.testing.assert_allclose(b, [4.877, 3.357, 2.680, 2.290, 2.031], atol=1e-3)
    b = gsd.gs_bounds_spending(np.arange(1, 4) / 3, alpha=0.025, sides=1, spending="obf")
    np.testing.assert_allclose(b, [3.7103, 2.5114, 1.9930], atol=1e-4)
    b = gsd.gs_bounds_spending([0.25, 0.5, 0.75, 1.0], alpha=0.05, sides=1, spending="obf")
    np.testing.assert_allclose(b, [3.74955, 2.53993, 2.01604, 1.72014], atol=2e-3)
    assert float(gsd.spend_obf(0.25, 0.05)) == pytest.approx(8.85754e-5, abs=1e-9)


def test_o_naive_repeated_tests_armitage():
    got = [gsd.gs_total_crossing(np.full(k, 1.959964), np.arange(1, k + 1) / k, sides=2)
           for k in (2, 3, 4, 5, 10, 20, 50)]  # fmt: skip
    np.testing.assert_allclose(got, [0.083, 0.107, 0.126, 0.142, 0.193, 0.248, 0.320], atol=1.5e-3)


def test_gsd_rejects_non_increasing_fractions():
    with pytest.raises(ValueError, match="strictly increasing"):
        gsd.gs_bounds_spending([0.5, 0.5], alpha=0.05)
    assert gsd.information_fraction(2e-4, 1e-4) == 0.5 and gsd.information_fraction(5e-5, 1e-4) == 1.0


# ---- O5 / O8: SRM ---------------------------------------------------------------------------------------------


def test_o5_srm_chisq():
    chi2, p = srm.srm_chisq([600, 400], [0.5, 0.5])
    assert chi2 == pytest.approx(40.0) and p * 1e10 == pytest.approx(2.54, abs=0.01)
    assert srm.srm_chisq([502, 498], [0.5, 0.5])[1] == pytest.approx(0.899, abs=5e-4)
    chi2, p = srm.srm_chisq([1890, 18110], [0.1, 0.9])
    assert chi2 == pytest.approx(6.72, abs=0.01) and p == pytest.approx(0.0095, abs=1e-4)


def test_o8_sequential_srm_bayes_factor():
    assert math.exp(srm.srm_log_bf([1890, 18110], [0.1, 0.9])) == pytest.approx(2.1495, abs=1e-3)
    assert math.exp(srm.srm_log_bf([150, 1850], [0.1, 0.9])) == pytest.approx(310.746, abs=1e-3)
    seq = srm.srm_sequential([[150, 1850]], [0.1, 0.9], alpha=0.001)
    assert seq.p_anytime == pytest.approx(0.0032, abs=1e-4) and not seq.flagged
    # the p-value is a running minimum: a later, balanced look cannot raise it back
    later = srm.srm_sequential([[150, 1850], [2000, 18000]], [0.1, 0.9], alpha=0.01)
    assert later.p_anytime == pytest.approx(seq.p_anytime) and later.flagged


def test_o7_savvi_cross_check():
    multinomial = pytest.importorskip("savvi.multinomial")
    th0 = np.array([0.9, 0.1])
    m = multinomial.Multinomial(0.05, th0, k=100)
    counts = np.array([[88, 12], [91, 9], [85, 15], [95, 5]])
    for c in counts:
        m.update(c)
    assert math.log(m.odds) == pytest.approx(srm.srm_log_bf(counts.sum(0), th0, k=100), abs=1e-9)


# ---- O6: delta method -----------------------------------------------------------------------------------------


def test_o6_delta_method_toy_and_linearisation():
    r = delta.ratio_and_var([3, 1, 4, 0, 2, 5], [5, 2, 4, 3, 6, 5])
    assert r.ratio == pytest.approx(0.6) and r.var == pytest.approx(0.023808, abs=1e-6)
    rng = np.random.default_rng(1)
    n_eps = rng.poisson(5, 5000) + 1
    y = rng.binomial(n_eps, 0.6)
    est = delta.ratio_and_var(y, n_eps)
    u = (y - est.ratio * n_eps) / n_eps.mean()
    assert est.var == pytest.approx(u.var(ddof=1) / len(u), rel=1e-12)


# ---- O8: the worked look table (§5.6) -------------------------------------------------------------------------


@pytest.mark.parametrize("s_t, want", [
    (1150, (-0.06034, 0.01034, 0.9563, 0.384)),
    (1100, (-0.08554, -0.01446, 6.9900, 0.0009)),
    (1190, (-0.04011, 0.03011, -1.0105, 1.0)),
])  # fmt: skip
def test_o8_worked_look(s_t, want):
    vh = 0.6 * 0.4 * (1 / 2000 + 1 / 18000)
    tau2 = mixture.tau2_for_horizon(vh, alpha=0.05)
    assert tau2 == pytest.approx(1.0581539e-3, abs=1e-9)
    p_t, p_c = s_t / 2000, 10800 / 18000
    d, v = p_t - p_c, p_t * (1 - p_t) / 2000 + p_c * (1 - p_c) / 18000
    lo, hi = mixture.cs_two_sided(d, v, tau2=tau2, alpha=0.05)
    llr = float(mixture.msprt_log_lr(d, v, tau2=tau2))
    np.testing.assert_allclose([lo, hi, llr], want[:3], atol=1e-4)
    assert mixture.always_valid_p([llr]) == pytest.approx(want[3], abs=5e-4)


# ---- O9: asymptotic CS == normal mixture ----------------------------------------------------------------------


def test_o9_asymptotic_cs_identity():
    t = np.array([10.0, 100.0, 1000.0, 10000.0])
    sg, r2 = 0.49, mixture.rho2_opt(1000, alpha=0.05)
    np.testing.assert_allclose(mixture.asymp_cs_halfwidth(t, sigma_hat=sg, rho2=r2, alpha=0.05),
                               mixture.nm_bound_two_sided(t * sg * sg, alpha=0.05, rho=sg * sg / r2) / t,
                               rtol=1e-12)  # fmt: skip
