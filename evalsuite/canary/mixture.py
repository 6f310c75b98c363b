"""Anytime-valid confidence sequences from the normal-mixture martingale (mSPRT with normal mixing).

Two scales describe the same object (CANARY.md §1.2–§1.3):

* the **sum scale** of Howard et al. (2021): a centred sum ``s`` with intrinsic time ``v`` and the Robbins normal
  mixture ``m(s, v) = sqrt(rho/(v+rho)) exp(s^2 / (2 (v+rho)))``; Ville's inequality gives
  ``P(exists n: m(S_n, V_n) >= 1/alpha) <= alpha``;
* the **estimator scale** of Johari et al. (2017, 2022): an asymptotically normal effect estimate ``delta_hat`` with
  plug-in variance ``var_hat`` and mixing ``theta ~ N(theta0, tau2)``. With ``s = delta_hat / var_hat``,
  ``v = 1 / var_hat`` and ``rho = 1 / tau2`` the two are identical (oracle O2, tested).

H0 (two-sided): ``theta = theta0``; H1: ``theta != theta0``. One-sided (half-normal mixing on ``theta > theta0``):
H0: ``theta <= theta0``, a supermartingale under the whole composite null, which is what non-inferiority and harm
tests need. The confidence sequence is the set of ``theta0`` not rejected; its running intersection stays valid.

Covered: the closed-form two-sided CS, one-sided bounds (root of ``log Lambda+ = ln(1/alpha)``, brentq), mixing scale
tuned to a planned horizon, always-valid p-values, the Waudby-Smith et al. asymptotic-CS half-width (O9).
Not covered here: exact (non-asymptotic) CSs, the gamma-exponential AIPW CS and PrPl-EB (CANARY.md §1.4 a2/a3),
which are in ``evalsuite.canary.exact``.
Validity with a plug-in variance is asymptotic (Waudby-Smith et al. 2024): callers enforce a burn-in.

References:
    Robbins H. Statistical methods related to the law of the iterated logarithm. Ann Math Stat 41:1397-1409, 1970.
    Howard SR, Ramdas A, McAuliffe J, Sekhon J. Time-uniform, nonparametric, nonasymptotic confidence sequences.
        Ann Statist 49(2):1055-1080, 2021 (Props 4-5; Sec 3.5 for the tuning); confseq unit tests (oracles O1).
    Johari R, Koomen P, Pekelis L, Walsh D. Peeking at A/B tests. KDD 2017; Johari, Pekelis, Walsh. Always valid
        inference. Operations Research 70(3):1806-1821, 2022.
    Waudby-Smith I, Arbour D, Sinha R, Kennedy EH, Ramdas A. Time-uniform central limit theory and asymptotic
        confidence sequences. Ann Statist 2024 (arXiv:2103.06476).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, stats

from evalsuite.rates import StatsInputError


def _check_alpha(alpha: float) -> None:
    if not (0.0 < alpha < 1.0):
        raise StatsInputError(f"alpha = {alpha!r}: must lie in (0, 1), e.g. 0.05")


def _tuning_factor(alpha: float) -> float:
    l = math.log(1.0 / alpha)  # noqa: E741
    return 2.0 * l + math.log(1.0 + 2.0 * l)


def best_rho(v_opt: float, *, alpha: float) -> float:
    """Mixture precision rho that minimises the two-sided boundary at intrinsic time ``v_opt`` (Howard §3.5).

    ``rho = v_opt / (2 ln(1/alpha) + ln(1 + 2 ln(1/alpha)))``; for a one-sided boundary at level a pass ``alpha=2a``
    (confseq convention). Oracle O1a: ``best_rho(100, 0.05) = 12.60056``.
    """
    _check_alpha(alpha)
    return v_opt / _tuning_factor(alpha)


def tau2_for_horizon(var_at_horizon: float, *, alpha: float, sides: int = 2) -> float:
    """Mixing variance tau^2 that makes the CS tightest when Var(delta_hat) = ``var_at_horizon`` (tau^2 = 1/rho*).

    ``tau2 = V_h (2 ln(1/a) + ln(1 + 2 ln(1/a)))`` with ``a = alpha`` (two-sided) or ``a = 2 alpha`` (one-sided).
    Validity holds for any tau^2 fixed before the data; this choice only decides where the CS is tightest.
    """
    if not (var_at_horizon > 0 and math.isfinite(var_at_horizon)):
        raise StatsInputError(f"var_at_horizon = {var_at_horizon!r}: must be a positive finite variance")
    if sides not in (1, 2):
        raise StatsInputError(f"sides = {sides!r}: 1 or 2")
    a = alpha if sides == 2 else 2.0 * alpha
    _check_alpha(a)
    return var_at_horizon * _tuning_factor(a)


def nm_log_m_two_sided(s: ArrayLike, v: ArrayLike, *, rho: float) -> np.ndarray:
    """log of Robbins' two-sided normal mixture ``m(s, v)`` (Howard et al. 2021, Prop 4). Oracle O1b."""
    s, v = np.asarray(s, float), np.asarray(v, float)
    return 0.5 * np.log(rho / (v + rho)) + s * s / (2.0 * (v + rho))


def nm_log_m_one_sided(s: ArrayLike, v: ArrayLike, *, rho: float) -> np.ndarray:
    """log of the one-sided (half-normal mixing) normal mixture (Howard et al. 2021, Prop 5). Oracle O1d."""
    s, v = np.asarray(s, float), np.asarray(v, float)
    return (0.5 * np.log(4.0 * rho / (v + rho)) + s * s / (2.0 * (v + rho))
            + stats.norm.logcdf(s / np.sqrt(v + rho)))  # fmt: skip


def nm_bound_two_sided(v: ArrayLike, *, alpha: float, rho: float) -> np.ndarray:
    """Uniform boundary ``u(v) = sqrt((v+rho) ln((v+rho)/(rho alpha^2)))``: P(exists n: |S_n| >= u(V_n)) <= alpha."""
    _check_alpha(alpha)
    v = np.asarray(v, float)
    return np.sqrt((v + rho) * (np.log1p(v / rho) + 2.0 * math.log(1.0 / alpha)))


def nm_bound_one_sided(v: float, *, alpha: float, rho: float) -> float:
    """One-sided uniform boundary: the root in s of ``log m_one_sided(s, v) = ln(1/alpha)`` (brentq). Oracle O1e."""
    _check_alpha(alpha)
    target = math.log(1.0 / alpha)

    def f(s: float) -> float:
        return float(nm_log_m_one_sided(s, v, rho=rho)) - target

    hi = max(1.0, math.sqrt(v + rho))
    while f(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(f, 0.0, hi, xtol=1e-12, rtol=1e-14))


def _check_var(var_hat: np.ndarray) -> None:
    if np.any(~np.isfinite(var_hat)) or np.any(var_hat <= 0):
        raise StatsInputError("var_hat: every variance must be positive and finite (a zero variance is 'degenerate')")


def msprt_log_lr(delta_hat: ArrayLike, var_hat: ArrayLike, *, tau2: float, theta0: float = 0.0) -> np.ndarray:
    """Two-sided mSPRT statistic ``log Lambda(theta0) = ½ ln(V/(V+tau2)) + tau2 d^2 / (2 V (V+tau2))``, d = Δ̂−θ0.

    With equal n per arm and V = 2 sigma^2/n this is Johari et al.'s closed form (oracle O2). H0: theta = theta0.
    """
    d = np.asarray(delta_hat, float) - theta0
    V = np.asarray(var_hat, float)
    _check_var(V)
    return 0.5 * np.log(V / (V + tau2)) + tau2 * d * d / (2.0 * V * (V + tau2))


def msprt_log_lr_one_sided(delta_hat: ArrayLike, var_hat: ArrayLike, *, tau2: float, theta0: float = 0.0) -> np.ndarray:
    """One-sided mSPRT for H0: theta <= theta0 vs H1: theta > theta0 (half-normal mixing on theta > theta0).

    ``log Lambda+ = ½ ln(4V/(V+tau2)) + tau2 d^2/(2V(V+tau2)) + ln Phi(d tau / sqrt(V (V+tau2)))``, d = Δ̂ − θ0;
    equal to Howard's one-sided normal mixture with s = d/V, v = 1/V, rho = 1/tau2. For H0: theta >= theta0 pass
    the negated estimate and ``-theta0``.
    """
    d = np.asarray(delta_hat, float) - theta0
    V = np.asarray(var_hat, float)
    _check_var(V)
    return (0.5 * np.log(4.0 * V / (V + tau2)) + tau2 * d * d / (2.0 * V * (V + tau2))
            + stats.norm.logcdf(d * math.sqrt(tau2) / np.sqrt(V * (V + tau2))))  # fmt: skip


def cs_halfwidth(var_hat: ArrayLike, *, tau2: float, alpha: float) -> np.ndarray:
    """Two-sided always-valid half-width ``sqrt(V (V+tau2)/tau2 · ln((V+tau2)/(alpha^2 V)))`` (CANARY §1.3)."""
    _check_alpha(alpha)
    V = np.asarray(var_hat, float)
    _check_var(V)
    return np.sqrt(V * (V + tau2) / tau2 * np.log((V + tau2) / (V * alpha**2)))


def cs_two_sided(delta_hat: float, var_hat: float, *, tau2: float, alpha: float) -> tuple[float, float]:
    """The always-valid (1 − alpha) confidence sequence at one look: ``delta_hat ± cs_halfwidth``."""
    hw = float(cs_halfwidth(var_hat, tau2=tau2, alpha=alpha))
    return delta_hat - hw, delta_hat + hw


def one_sided_halfwidth(var_hat: float, *, tau2: float, alpha: float) -> float:
    """Distance d* with ``log Lambda+(Δ̂ − d*) = ln(1/alpha)``; it depends on V, tau2 and alpha only.

    The always-valid lower bound is ``L = Δ̂ − d*`` (H0: theta <= L rejected at level alpha) and the upper bound
    ``U = Δ̂ + d*``. Equals ``nm_bound_one_sided(1/V, alpha, 1/tau2) · V`` (tested).
    """
    _check_alpha(alpha)
    _check_var(np.asarray(var_hat, float))
    return nm_bound_one_sided(1.0 / var_hat, alpha=alpha, rho=1.0 / tau2) * var_hat


def one_sided_halfwidth_vec(var_hat: ArrayLike, *, tau2: float, alpha: float, iters: int = 80) -> np.ndarray:
    """Vectorised :func:`one_sided_halfwidth` (bisection on x = d*/sqrt(V), which depends on r = tau2/V only).

    For simulations over many replications and looks; agrees with the brentq version to ~1e-12 (tested).
    """
    _check_alpha(alpha)
    V = np.asarray(var_hat, float)
    _check_var(V)
    r = tau2 / V
    target = math.log(1.0 / alpha)

    def f(x: np.ndarray) -> np.ndarray:
        return 0.5 * np.log(4.0 / (1.0 + r)) + r * x * x / (2.0 * (1.0 + r)) + stats.norm.logcdf(x * np.sqrt(r / (1.0 + r)))

    lo, hi = np.zeros_like(r), np.ones_like(r)
    while np.any(f(hi) < target):
        hi = np.where(f(hi) < target, 2.0 * hi, hi)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        below = f(mid) < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 0.5 * (lo + hi) * np.sqrt(V)


def always_valid_p(log_lr_history: ArrayLike) -> float:
    """Always-valid p-value after the looks so far: ``min(1, min_k 1/Lambda_k) = min(1, exp(-max_k log Lambda_k))``."""
    h = np.asarray(log_lr_history, float)
    if h.size == 0:
        return 1.0
    return float(min(1.0, math.exp(-float(np.max(h)))))


def rho2_opt(t_opt: float, *, alpha: float) -> float:
    """Waudby-Smith et al.'s exact optimiser of the asymptotic-CS width at time ``t_opt`` (confseq ``rho2_opt``)."""
    _check_alpha(alpha)
    return (-(alpha**2) - 2 * math.log(alpha) + math.log(-2 * math.log(alpha) + 1 - alpha**2)) / t_opt


def asymp_cs_halfwidth(t: ArrayLike, *, sigma_hat: float, rho2: float, alpha: float) -> np.ndarray:
    """Asymptotic CS half-width ``sigma_hat sqrt(2(t rho^2+1)/(t^2 rho^2) ln(sqrt(t rho^2+1)/alpha))`` (Thm 2.2).

    Identical to the normal-mixture bound with v = t sigma^2 and rho = sigma^2 / rho^2, divided by t (oracle O9).
    """
    t = np.asarray(t, float)
    return sigma_hat * np.sqrt(2 * (t * rho2 + 1) / (t * t * rho2) * np.log(np.sqrt(t * rho2 + 1) / alpha))
