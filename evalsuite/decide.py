"""The ship / no-ship decision (STATS §4, §8.2 'Decision semantics').

SHIP ⇔ every preregistered criterion passes on its one-sided lower bound L (intersection–union test; no
multiplicity adjustment is needed or made). INCONCLUSIVE when any criterion cannot be evaluated (degenerate or
missing estimate) — never a guessed verdict. Individual claims follow the preregistered fixed sequence (or Holm);
Holm-adjusted p-values are reported for information only.

kind / passes when: superiority L > 0; superiority_margin L > X; noninferiority L > −δ; dual L > 0 and Δ̂ >= X.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evalsuite.multiplicity import fixed_sequence_claims, holm_adjust, holm_claims
from evalsuite.rates import StatsInputError
from evalsuite.variance import EffectEstimate
from protocols.schema import CriterionSpec

Verdict = Literal["pass", "fail", "not_evaluated"]


@dataclass(frozen=True)
class CriterionOutcome:
    endpoint: str
    kind: str
    bar: float
    lower_one_sided: float
    estimate: float
    verdict: Verdict
    p_value: float
    reason: str


@dataclass(frozen=True)
class DecisionOutcome:
    verdict: Literal["SHIP", "NO_SHIP", "INCONCLUSIVE"]
    ship: bool
    per_criterion: tuple[CriterionOutcome, ...]
    claims: tuple[str, ...]
    holm_p: tuple[float | None, ...]
    reasons: tuple[str, ...]


def _pvalue_null(c: CriterionSpec) -> float:
    return 0.0 if c.kind == "dual" else c.bar


def criterion_verdict(est: EffectEstimate, c: CriterionSpec) -> CriterionOutcome:
    """Verdict of one criterion from its estimate (the estimate's one-sided α must equal the criterion's)."""
    if not math.isclose(est.alpha_one_sided, c.alpha_one_sided):
        raise StatsInputError(
            f"criterion {c.endpoint}: estimate computed at one-sided alpha {est.alpha_one_sided}, criterion needs "
            f"{c.alpha_one_sided}"
        )
    low, bar = est.lower_one_sided, c.bar
    if est.degenerate or not math.isfinite(low) or not math.isfinite(est.estimate):
        reason = f"{c.endpoint}: no valid lower bound ({'; '.join(est.notes) or 'degenerate estimate'})"
        return CriterionOutcome(c.endpoint, c.kind, bar, low, est.estimate, "not_evaluated", math.nan, reason)
    ok = low > bar
    txt = f"{c.endpoint} ({c.kind}): L = {low:+.4f} {'>' if ok else '<='} {bar:+.4f}"
    if c.kind == "dual":
        ok_est = c.estimate_passes(est.estimate)
        txt += f"; estimate {est.estimate:+.4f} {'>=' if ok_est else '<'} X = {c.threshold:+.4f}"
        ok = ok and ok_est
    p = est.p_value(_pvalue_null(c))
    return CriterionOutcome(c.endpoint, c.kind, bar, low, est.estimate, "pass" if ok else "fail", p, txt)


def decide(
    estimates: Sequence[EffectEstimate],
    criteria: Sequence[CriterionSpec],
    *,
    claims: Literal["fixed_sequence", "holm"] = "fixed_sequence",
) -> DecisionOutcome:
    """Intersection–union ship decision over ``criteria`` (in preregistered claim order).

    H0 = ∪_k H0_k (some criterion fails) vs H1 = ∩_k H1_k; each H0_k: Δ_k <= bar_k tested at its own one-sided α.
    ``estimates`` are matched to criteria by endpoint. References: Berger 1982; Berger & Hsu 1996; FDA 2022.
    """
    if not criteria:
        raise StatsInputError("decide: no criteria given; a plan needs at least one [[criteria]] entry")
    by_ep = {e.endpoint: e for e in estimates}
    missing = [c.endpoint for c in criteria if c.endpoint not in by_ep]
    if missing:
        raise StatsInputError(f"decide: no estimate for criteria on {missing}; have {sorted(by_ep)}")
    outs = tuple(criterion_verdict(by_ep[c.endpoint], c) for c in criteria)
    holm = tuple(holm_adjust([o.p_value for o in outs]))
    if claims == "holm":
        alpha = min(c.alpha_one_sided for c in criteria)
        # Holm on the p-values, and the criterion itself must pass: a dual criterion's p tests Δ = 0 only, so
        # without this an endpoint whose estimate is below X (its criterion failed) would be claimed
        holm_ok = holm_claims([o.p_value for o in outs], alpha)
        flags = [ok and o.verdict == "pass" for ok, o in zip(holm_ok, outs, strict=True)]
    else:
        flags = fixed_sequence_claims([o.verdict == "pass" for o in outs])
    claimed = tuple(o.endpoint for o, f in zip(outs, flags, strict=True) if f)
    reasons = tuple(o.reason for o in outs)
    # A definite failure decides NO_SHIP even if another criterion could not be evaluated (the IUT cannot pass).
    if any(o.verdict == "fail" for o in outs):
        verdict: Literal["SHIP", "NO_SHIP", "INCONCLUSIVE"] = "NO_SHIP"
    elif any(o.verdict == "not_evaluated" for o in outs):
        verdict = "INCONCLUSIVE"
    else:
        verdict = "SHIP"
    return DecisionOutcome(verdict, verdict == "SHIP", outs, claimed, holm, reasons)
