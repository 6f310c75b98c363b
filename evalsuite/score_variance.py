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

Two rules, named by the plan's ``decision.variance`` (STATS §2):

- ``score`` (plans up to mini v4): each arm's whole seed piece is scaled by (g(p̃)/g(p̂))², g(p) = p(1 − p), and
  the shared task piece by the mean of the two arms' ratios. Squaring is right for a random effect on the logit
  scale (its probability-scale variance is g(p)²·σ²) but not for the Bernoulli noise inside the seed piece, whose
  variance is g(p)/N; at a rare observed rate the seed piece is almost all noise, so it is over-scaled (×32 for an
  arm at 0.02 restricted to 0.13).
- ``score_components`` (mini v5 on): each arm's seed piece is split into its Bernoulli part g(p̂)/N, re-evaluated
  at p̃ (g(p̃)/N), and the excess over it, scaled by (g(p̃)/g(p̂))²; the task piece is split into each arm's task
  variance (scaled by its own arm's squared ratio) and their covariance (by the product of the two ratios' roots).
  A constant arm needs no floor: its Bernoulli part at p̃ is the floor. At p̂ = p̃ it is the Wald variance with
  each arm's seed piece floored at its Bernoulli variance.

Covered: two-sided CI, one-sided lower bound and p-values for any null value; one arm constant. Limits invert the
test and are the infimum / supremum of the null values it does not reject (a grid scan, then a root in the first
bracket), so a non-monotone T(Δ0) cannot give a root inside the confidence set. Not covered: designs where both
arms are constant (not estimable: handled upstream); ``score_components`` for the artifact estimand (one
checkpoint per arm has no seed piece to split: the plan schema refuses it).

References: Farrington CP, Manning G, Stat Med 1990;9:1447–1454; Miettinen O, Nurminen M, Stat Med 1985;4:213–226;
Donner A, Klar N, Design and Analysis of Cluster Randomization Trials (2000), ch. 6 (design-effect-adjusted tests).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, TypeVar, get_args

import numpy as np
from scipy import optimize, stats

from evalsuite.rates import restricted_mle
from evalsuite.variance import (
    DfRule,
    EffectEstimate,
    crossed_effect,
    paired_clustered_diff,
    task_piece_split,
    task_weights,
)

_EDGE = 1e-9
EXPONENT = 2.0  # random effects on the probability scale scale with p(1-p) under a logit model
VarianceRule = Literal["score", "score_components"]
VARIANCE_RULES: tuple[str, ...] = get_args(VarianceRule)
_GRID = 100  # null values scanned per limit before the root is refined


_P = TypeVar("_P", float, np.ndarray)


def _g(p: _P) -> _P:
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
    # ``score_components`` only: the task piece split into each arm's task variance (net of its noise) and the
    # arms' task covariance, v_rest = max(tau_t + tau_c − 2·cov, 0) at the observed rates
    tau_t: float = 0.0
    tau_c: float = 0.0
    cov: float = 0.0
    rule: VarianceRule = "score"
    # ``score_components`` only: each arm's Bernoulli variance of its seed piece at the observed task rates,
    # Σ_j w_j²·p̂_j(1 − p̂_j)/(K·m), and the N of a constant arm's floor g(p̃)/N (m·K/Σw²)
    b_t: float = 0.0
    b_c: float = 0.0
    nb_t: float = 0.0
    nb_c: float = 0.0


def _ratio(p_new: float, p_old: float) -> float:
    return (_g(p_new) / _g(p_old)) ** EXPONENT if _g(p_old) > 0 else 1.0


def _components_variance(s: ScoreInputs, pt1: float, pt2: float) -> float:
    """``score_components``: Bernoulli parts at the restricted rates, random-effect parts by squared ratios."""
    r_t, r_c = _ratio(pt1, s.p_t), _ratio(pt2, s.p_c)
    var = 0.0
    arms = ((s.v_t, s.b_t, s.p_t, pt1, s.nb_t, r_t), (s.v_c, s.b_c, s.p_c, pt2, s.nb_c, r_c))
    for v, b, p_hat, p_til, nb, r in arms:
        if _g(p_hat) <= 0:  # a constant arm: no task spread to learn from, so independent episodes at p̃
            var += _g(p_til) / nb
        else:
            var += b * _g(p_til) / _g(p_hat) + max(v - b, 0.0) * r
    return var + max(s.tau_t * r_t + s.tau_c * r_c - 2.0 * s.cov * math.sqrt(r_t * r_c), 0.0)


def null_variance(s: ScoreInputs, delta0: float) -> float:
    """V(Δ0) under ``s.rule`` (module docstring). For ``score``: each arm's piece scaled by (g(p̃)/g(p̂))^EXPONENT, g(p) = p(1 − p), p̃ the restricted MLE at Δ0.

    When an arm is constant (p̂ = 0 or 1) its observed variance is 0 and no scaling can restore it, so V(Δ0) is
    floored at the Farrington–Manning variance of independent episodes at the restricted rates,
    g(p̃_T)/N_T + g(p̃_C)/N_C (issue #37: 2/500 vs 0/500 otherwise "passed" superiority, Fisher p = 0.25)."""
    pt1, pt2 = restricted_mle(s.p_t * s.n_t, s.n_t, s.p_c * s.n_c, s.n_c, delta0)
    if s.rule == "score_components":
        return _components_variance(s, pt1, pt2)
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


def _limits(est: EffectEstimate, s: ScoreInputs, crits: tuple[float, ...], side: int) -> list[float]:
    """For each critical value, the infimum (side +1) or supremum (side −1) of the null values the test does not
    reject.

    T(Δ0) need not be monotone in Δ0 (V(Δ0) rises and falls as the restricted rates move), so a root found in
    [−1, Δ̂] may lie inside the confidence set; a grid of T (computed once for all ``crits``) finds the outermost
    not-rejected value's bracket first, and a root is refined inside it."""
    grid = (np.linspace(-1.0 + _EDGE, est.estimate, _GRID) if side > 0
            else np.linspace(1.0 - _EDGE, est.estimate, _GRID))  # fmt: skip
    t = np.array([side * score_stat(est, s, float(d0)) for d0 in grid])
    out = []
    for crit in crits:
        i = int(np.flatnonzero(t <= crit)[0])  # the first not rejected; Δ̂ itself (T = 0, the last point) always is
        if i == 0:
            out.append(float(-side))
            continue
        out.append(float(optimize.brentq(lambda d0, c=crit: side * score_stat(est, s, d0) - c,
                                         float(grid[i - 1]), float(grid[i]), xtol=1e-10)))  # fmt: skip
    return out


def score_adjusted(est: EffectEstimate, s: ScoreInputs) -> EffectEstimate:
    """``est`` with its CI, lower bound and p-values from the null-restricted variance (module docstring).

    Returned unchanged when ``est`` is degenerate or both arms are constant.
    """
    if est.degenerate or (_g(s.p_t) <= 0 and _g(s.p_c) <= 0) or not math.isfinite(est.df):
        return est
    q2 = float(stats.t.ppf(1 - est.alpha / 2, est.df))
    q1 = float(stats.t.ppf(1 - est.alpha_one_sided, est.df))
    lo, low1 = _limits(est, s, (q2, q1), 1)
    (hi,) = _limits(est, s, (q2,), -1)
    df = est.df

    def p_fn(null: float) -> float:
        return float(stats.t.sf(score_stat(est, s, null), df))

    note = "score-type variance (each arm's variance evaluated at the rates restricted to the null value)"
    name = ", score-type variance" + (" by components" if s.rule == "score_components" else "")
    return dataclasses.replace(est, ci_low=lo, ci_high=hi, lower_one_sided=low1, p_fn=p_fn,
                               method=est.method + name, notes=(*est.notes, note))  # fmt: skip


def arm_rates(yt: np.ndarray, yc: np.ndarray, w: np.ndarray | None = None) -> tuple[float, float]:
    """(p_T, p_C): the arms' mean cell rates with task weights ``w`` (None: equal), so that p_T − p_C = Δ̂."""
    if w is None:
        return float(np.mean(yt)), float(np.mean(yc))
    return float(np.mean(yt @ w)), float(np.mean(yc @ w))


def crossed_score(yt: np.ndarray, yc: np.ndarray, repo: np.ndarray, *, k: int = 1, alpha_one_sided: float = 0.025,
                  df_rule: DfRule = "satterthwaite", weighting: Literal["task", "repo"] = "task",
                  endpoint: str = "", variance: VarianceRule = "score") -> EffectEstimate:  # fmt: skip
    """The primary method-level estimator: ``crossed_effect`` with the score-type variance (``k`` episodes per cell)
    under the plan's rule ``variance`` (module docstring)."""
    if variance not in VARIANCE_RULES:
        raise ValueError(f"variance rule {variance!r}: expected one of {VARIANCE_RULES}")
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
    if variance == "score_components":
        tau_t, tau_c, cov = task_piece_split(yt, yc, repo, weighting)
        sw2 = float(np.sum(ww**2))
        b_t, b_c = (float(ww**2 @ _g(y.mean(axis=0))) / (k * y.shape[0]) for y in (yt, yc))
        s = dataclasses.replace(s, tau_t=tau_t, tau_c=tau_c, cov=cov, rule=variance, b_t=b_t, b_c=b_c,
                                nb_t=yt.shape[0] * k / sw2, nb_c=yc.shape[0] * k / sw2)  # fmt: skip
    return score_adjusted(est, s)


def paired_score(ya: np.ndarray, yb: np.ndarray, repo: np.ndarray, *, k: int = 1, alpha_one_sided: float = 0.025,
                 endpoint: str = "") -> EffectEstimate:  # fmt: skip
    """The primary artifact-level estimator: ``paired_clustered_diff`` with the score-type variance."""
    est = paired_clustered_diff(ya, yb, repo, alpha_one_sided=alpha_one_sided, endpoint=endpoint)
    ya, yb = np.asarray(ya, float).ravel(), np.asarray(yb, float).ravel()
    n = ya.shape[0] * k
    return score_adjusted(est, ScoreInputs(float(ya.mean()), float(yb.mean()), n, n, 0.0, 0.0, est.var_total))
