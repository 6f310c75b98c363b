"""Null-restricted (score-type) variance for the seeds × repositories estimators, so that intervals hold at rare
rates.

Why: the crossed (and paired clustered) variance V̂ is estimated from the data, and at a low baseline rate the
estimate and its SE are strongly negatively correlated (a lucky low baseline gives both a high Δ̂ and a small V̂),
so the symmetric Wald bound Δ̂ − t·√V̂ is anti-conservative on the side a non-inferiority test uses.

What: the design-effect-adjusted Farrington–Manning score test. With DEFF = V̂ / B(p̂) — the observed variance over
the variance iid episodes would have, B(p) = p_T(1−p_T)/N_T + p_C(1−p_C)/N_C with N the episodes per arm — the
variance under H0: Δ = Δ0 is V(Δ0) = DEFF · B(p̃(Δ0)), p̃ the restricted MLE of Farrington & Manning (1990). The test
statistic T(Δ0) = (Δ̂ − Δ0)/√V(Δ0) is referred to the estimator's t on its (Satterthwaite) df, which is unchanged
because every variance piece is scaled by the same factor; the interval inverts T. At p ≈ 0.5 the factor B(p̃)/B(p̂)
is ≈ 1 and the result is the Wald interval.

Covered: two-sided CI, one-sided lower bound and p-values for any null value; one arm constant (the variance is
then floored at the restricted-MLE binomial variance, ``null_variance``). Not covered: a separate DEFF per arm (one
pooled design effect is used), designs where both arms are constant (not estimable: handled upstream).

References: Farrington CP, Manning G, Stat Med 1990;9:1447–1454; Miettinen O, Nurminen M, Stat Med 1985;4:213–226;
Donner A, Klar N, Design and Analysis of Cluster Randomization Trials (2000), ch. 6 (design-effect-adjusted tests).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize, stats

from evalsuite.rates import restricted_mle
from evalsuite.variance import DfRule, EffectEstimate, crossed_effect, paired_clustered_diff, task_weights

_EDGE = 1e-9
EXPONENT = 2.0  # random effects on the probability scale scale with p(1-p) under a logit model


def _g(p: float) -> float:
    return p * (1.0 - p)


@dataclass(frozen=True)
class ScoreInputs:
    """What the null-restricted variance needs: the arms' rates and episodes, and V̂ split into the treatment-seed,
    baseline-seed and shared (task) pieces."""

    p_t: float
    p_c: float
    n_t: int
    n_c: int
    v_t: float
    v_c: float
    v_rest: float


def _ratio(p_new: float, p_old: float) -> float:
    return (_g(p_new) / _g(p_old)) ** EXPONENT if _g(p_old) > 0 else 1.0


def null_variance(s: ScoreInputs, delta0: float) -> float:
    """V(Δ0): each arm's piece scaled by (g(p̃)/g(p̂))^EXPONENT, g(p) = p(1 − p), p̃ the restricted MLE at Δ0.

    When an arm is constant (p̂ = 0 or 1) its observed variance is 0 and no scaling can restore it, so V(Δ0) is
    floored at the Farrington–Manning variance of independent episodes at the restricted rates,
    g(p̃_T)/N_T + g(p̃_C)/N_C (issue #37: 2/500 vs 0/500 otherwise "passed" superiority, Fisher p = 0.25)."""
    pt1, pt2 = restricted_mle(s.p_t * s.n_t, s.n_t, s.p_c * s.n_c, s.n_c, delta0)
    r_t, r_c = _ratio(pt1, s.p_t), _ratio(pt2, s.p_c)
    var = s.v_t * r_t + s.v_c * r_c + s.v_rest * 0.5 * (r_t + r_c)
    if _g(s.p_t) <= 0 or _g(s.p_c) <= 0:
        var = max(var, _g(pt1) / s.n_t + _g(pt2) / s.n_c)
    return var


def score_stat(est: EffectEstimate, s: ScoreInputs, delta0: float) -> float:
    """T(Δ0) = (Δ̂ − Δ0)/√V(Δ0) for H0: Δ = Δ0 (±inf when the restricted variance is 0)."""
    var = null_variance(s, delta0)
    diff = est.estimate - delta0
    if var <= 1e-300:
        return 0.0 if abs(diff) < 1e-15 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def _limit(est: EffectEstimate, s: ScoreInputs, crit: float, side: int) -> float:
    def f(d0: float) -> float:
        return score_stat(est, s, d0) - side * crit

    a, b = (-1.0 + _EDGE, est.estimate) if side > 0 else (est.estimate, 1.0 - _EDGE)
    if side > 0 and f(a) <= 0:
        return -1.0
    if side < 0 and f(b) >= 0:
        return 1.0
    return float(optimize.brentq(f, a, b, xtol=1e-10))


def score_adjusted(est: EffectEstimate, s: ScoreInputs) -> EffectEstimate:
    """``est`` with its CI, lower bound and p-values from the null-restricted variance (module docstring).

    Returned unchanged when ``est`` is degenerate or both arms are constant.
    """
    if est.degenerate or (_g(s.p_t) <= 0 and _g(s.p_c) <= 0) or not math.isfinite(est.df):
        return est
    q2 = float(stats.t.ppf(1 - est.alpha / 2, est.df))
    q1 = float(stats.t.ppf(1 - est.alpha_one_sided, est.df))
    lo, hi, low1 = _limit(est, s, q2, 1), _limit(est, s, q2, -1), _limit(est, s, q1, 1)
    df = est.df

    def p_fn(null: float) -> float:
        return float(stats.t.sf(score_stat(est, s, null), df))

    note = "score-type variance (each arm's variance evaluated at the rates restricted to the null value)"
    return dataclasses.replace(est, ci_low=lo, ci_high=hi, lower_one_sided=low1, p_fn=p_fn,
                               method=est.method + ", score-type variance", notes=(*est.notes, note))  # fmt: skip


def arm_rates(yt: np.ndarray, yc: np.ndarray, w: np.ndarray | None = None) -> tuple[float, float]:
    """(p_T, p_C): the arms' mean cell rates with task weights ``w`` (None: equal), so that p_T − p_C = Δ̂."""
    if w is None:
        return float(np.mean(yt)), float(np.mean(yc))
    return float(np.mean(yt @ w)), float(np.mean(yc @ w))


def crossed_score(yt: np.ndarray, yc: np.ndarray, repo: np.ndarray, *, k: int = 1, alpha_one_sided: float = 0.025,
                  df_rule: DfRule = "satterthwaite", weighting: Literal["task", "repo"] = "task",
                  endpoint: str = "") -> EffectEstimate:  # fmt: skip
    """The primary method-level estimator: ``crossed_effect`` with the score-type variance (``k`` episodes per cell)."""
    est = crossed_effect(yt, yc, repo, alpha_one_sided=alpha_one_sided, df_rule=df_rule, weighting=weighting,
                         endpoint=endpoint)  # fmt: skip
    inv = np.unique(np.asarray(repo).astype(str), return_inverse=True)[1]
    w = task_weights(inv, int(inv.max()) + 1, weighting) if weighting == "repo" else None
    yt, yc = np.asarray(yt, float), np.asarray(yc, float)
    p_t, p_c = arm_rates(yt, yc, w)
    ww = np.full(yt.shape[1], 1.0 / yt.shape[1]) if w is None else w
    v_t, v_c = float(np.var(yt @ ww, ddof=1) / yt.shape[0]), float(np.var(yc @ ww, ddof=1) / yc.shape[0])
    n = yt.shape[1] * k
    s = ScoreInputs(p_t, p_c, yt.shape[0] * n, yc.shape[0] * n, v_t, v_c, max(est.var_total - v_t - v_c, 0.0))
    return score_adjusted(est, s)


def paired_score(ya: np.ndarray, yb: np.ndarray, repo: np.ndarray, *, k: int = 1, alpha_one_sided: float = 0.025,
                 endpoint: str = "") -> EffectEstimate:  # fmt: skip
    """The primary artifact-level estimator: ``paired_clustered_diff`` with the score-type variance."""
    est = paired_clustered_diff(ya, yb, repo, alpha_one_sided=alpha_one_sided, endpoint=endpoint)
    ya, yb = np.asarray(ya, float).ravel(), np.asarray(yb, float).ravel()
    n = ya.shape[0] * k
    return score_adjusted(est, ScoreInputs(float(ya.mean()), float(yb.mean()), n, n, 0.0, 0.0, est.var_total))
