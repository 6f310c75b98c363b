"""Under ``decision.claims = "holm"`` an endpoint is claimed only when its criterion passes: a dual criterion's
p-value tests Δ = 0, so a failed "estimate >= X" (Δ̂ = 0.05 < X = 0.1 with L > 0) used to be claimed anyway."""

from __future__ import annotations

from evalsuite.decide import decide
from evalsuite.variance import EffectEstimate
from protocols.schema import CriterionSpec

DUAL = CriterionSpec(endpoint="behaviour_ok", kind="dual", threshold=0.1)
SUP = CriterionSpec(endpoint="joint_ok", kind="superiority")


def _est(endpoint: str, estimate: float, lower: float) -> EffectEstimate:
    return EffectEstimate(endpoint=endpoint, estimand="method", estimate=estimate, se=0.01, df=10.0,
                          ci_low=lower, ci_high=estimate + 0.05, alpha=0.05, lower_one_sided=lower,
                          alpha_one_sided=0.025, var_total=1e-4, var_training_seeds=0.0, var_task_given_ckpts=1e-4,
                          n_seeds=(5, 5), n_tasks=40, n_repos=8, method="test", degenerate=False)  # fmt: skip


def test_holm_does_not_claim_a_failed_dual_criterion() -> None:
    ests = [_est("behaviour_ok", 0.05, lower=0.02), _est("joint_ok", 0.2, lower=0.15)]
    fixed = decide(ests, [DUAL, SUP], claims="fixed_sequence")
    holm = decide(ests, [DUAL, SUP], claims="holm")
    assert holm.per_criterion[0].verdict == "fail" and holm.per_criterion[0].p_value < 0.001
    assert "behaviour_ok" not in holm.claims and "behaviour_ok" not in fixed.claims
    assert holm.claims == ("joint_ok",)  # Holm, unlike the fixed sequence, goes on past a failure
