"""The dual criterion's "estimate >= X" holds for an estimate that is X in exact arithmetic: 14/120 - 2/120 is 0.1,
and the mini run at 8ed4248 computed it as 0.09999999999999999 and reported "estimate +0.1000 < X = +0.1000"."""

from __future__ import annotations

import pytest

from evalsuite.decide import criterion_verdict
from evalsuite.sensitivity import verdict_of
from evalsuite.variance import EffectEstimate
from protocols.schema import CriterionSpec

DUAL = CriterionSpec(endpoint="behaviour_ok", kind="dual", threshold=0.1)


def _est(estimate: float, lower: float) -> EffectEstimate:
    return EffectEstimate(endpoint="behaviour_ok", estimand="method", estimate=estimate, se=0.01, df=10.0,
                          ci_low=lower, ci_high=estimate + 0.05, alpha=0.05, lower_one_sided=lower,
                          alpha_one_sided=0.025, var_total=1e-4, var_training_seeds=0.0, var_task_given_ckpts=1e-4,
                          n_seeds=(3, 3), n_tasks=40, n_repos=8, method="test", degenerate=False)


@pytest.mark.parametrize(("estimate", "passes"), [(0.09999999999999999, True), (0.1, True), (0.11, True),
                                                  (0.0999, False), (0.1 - 1e-9, False)])
def test_an_estimate_equal_to_x_passes_and_one_below_fails(estimate: float, passes: bool) -> None:
    assert DUAL.estimate_passes(estimate) is passes
    out = criterion_verdict(_est(estimate, lower=0.02), DUAL)
    assert out.verdict == ("pass" if passes else "fail"), out.reason
    assert verdict_of(0.02, estimate, DUAL) == out.verdict
    if passes:
        assert "<" not in out.reason.split("estimate")[1]


def test_the_lower_bound_still_decides() -> None:
    assert criterion_verdict(_est(0.09999999999999999, lower=-0.5), DUAL).verdict == "fail"
    assert CriterionSpec(endpoint="code_ok", kind="noninferiority", margin=0.1).estimate_passes(-0.5)


def test_the_report_says_what_the_verdict_used() -> None:
    from evalsuite.schema import CriterionResult
    from reports.sections import criterion_reason

    c = CriterionResult(endpoint="behaviour_ok", kind="dual", estimand="method", method="test",
                        estimate=0.09999999999999999, alpha_one_sided=0.025, lower_one_sided=0.02, threshold=0.1,
                        bar=0.0, verdict="pass")
    assert "estimate +10.0 pp ≥ +10.0 pp → PASS" in criterion_reason(c).text
