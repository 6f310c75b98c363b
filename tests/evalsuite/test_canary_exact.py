"""Exact fast-path confidence sequences (CANARY.md §1.4 a2/a3) and §5.7 oracles O1f, O1g, O3."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest

from evalsuite.canary import exact, mixture
from evalsuite.rates import StatsInputError

# ---- O1f / O1g: confseq C++ unit tests, GammaExponentialMixture(v_opt=100, alpha=.05, c=2) -------------------


def test_o1f_gamma_exponential_log_mixture():
    rho = mixture.best_rho(100, alpha=0.10)  # one-sided at 0.05 uses best_rho(v, 2 alpha), as confseq
    assert exact.ge_log_m(10, 100, rho=rho, c=2.0) == pytest.approx(-0.2490165, abs=1e-6)


def test_o1g_gamma_exponential_boundary():
    rho = mixture.best_rho(100, alpha=0.10)
    assert exact.ge_bound(100, alpha=0.05, rho=rho, c=2.0) == pytest.approx(33.02017, abs=1e-5)


# ---- O3: confseq demo/ate_data.csv (1,000 binary outcomes, pi = 0.5) ------------------------------------------

_ROOT = Path(__file__).resolve().parents[2]
_CSV_NAME = "confseq_ate_data.csv"


def _ate_csv() -> Path | None:
    """The reference CSV lives only in the steering repo's shared/ (a fetched repo's data file); the
    ``TGSUITE_CONFSEQ_ATE_CSV`` variable may point at a copy elsewhere."""
    candidates = [os.environ.get("TGSUITE_CONFSEQ_ATE_CSV", "")]
    for base in (_ROOT, _ROOT.parent, _ROOT.parent.parent):
        candidates.append(str(base / "shared" / "docs" / "canary_proto" / "data" / _CSV_NAME))
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def test_o3_aipw_reproduces_confseq_ate_demo():
    path = _ate_csv()
    if path is None:
        pytest.skip(f"{_CSV_NAME} not found (shared/docs/canary_proto/data/ or TGSUITE_CONFSEQ_ATE_CSV)")
    rows = list(csv.DictReader(path.open()))
    y = np.array([float(r["y"]) for r in rows])
    z = np.array([int(r["treatment"]) for r in rows])
    cs = exact.aipw_ate_cs(y, z, pi=0.5, support=(0.0, 1.0), expected_noise=0.2 * 0.8, t_opt=50)
    for field, col in (("upper", "upper_confidence_bound"), ("lower", "lower_confidence_bound"),
                       ("p_value", "p_value"), ("estimate", "point_estimate")):  # fmt: skip
        want = np.array([float(r[col]) for r in rows])
        np.testing.assert_allclose(np.array(getattr(cs, field)), want, atol=1e-6, rtol=0)
    assert (cs.lower[-1], cs.upper[-1]) == pytest.approx((0.055794, 0.293388), abs=1e-6)
    assert cs.p_value[-1] == pytest.approx(7.3e-5, abs=1e-6)


# ---- behaviour of the exact CSs ---------------------------------------------------------------------------


def test_aipw_cs_is_valid_from_the_first_unit_and_clipped():
    cs = exact.aipw_ate_cs([1.0], [1], pi=0.1)
    assert (cs.lower[0], cs.upper[0]) == (-1.0, 1.0)  # clipped to [-(b-a), b-a]: no claim from one unit
    assert 0 < cs.p_value[0] <= 1.0


def test_aipw_cs_detects_a_large_effect_and_covers_it():
    rng = np.random.default_rng(3)
    z = rng.binomial(1, 0.5, 400)
    y = np.where(z == 1, rng.binomial(1, 0.1, 400), rng.binomial(1, 0.9, 400)).astype(float)
    cs = exact.aipw_ate_cs(y, z, pi=0.5)
    assert cs.upper[-1] < 0 and cs.lower[-1] <= -0.8 <= cs.upper[-1]
    assert cs.p_value[-1] == 1.0  # the p-value is one-sided: H0 ATE <= 0 is not rejected by a harm
    swapped = exact.aipw_ate_cs(y, 1 - z, pi=0.5)  # control as "treatment": ATE +0.8
    assert swapped.lower[-1] > 0 and swapped.p_value[-1] < 1e-6


def test_prpl_eb_covers_the_mean_at_all_times_under_repeated_sampling():
    rng = np.random.default_rng(11)
    misses = 0
    for _ in range(300):
        cs = exact.prpl_eb_cs(rng.binomial(1, 0.3, 400).astype(float), alpha=0.1)
        misses += bool(np.any(np.array(cs.lower) > 0.3) or np.any(np.array(cs.upper) < 0.3))
    assert misses / 300 <= 0.1  # time-uniform coverage >= 1 - alpha (Ville); observed far below


def test_prpl_eb_shrinks_with_data():
    x = np.random.default_rng(1).binomial(1, 0.5, 2000).astype(float)
    cs = exact.prpl_eb_cs(x)
    w = np.array(cs.upper) - np.array(cs.lower)
    assert w[-1] < w[99] < w[9] and w[-1] < 0.1


def test_union_difference_catches_a_large_harm_below_any_burn_in():
    rng = np.random.default_rng(5)
    ub = exact.union_difference(rng.binomial(1, 0.1, 60).astype(float), rng.binomial(1, 0.9, 60).astype(float))
    assert ub.upper < 0 < ub.upper + 1  # harm shown with 60 units per arm (burn-in is 200)
    assert ub.lower <= -0.8 <= ub.upper and (ub.n_treatment, ub.n_control) == (60, 60)


def test_union_difference_covers_zero_under_h0():
    rng = np.random.default_rng(7)
    covered = sum(
        (ub := exact.union_difference(rng.binomial(1, 0.4, 150).astype(float),
                                      rng.binomial(1, 0.4, 300).astype(float), alpha=0.1)).lower <= 0 <= ub.upper
        for _ in range(200)
    )  # fmt: skip
    assert covered / 200 >= 0.9


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: exact.prpl_eb_cs([0.2, 1.5]), "[0, 1]"),
        (lambda: exact.prpl_eb_cs([0.2], alpha=1.0), "alpha"),
        (lambda: exact.aipw_ate_cs([0.0, 1.0], [0, 2], pi=0.5), "assignments"),
        (lambda: exact.aipw_ate_cs([0.0, 2.0], [0, 1], pi=0.5), "support"),
        (lambda: exact.aipw_ate_cs([0.0], [0], pi=1.0), "pi"),
        (lambda: exact.ge_log_m(1, 1, rho=-1, c=2), "rho"),
    ],
)
def test_bad_input_is_a_clear_error(call, needle):
    with pytest.raises(StatsInputError, match=None) as e:
        call()
    assert needle in str(e.value)
