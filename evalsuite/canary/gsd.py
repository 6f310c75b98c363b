"""Group-sequential designs: error-spending boundaries for pre-planned looks (CANARY.md §1.5).

Under H0 the z-statistics Z_k = Δ̂_k/√V̂_k at information fractions t_k follow the canonical joint distribution
(Cov(Z_j, Z_k) = sqrt(t_j/t_k)). A boundary c_k solves

    P_H0(|Z_j| < c_j for all j < k, Z_k >= c_k) = alpha*(t_k) − alpha*(t_{k−1})

by recursive numerical integration of the score S = Z√t (independent Gaussian increments; Armitage, McPherson &
Rowe 1969; Jennison & Turnbull 2000, ch. 19), Simpson's rule on ``n_grid`` nodes (401 by default: the oracles
agree to 1e-8 with 201, 401 and 801 nodes; the design study's prototype used 2001). One-sided designs have no lower
stopping boundary (efficacy only); two-sided designs are symmetric and spend alpha/2 per side
(ldbounds/gsDesign convention: the famous 4.877 for 5 looks at two-sided 0.05).

Covered: Lan–DeMets O'Brien–Fleming, Pocock and Kim–DeMets power spending; classical OBF/Pocock constants; the
crossing probability of any boundary (e.g. naive repeated 1.96 tests). Not covered: futility boundaries, beta
spending, unequal variances across looks beyond the information fraction.

References: Lan KKG, DeMets DL. Discrete sequential boundaries for clinical trials. Biometrika 70:659-663, 1983;
O'Brien PC, Fleming TR. Biometrics 35:549-556, 1979; Pocock SJ. Biometrika 64:191-199, 1977; DeMets DL, Lan KKG.
Stat Med 13:1341-1352, 1994; Jennison C, Turnbull BW. Group Sequential Methods, 2000 (Tables 2.1, 2.3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, stats

from evalsuite.rates import StatsInputError

SpendingName = Literal["obf", "pocock", "power"]


def spend_obf(t: ArrayLike, alpha: float) -> np.ndarray:
    """Lan–DeMets O'Brien–Fleming-type spending for one-sided level alpha: ``2 − 2 Φ(z_{1−alpha/2} / √t)``."""
    t = np.asarray(t, float)
    return 2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / np.sqrt(t))


def spend_pocock(t: ArrayLike, alpha: float) -> np.ndarray:
    """Lan–DeMets Pocock-type spending ``alpha ln(1 + (e − 1) t)``."""
    return alpha * np.log1p((math.e - 1) * np.asarray(t, float))


def spend_power(t: ArrayLike, alpha: float, rho: float = 2.0) -> np.ndarray:
    """Kim–DeMets power family ``alpha t^rho`` (spotify-confidence's default family)."""
    return alpha * np.asarray(t, float) ** rho


SPENDING: dict[str, Callable[[ArrayLike, float], np.ndarray]] = {
    "obf": spend_obf, "pocock": spend_pocock, "power": spend_power,
}  # fmt: skip


class _Recursion:
    """Density of the score S_k on the continuation region, carried from look to look."""

    def __init__(self, n_grid: int) -> None:
        self.n = n_grid if n_grid % 2 == 1 else n_grid + 1
        self.grid: np.ndarray | None = None
        self.fw: np.ndarray | None = None  # density × Simpson weights
        self.t_prev = 0.0

    def cross_prob(self, b: float, t: float, sides: int) -> float:
        if self.grid is None or self.fw is None:
            return float(stats.norm.sf(b)) * (2 if sides == 2 else 1)
        d, lim = math.sqrt(t - self.t_prev), b * math.sqrt(t)
        up = float(np.sum(self.fw * stats.norm.sf((lim - self.grid) / d)))
        if sides == 2:
            up += float(np.sum(self.fw * stats.norm.cdf((-lim - self.grid) / d)))
        return up

    def advance(self, b: float, t: float, sides: int) -> None:
        lim = b * math.sqrt(t)
        lo = -lim if sides == 2 else -(8.0 * math.sqrt(t) + 1.0)
        g = np.linspace(lo, lim, self.n)
        w = np.ones(self.n)
        w[1:-1:2], w[2:-1:2] = 4.0, 2.0
        w *= (lim - lo) / (self.n - 1) / 3.0
        if self.grid is None or self.fw is None:
            f = stats.norm.pdf(g / math.sqrt(t)) / math.sqrt(t)
        else:
            d = math.sqrt(t - self.t_prev)
            f = (stats.norm.pdf((g[:, None] - self.grid[None, :]) / d) / d) @ self.fw
        self.grid, self.fw, self.t_prev = g, f * w, t


def _fractions(t: ArrayLike) -> np.ndarray:
    tt = np.asarray(t, float)
    if tt.ndim != 1 or tt.size == 0 or np.any(tt <= 0) or np.any(tt > 1) or np.any(np.diff(tt) <= 0):
        raise StatsInputError(f"information fractions {tt.tolist()}: need strictly increasing values in (0, 1]")
    return tt


def gs_bounds_spending(t: ArrayLike, *, alpha: float, sides: int = 2, spending: SpendingName = "obf",
                       n_grid: int = 401) -> np.ndarray:  # fmt: skip
    """z-boundaries at information fractions ``t`` for total level ``alpha`` under an error-spending function.

    ``sides=1``: one-sided level alpha via ``spend(t, alpha)``; ``sides=2``: symmetric, ``spend(t, alpha/2)`` per
    side. Oracles O4: LD-OBF, 5 equal looks, two-sided 0.05 -> 4.877, 3.357, 2.680, 2.290, 2.031.
    """
    tt = _fractions(t)
    if sides not in (1, 2) or not (0 < alpha < 1):
        raise StatsInputError(f"sides = {sides!r} (1 or 2), alpha = {alpha!r} (in (0, 1))")
    spend = SPENDING[spending]
    a_side = alpha / 2 if sides == 2 else alpha
    inc = np.diff(np.concatenate([[0.0], spend(tt, a_side)])) * (2 if sides == 2 else 1)
    rec, out = _Recursion(n_grid), []
    for k, tk in enumerate(tt):
        if inc[k] <= 0:
            b = math.inf  # nothing left to spend at this look
        else:
            b = float(optimize.brentq(lambda c, tk=tk, k=k: rec.cross_prob(c, tk, sides) - inc[k], 0.0, 40.0,
                                      xtol=1e-10))  # fmt: skip
        out.append(b)
        rec.advance(min(b, 40.0), tk, sides)
    return np.array(out)


def gs_total_crossing(bounds: ArrayLike, t: ArrayLike, *, sides: int = 2, n_grid: int = 401) -> float:
    """P_H0(the z-statistic crosses ``bounds`` at some look); e.g. repeated 1.96 tests (Armitage et al. 1969)."""
    tt, bb = _fractions(t), np.asarray(bounds, float)
    rec, total = _Recursion(n_grid), 0.0
    for b, tk in zip(bb, tt, strict=True):
        total += rec.cross_prob(float(b), float(tk), sides)
        rec.advance(float(b), float(tk), sides)
    return total


def gs_bounds_classical(k_looks: int, *, alpha: float, sides: int = 2, kind: Literal["obf", "pocock"] = "obf",
                        n_grid: int = 401) -> tuple[float, np.ndarray]:  # fmt: skip
    """Classical equally spaced boundaries: O'Brien–Fleming ``C_B √(K/k)`` or Pocock constant ``C_P``."""
    if k_looks < 1:
        raise StatsInputError(f"k_looks = {k_looks!r}: need >= 1")
    t = np.arange(1, k_looks + 1) / k_looks
    shape = 1 / np.sqrt(t) if kind == "obf" else np.ones(k_looks)
    c = float(optimize.brentq(lambda c: gs_total_crossing(c * shape, t, sides=sides, n_grid=n_grid) - alpha,
                              1.0, 6.0, xtol=1e-10))  # fmt: skip
    return c, c * shape


def information_fraction(var_now: float, var_at_horizon: float) -> float:
    """Variance-based information fraction ``V_h / V_now``, capped at 1 (then all remaining alpha is spent)."""
    if not (var_now > 0 and var_at_horizon > 0):
        raise StatsInputError("information_fraction: variances must be > 0")
    return min(1.0, var_at_horizon / var_now)
