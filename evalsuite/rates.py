"""Rates and independent risk-difference intervals (STATS §1 M1–M2, §2.2).

Covered: Wilson CIs for one rate; Miller's CLT and repository-clustered standard errors; two-sided CIs for
Δ = p1 − p2 of two *independent* binomials by Newcombe's hybrid score (method 10), Miettinen–Nurminen (MN),
Mee (inverted Farrington–Manning), Wald and Agresti–Caffo. Not covered: exact unconditional intervals, continuity
corrections, clustered or paired data (see ``noninferiority.py`` and ``variance.py``).

MN and Mee are implemented here because statsmodels' score method for differences uses a wrong coefficient in
the restricted-MLE cubic when the null value is not 0 (statsmodels#10269, open PR #10270; STATS §0.1).

References: Wilson EB, JASA 1927; Newcombe RG, Stat Med 1998;17:873–890; Miettinen O, Nurminen M, Stat Med
1985;4:213–226; Farrington CP, Manning G, Stat Med 1990;9:1447–1454; Mee RW, Biometrics 1984;40:1175–1176;
Agresti A, Caffo B, Am Stat 2000;54:280–288; Miller E, arXiv:2411.00640 (2024).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

RDMethod = Literal["newcombe", "mn", "mee", "wald", "agresti_caffo"]
_EPS = 1e-12


class StatsInputError(ValueError):
    """Bad input to a statistics function; the message names the argument and the fix."""


def check_counts(x: float, n: float, name: str) -> None:
    """Raise :class:`StatsInputError` unless 0 <= x <= n, n >= 1, both finite integers."""
    for val, label in ((x, f"{name} successes"), (n, f"{name} trials")):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer, float, np.floating)):
            raise StatsInputError(f"{label} must be a number, got {type(val).__name__} {val!r}")
        if not math.isfinite(float(val)) or float(val) != int(val):
            raise StatsInputError(f"{label} must be a finite whole number, got {val!r}")
    if n < 1:
        raise StatsInputError(f"{name}: trials n={n} must be >= 1 (an empty arm has no rate)")
    if not 0 <= x <= n:
        raise StatsInputError(f"{name}: successes x={x} must be between 0 and n={n}")


def wilson_ci(k: int, n: int, *, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided Wilson score CI for one binomial proportion (statsmodels ``proportion_confint``)."""
    check_counts(k, n, "wilson_ci")
    check_alpha(alpha)
    lo, hi = proportion_confint(int(k), int(n), alpha=alpha, method="wilson")
    return float(lo), float(hi)


def se_clt(s: np.ndarray) -> float:
    """Miller (M1): sqrt(Var(s)/n) with the ddof=1 sample variance."""
    s = _as_float_vector(s, "s")
    if s.size < 2:
        raise StatsInputError(f"se_clt needs at least 2 scores, got {s.size}")
    return float(np.sqrt(np.var(s, ddof=1) / s.size))


def se_clustered(s: np.ndarray, clusters: np.ndarray, *, small_sample: bool = True) -> float:
    """Miller (M2) sandwich form sqrt((1/n²) Σ_c (Σ_{i∈c}(s_i − s̄))²), times C/(C−1) if ``small_sample``.

    The C/(C−1) factor is Inspect AI's finite-cluster correction; Miller's paper omits it.
    """
    s = _as_float_vector(s, "s")
    clusters = np.asarray(clusters)
    if clusters.shape != s.shape:
        raise StatsInputError(f"clusters has shape {clusters.shape}, scores {s.shape}: give one label per score")
    _, inv = np.unique(clusters, return_inverse=True)
    n_clusters = int(inv.max()) + 1 if inv.size else 0
    if n_clusters < 2:
        raise StatsInputError("se_clustered needs at least 2 clusters (repositories)")
    sums = np.bincount(inv, weights=s - s.mean(), minlength=n_clusters)
    var = float(np.sum(sums**2)) / s.size**2
    if small_sample:
        var *= n_clusters / (n_clusters - 1)
    return math.sqrt(var)


def _as_float_vector(s: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(s)
    if arr.dtype.kind not in "biuf":
        raise StatsInputError(f"{name} must be numeric (bool/int/float), got dtype {arr.dtype}")
    arr = arr.astype(float).ravel()
    if not np.all(np.isfinite(arr)):
        raise StatsInputError(f"{name} contains NaN or inf at positions {np.flatnonzero(~np.isfinite(arr))[:5]}")
    return arr


# --------------------------------------------------------------------------------------------------------------
# Score statistics with the restricted MLE (Farrington–Manning / Miettinen–Nurminen)
# --------------------------------------------------------------------------------------------------------------


def restricted_mle(x1: float, n1: float, x2: float, n2: float, delta0: float) -> tuple[float, float]:
    """MLE of (p1, p2) under p1 − p2 = delta0 (closed-form cubic root; Farrington & Manning 1990).

    Only the rates x/n and the ratio n2/n1 enter, so non-integer (effective) counts are allowed."""
    p1, p2 = x1 / n1, x2 / n2
    theta = n2 / n1
    a = 1.0 + theta
    b = -(1.0 + theta + p1 + theta * p2 + delta0 * (theta + 2.0))
    c = delta0**2 + delta0 * (2.0 * p1 + theta + 1.0) + p1 + theta * p2
    d = -p1 * delta0 * (1.0 + delta0)
    v = b**3 / (27.0 * a**3) - b * c / (6.0 * a**2) + d / (2.0 * a)
    radicand = max(b**2 / (9.0 * a**2) - c / (3.0 * a), 0.0)
    u = math.copysign(math.sqrt(radicand), v) if v != 0 else math.sqrt(radicand)
    if abs(u) < _EPS:
        pt1 = -b / (3.0 * a)
    else:
        w = (math.pi + math.acos(min(1.0, max(-1.0, v / u**3)))) / 3.0
        pt1 = 2.0 * u * math.cos(w) - b / (3.0 * a)
    pt1 = min(1.0, max(0.0, pt1))
    pt2 = min(1.0, max(0.0, pt1 - delta0))
    return pt1, pt2


def score_z(x1: int, n1: int, x2: int, n2: int, delta0: float, *, correction: bool) -> float:
    """Score z(Δ0) = (Δ̂ − Δ0)/sqrt(p̃1q̃1/n1 + p̃2q̃2/n2) [× (N−1)/N inside the root when ``correction`` (MN)].

    Returns ±inf when the restricted variance is 0 and Δ̂ ≠ Δ0, and 0 when Δ̂ = Δ0.
    """
    diff = x1 / n1 - x2 / n2 - delta0
    pt1, pt2 = restricted_mle(x1, n1, x2, n2, delta0)
    var = pt1 * (1 - pt1) / n1 + pt2 * (1 - pt2) / n2
    if correction:
        big_n = n1 + n2
        var *= big_n / (big_n - 1.0)
    if var <= _EPS**2:
        if abs(diff) <= 1e-15:
            return 0.0
        return math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def _score_ci(x1: int, n1: int, x2: int, n2: int, alpha: float, correction: bool) -> tuple[float, float]:
    crit = stats.norm.ppf(1.0 - alpha / 2.0)
    est = x1 / n1 - x2 / n2

    def f(d0: float, target: float) -> float:
        return score_z(x1, n1, x2, n2, d0, correction=correction) - target

    lo_edge, hi_edge = -1.0 + 1e-10, 1.0 - 1e-10
    if est <= lo_edge or f(lo_edge, crit) <= 0:
        lower = -1.0
    else:
        lower = optimize.brentq(f, lo_edge, est, args=(crit,), xtol=1e-12)
    if est >= hi_edge or f(hi_edge, -crit) >= 0:
        upper = 1.0
    else:
        upper = optimize.brentq(f, est, hi_edge, args=(-crit,), xtol=1e-12)
    return float(lower), float(upper)


def rd_ci(
    x1: int, n1: int, x2: int, n2: int, *, method: RDMethod = "newcombe", alpha: float = 0.05
) -> tuple[float, float]:
    """Two-sided (1 − alpha) CI for Δ = x1/n1 − x2/n2 of two independent binomials.

    Methods: ``newcombe`` (hybrid score, method 10; statsmodels ``newcomb``), ``mn`` (Miettinen–Nurminen, own),
    ``mee`` (inverted Farrington–Manning, own), ``wald`` and ``agresti_caffo`` (statsmodels). For a one-sided
    (1 − a) lower bound use alpha = 2a.

    H0/H1: the interval inverts the family of tests H0: Δ = Δ0 vs H1: Δ ≠ Δ0.
    References: module docstring.
    """
    check_counts(x1, n1, "arm 1")
    check_counts(x2, n2, "arm 2")
    check_alpha(alpha)
    x1, n1, x2, n2 = int(x1), int(n1), int(x2), int(n2)
    if method in ("mn", "mee"):
        return _score_ci(x1, n1, x2, n2, alpha, correction=(method == "mn"))
    sm_method = {"newcombe": "newcomb", "wald": "wald", "agresti_caffo": "agresti-caffo"}.get(method)
    if sm_method is None:
        raise StatsInputError(f"rd_ci: unknown method {method!r}; use one of newcombe, mn, mee, wald, agresti_caffo")
    lo, hi = confint_proportions_2indep(x1, n1, x2, n2, method=sm_method, compare="diff", alpha=alpha)
    return float(max(lo, -1.0)), float(min(hi, 1.0))


def check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, (int, float)) and 0.0 < float(alpha) < 1.0):
        raise StatsInputError(f"alpha must be in (0, 1), got {alpha!r}")


def check_one_sided_alpha(alpha: float) -> None:
    """A one-sided level in (0, 0.5): its bound is a two-sided (1 − 2·alpha) limit (the plan schema's range too)."""
    check_alpha(alpha)
    if not float(alpha) < 0.5:
        raise StatsInputError(f"one-sided alpha must be in (0, 0.5) (e.g. 0.025), got {alpha!r}")
