"""Bad levels are refused with the caller's own value named, and McNemar's corrected χ² is 1 at b = c.

Before: ``wilson_ci(1, 10, alpha=1.5)`` returned the inverted interval (0.182, 0.052); ``ni_test(..., alpha=0.6)``
said "alpha must be in (0, 1), got 1.2" (the doubled value); ``ni_test_paired(..., alpha=0.6)`` raised scipy's
"f(a) and f(b) must have different signs"; ``mcnemar_test(0, 1, 1, 0, exact=False)`` was 0.4795 for a table with
no difference at all."""

from __future__ import annotations

import pytest
from scipy import stats

from evalsuite.noninferiority import mcnemar_test, ni_test, ni_test_paired
from evalsuite.rates import StatsInputError, wilson_ci


@pytest.mark.parametrize("alpha", [0.0, 1.5, -0.1, float("nan")])
def test_wilson_refuses_a_level_outside_0_1(alpha: float) -> None:
    with pytest.raises(StatsInputError, match="alpha must be in"):
        wilson_ci(1, 10, alpha=alpha)


@pytest.mark.parametrize("alpha", [0.5, 0.6])
def test_ni_tests_refuse_a_one_sided_level_of_half_or_more(alpha: float) -> None:
    with pytest.raises(StatsInputError, match=rf"one-sided alpha must be in \(0, 0.5\).*got {alpha}"):
        ni_test(10, 20, 12, 20, margin=0.1, alpha=alpha)
    with pytest.raises(StatsInputError, match=rf"one-sided alpha must be in \(0, 0.5\).*got {alpha}"):
        ni_test_paired(10, 5, 3, 20, margin=0.1, alpha=alpha)


@pytest.mark.parametrize(("b", "c"), [(1, 1), (7, 7), (3, 4), (2, 9), (0, 5)])
def test_mcnemar_corrected_chi2(b: int, c: int) -> None:
    want = stats.chi2.sf(max(abs(b - c) - 1, 0) ** 2 / (b + c), 1)
    assert mcnemar_test(4, b, c, 6, exact=False) == pytest.approx(want)
    if b == c:
        assert mcnemar_test(4, b, c, 6, exact=False) == 1.0


_CROSSED = dict(margin=0.1, seeds_treatment=5, seeds_baseline=5, n_tasks=40, tasks_per_repo=4, sigma_seed=0.05,
                tau=0.3, icc_repo=0.2, sigma_e2=0.2)


@pytest.mark.parametrize(("call", "match"), [
    (lambda p: p.power_ni_crossed(**{**_CROSSED, "icc_repo": 1.5}), r"icc_repo is a correlation in \[0, 1\], got 1.5"),
    (lambda p: p.power_ni_crossed(**_CROSSED, alpha=0.5), r"one-sided alpha must be in \(0, 0.5\).*got 0.5"),
    (lambda p: p.power_artifact(margin=0.1, n_tasks=40, tasks_per_repo=4, tau=0.3, icc_repo=2.0, sigma_e2=0.2),
     r"icc_repo is a correlation"),
    (lambda p: p.power_ni_independent(0.5, 0.5, margin=0.1, alpha=1.2), r"alpha must be in \(0, 1\), got 1.2"),
    (lambda p: p.power_ni_independent(0.5, 0.5, margin=0.1, power=1.0), r"power must be in \(0, 1\).*got 1.0"),
    (lambda p: p.power_paired_mcnemar(0.1, 0.2, alpha=0.0), r"alpha must be in \(0, 1\), got 0.0"),
])  # fmt: skip
def test_power_functions_refuse_impossible_inputs(call, match) -> None:  # noqa: ANN001
    """Before: an ICC above 1 and a one-sided alpha of 0.5 or more gave a number; alpha 1.2 gave NaN."""
    from evalsuite import power

    with pytest.raises(StatsInputError, match=match):
        call(power)
