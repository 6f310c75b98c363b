"""Exact (non-asymptotic) confidence sequences for bounded outcomes, valid from the first unit (CANARY.md §1.4 a2/a3).

Two constructions, both time-uniform by Ville's inequality without any burn-in or plug-in variance:

* **(a2) gamma-exponential AIPW CS** for the average treatment effect ``E[Y(1)] - E[Y(0)]`` of outcomes in
  ``[a, b]`` under a known assignment probability ``pi``, units taken in arrival order (Howard et al. 2021,
  Corollary 2; the confseq ``demo/ate_demo.py`` construction). Pseudo-outcomes
  ``X_t = tau_t + (Z_t - pi)/(pi(1-pi)) (Y_t - mu_{Z_t,t-1})`` with predictable running arm means, sum
  ``S_t = sum X_i``, intrinsic time ``V_t = sum (X_i - tau_i)^2``, and the gamma-exponential mixture boundary with
  scale ``c = 2(b-a)/min(pi, 1-pi)``. The CS is the set of effects not rejected at ``alpha/2`` per side; the
  p-value is one-sided, as confseq's: H0: ATE <= 0 against H1: ATE > 0. Oracles O1f, O1g (confseq C++ unit tests) and O3 (confseq's reference run).
* **(a3) PrPl-EB per-arm CSs with a union bound**: the predictable plug-in empirical-Bernstein CS for a mean of
  ``[0, 1]`` observations (Waudby-Smith & Ramdas 2024, Thm 2), built per arm at ``alpha/2`` and combined as
  ``[L_T - U_C, U_T - L_C]``; coverage of the difference >= 1 - alpha at all times. Arrival order and unequal
  splits do not matter.

Covered: the formulas above, vectorised running bounds, the one-sided always-valid p of (a2).
Not covered: the hedged-capital betting CS (tighter, needs a grid), clustered episodes (feed one bounded value per
randomisation unit), ratio-of-sums estimands (these CSs bound a mean of per-unit values, not sum Y / sum N), and
changing ``pi`` within one sequence.

References:
    Howard SR, Ramdas A, McAuliffe J, Sekhon J. Time-uniform, nonparametric, nonasymptotic confidence sequences.
        Ann Statist 49(2):1055-1080, 2021 (Prop 8: gamma-exponential mixture; Corollary 2: ATE CS).
    Waudby-Smith I, Ramdas A. Estimating means of bounded random variables by betting. JRSS-B 86(1):1-27, 2024
        (arXiv:2010.09686), Theorem 2 (PrPl-EB).
    confseq (Howard & Ramdas), src/confseq/uniform_boundaries.h GammaExponentialMixture; demo/ate_demo.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special

from evalsuite.canary.mixture import best_rho
from evalsuite.rates import StatsInputError


def _alpha_ok(alpha: float, name: str = "alpha") -> None:
    if not (0.0 < alpha < 1.0):
        raise StatsInputError(f"{name} = {alpha!r}: must lie in (0, 1), e.g. 0.05")


def ge_log_m(s: float, v: float, *, rho: float, c: float) -> float:
    """log of the gamma-exponential mixture ``m(s, v)`` for sub-exponential increments with scale ``c``
    (Howard et al. 2021, Prop 8; confseq ``GammaExponentialMixture``).

    ``log m = r ln r - lnG(r) - ln P(r, r) + lnG(A) + ln P(A, x) - A ln x + (c s + v)/c^2`` with ``r = rho/c^2``,
    ``A = (v + rho)/c^2``, ``x = (c s + v)/c^2 + r`` and ``P`` the regularised lower incomplete gamma. Oracle O1f:
    ``ge_log_m(10, 100, rho=best_rho(100, alpha=0.1), c=2) = -0.2490165``. Defined for ``c s + v > -rho``.
    """
    if not (rho > 0 and c > 0 and v >= 0):
        raise StatsInputError(f"rho = {rho!r}, c = {c!r}, v = {v!r}: need rho > 0, c > 0, v >= 0")
    c2 = c * c
    r = rho / c2
    lead = r * math.log(r) - special.gammaln(r) - math.log(special.gammainc(r, r))
    a = (v + rho) / c2
    x = (c * s + v) / c2 + r
    if x <= 0:
        return -math.inf
    log_p = math.log(max(special.gammainc(a, x), 1e-300))
    return float(lead + special.gammaln(a) + log_p - a * math.log(x) + (c * s + v) / c2)


def ge_bound(v: float, *, alpha: float, rho: float, c: float) -> float:
    """Boundary ``u(v)``: the ``s`` at which ``log m(s, v) = ln(1/alpha)`` (brentq). Oracle O1g: 33.02017 at
    ``v = 100, alpha = 0.05, rho = best_rho(100, alpha=0.1), c = 2``."""
    _alpha_ok(alpha)
    target = math.log(1.0 / alpha)

    def f(s: float) -> float:
        return ge_log_m(s, v, rho=rho, c=c) - target

    hi = 1.0
    while f(hi) < 0:
        hi *= 2.0
        if hi > 1e300:
            raise StatsInputError(f"ge_bound: no boundary found for v = {v!r}, rho = {rho!r}, c = {c!r}")
    return float(optimize.brentq(f, 0.0, hi, xtol=1e-13, rtol=1e-13))


@dataclass(frozen=True)
class ExactCS:
    """A running confidence sequence: per step ``t = 1..n`` the estimate, the bounds and (a2 only) the
    always-valid p-value of H0: effect <= 0 (one-sided; None where not computed)."""

    estimate: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    p_value: tuple[float, ...] | None
    method: str


def _lagged_mean(y: np.ndarray, sel: np.ndarray, start: float) -> np.ndarray:
    m = np.cumsum(y * sel) / np.maximum(1, np.cumsum(sel))
    out = np.roll(m, 1)
    out[0] = start
    return out


def _check_binary_design(y: np.ndarray, z: np.ndarray, pi: float, support: tuple[float, float]) -> None:
    if y.ndim != 1 or y.shape != z.shape or y.size == 0:
        raise StatsInputError(f"y, z: need two equal-length non-empty 1-d arrays (got {y.shape} and {z.shape})")
    if not np.all((z == 0) | (z == 1)):
        raise StatsInputError("z: assignments must be 0 (control) or 1 (canary)")
    lo, hi = support
    if not lo < hi or np.any(y < lo) or np.any(y > hi) or not np.all(np.isfinite(y)):
        raise StatsInputError(f"y: every outcome must lie in support [{lo}, {hi}] (cap or rescale the metric first)")
    if not 0.0 < pi < 1.0:
        raise StatsInputError(f"pi = {pi!r}: the known canary assignment probability, in (0, 1)")


def aipw_ate_cs(y: ArrayLike, z: ArrayLike, *, pi: float, support: tuple[float, float] = (0.0, 1.0),
                alpha: float = 0.05, expected_noise: float = 0.16, t_opt: float = 50.0,
                alpha_opt: float = 0.05) -> ExactCS:  # fmt: skip
    """Exact two-sided CS for the ATE of bounded outcomes under known assignment probability ``pi``
    (Howard et al. 2021, Corollary 2), ``alpha/2`` per side, clipped to ``[-(b-a), b-a]``.

    p-value (one-sided, as confseq): H0: ATE <= 0; H1: ATE > 0 — for harm, swap the arms. The mixture is tuned at ``v_opt = t_opt expected_noise (1/pi +
    1/(1-pi))`` with ``rho = best_rho(v_opt, alpha=alpha_opt)`` (the demo's defaults). ``c`` grows like
    ``1/min(pi, 1-pi)``: a 5 % canary has a very wide early CS. Oracle O3: confseq's ``demo/ate_data.csv``
    (final CS [0.055794, 0.293388]).
    """
    _alpha_ok(alpha)
    _alpha_ok(alpha_opt, "alpha_opt")
    y, z = np.asarray(y, float), np.asarray(z)
    _check_binary_design(y, z, pi, support)
    z = z.astype(int)
    center, diam = 0.5 * (support[0] + support[1]), support[1] - support[0]
    y1p, y0p = _lagged_mean(y, z == 1, center), _lagged_mean(y, z == 0, center)
    tau_hat = y1p - y0p
    x = tau_hat + (z - pi) / (pi * (1 - pi)) * (y - np.where(z == 1, y1p, y0p))
    s, v = np.cumsum(x), np.cumsum((x - tau_hat) ** 2)
    c = 2.0 * diam / min(pi, 1.0 - pi)
    rho = best_rho(t_opt * expected_noise * (1 / pi + 1 / (1 - pi)), alpha=alpha_opt)
    t = np.arange(1, y.size + 1)
    radius = np.array([ge_bound(vi, alpha=alpha / 2, rho=rho, c=c) for vi in v]) / t
    p = np.minimum(1.0, np.exp(-np.array([ge_log_m(si, vi, rho=rho, c=c) for si, vi in zip(s, v, strict=True)])))
    est = s / t
    return ExactCS(estimate=tuple(est.tolist()), lower=tuple(np.maximum(-diam, est - radius).tolist()),
                   upper=tuple(np.minimum(diam, est + radius).tolist()), p_value=tuple(p.tolist()),
                   method="aipw_gamma_exponential")  # fmt: skip


def _prpl_lower(x: np.ndarray, a: float, trunc: float) -> np.ndarray:
    t = np.arange(1, x.size + 1)
    mu = (0.5 + np.cumsum(x)) / (t + 1)
    s2 = (0.25 + np.cumsum((x - mu) ** 2)) / (t + 1)
    s2_prev = np.concatenate([[0.25], s2[:-1]])
    lam = np.minimum(trunc, np.sqrt(2.0 * math.log(1.0 / a) / (t * np.log1p(t) * s2_prev)))
    psi = -np.log1p(-lam) - lam
    m_plain = np.cumsum(x) / t
    m_prev = np.concatenate([[0.0], m_plain[:-1]])
    v = (x - m_prev) ** 2
    den = np.cumsum(lam)
    return np.cumsum(lam * x) / den - (math.log(1.0 / a) + np.cumsum(v * psi)) / den


def prpl_eb_cs(x: ArrayLike, *, alpha: float = 0.05, trunc: float = 0.5) -> ExactCS:
    """Two-sided PrPl-EB CS for the mean of ``[0, 1]`` observations in order, ``alpha/2`` per side
    (Waudby-Smith & Ramdas 2024, Thm 2; equals ``confseq.predmix.predmix_empbern_twosided_cs``).

    ``lambda_i = min(trunc, sqrt(2 ln(2/alpha) / (sigma2_{i-1} i ln(1+i))))``, ``L_t = sum lambda X / sum lambda -
    (ln(2/alpha) + sum v_i psi_E(lambda_i)) / sum lambda``, ``U_t = 1 - L_t(1 - X)``, clipped to [0, 1].
    H0 (per side): the mean is outside the CS. Not a running intersection (callers may intersect).
    """
    _alpha_ok(alpha)
    x = np.asarray(x, float)
    if x.ndim != 1 or x.size == 0 or not np.all((x >= 0) & (x <= 1)):
        raise StatsInputError("x: need a non-empty 1-d array of values in [0, 1] (cap and rescale the metric first)")
    if not 0.0 < trunc < 1.0:
        raise StatsInputError(f"trunc = {trunc!r}: must lie in (0, 1), e.g. 0.5")
    lo = np.maximum(_prpl_lower(x, alpha / 2, trunc), 0.0)
    hi = np.minimum(1.0 - _prpl_lower(1.0 - x, alpha / 2, trunc), 1.0)
    est = np.cumsum(x) / np.arange(1, x.size + 1)
    return ExactCS(estimate=tuple(est.tolist()), lower=tuple(lo.tolist()), upper=tuple(hi.tolist()),
                   p_value=None, method="prpl_eb")  # fmt: skip


@dataclass(frozen=True)
class UnionBound:
    """Bounds on ``mean_T - mean_C`` at one look from per-arm exact CSs (union bound)."""

    estimate: float
    lower: float
    upper: float
    n_treatment: int
    n_control: int


def union_difference(x_treatment: ArrayLike, x_control: ArrayLike, *, alpha: float = 0.05,
                     trunc: float = 0.5) -> UnionBound:  # fmt: skip
    """``[L_T - U_C, U_T - L_C]`` from PrPl-EB CSs built at ``alpha/2`` per arm (each two-sided, so ``alpha/4``
    per side), each arm's bounds intersected over its own running sequence; covers ``mu_T - mu_C`` at every time
    with probability >= 1 - alpha (CANARY.md §1.4 a3). Values in [0, 1], one per randomisation unit, in arrival
    order within each arm. H0 (one side, e.g. harm): ``mu_T - mu_C >= 0`` is rejected when ``upper < 0``.
    """
    _alpha_ok(alpha)
    t = prpl_eb_cs(x_treatment, alpha=alpha / 2, trunc=trunc)
    c = prpl_eb_cs(x_control, alpha=alpha / 2, trunc=trunc)
    lt, ut, lc, uc = max(t.lower), min(t.upper), max(c.lower), min(c.upper)
    return UnionBound(estimate=t.estimate[-1] - c.estimate[-1], lower=lt - uc, upper=ut - lc,
                      n_treatment=len(t.lower), n_control=len(c.lower))  # fmt: skip
