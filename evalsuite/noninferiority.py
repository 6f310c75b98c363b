"""Non-inferiority tests and paired risk-difference intervals (STATS §2.2–§2.4): NOT the decision path.

The preregistered criteria are decided by ``evalsuite.primary`` with ``evalsuite.score_variance``; ``ni_test`` and
``ni_test_paired`` here are standalone tests that no decision calls. ``primary``, ``studies`` and ``probes`` use
this module's paired building blocks (``paired_table``, ``tango_z``, ``rd_ci_paired``, ``mcnemar_test``).

Covered: the independent-samples NI test of H0: Δ <= −δ vs H1: Δ > −δ by the Miettinen–Nurminen or
Farrington–Manning score (own implementation), Wald or Agresti–Caffo (statsmodels ``test_proportions_2indep``);
paired (same tasks, both models) CIs by Tango's score (= Nam 1997) and Newcombe's paired method 10; the paired
Tango NI test; McNemar's test (exact, mid-p, asymptotic). Not covered: clustered pairs (use
``variance.paired_clustered_diff``), exact unconditional NI tests.

References: Farrington & Manning, Stat Med 1990;9:1447–1454; Miettinen & Nurminen, Stat Med 1985;4:213–226;
Tango T, Stat Med 1998;17:891–908 and 1999;18:3511–3513; Nam J, Biometrics 1997;53:1422–1430; Newcombe RG, Stat
Med 1998;17:2635–2650; Fagerland, Lydersen & Laake, BMC Med Res Methodol 2013;13:91 (mid-p McNemar).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import test_proportions_2indep

from evalsuite.rates import StatsInputError, check_alpha, check_counts, check_one_sided_alpha, rd_ci, score_z, wilson_ci

NIMethod = Literal["mn", "fm", "wald", "agresti_caffo", "newcombe"]
PairedMethod = Literal["tango", "newcombe"]


@dataclass(frozen=True)
class NITestResult:
    """Result of a non-inferiority test at margin δ: H0: Δ <= −δ vs H1: Δ > −δ."""

    estimate: float
    statistic: float  # NaN for CI-only methods (newcombe)
    p_value: float  # one-sided; NaN for CI-only methods
    lower: float  # one-sided (1 − alpha) lower bound of Δ
    margin: float
    alpha: float
    passed: bool
    method: str


def _check_margin(margin: float) -> None:
    if not (isinstance(margin, (int, float)) and 0.0 <= float(margin) < 1.0 and math.isfinite(margin)):
        raise StatsInputError(f"margin must be in [0, 1) (e.g. 0.03 for 3 points), got {margin!r}")


def ni_test(
    x1: int, n1: int, x2: int, n2: int, *, margin: float, method: NIMethod = "mn", alpha: float = 0.025
) -> NITestResult:
    """Independent-samples NI test of arm 1 (treatment) against arm 2 (baseline) at margin δ = ``margin``.

    H0: p1 − p2 <= −δ; H1: p1 − p2 > −δ; one-sided level ``alpha``. ``mn``/``fm`` use the score z at Δ0 = −δ
    (with / without the N/(N−1) factor) and the matching inverted CI for ``lower``, so test and CI agree.
    """
    check_counts(x1, n1, "arm 1")
    check_counts(x2, n2, "arm 2")
    _check_margin(margin)
    check_one_sided_alpha(alpha)
    est = x1 / n1 - x2 / n2
    if method in ("mn", "fm"):
        z = score_z(int(x1), int(n1), int(x2), int(n2), -margin, correction=(method == "mn"))
        p = float(stats.norm.sf(z))
        lower = rd_ci(x1, n1, x2, n2, method="mn" if method == "mn" else "mee", alpha=2 * alpha)[0]
    elif method == "wald" and (x1 in (0, n1) and x2 in (0, n2)):
        # Wald's variance is 0 at 0/n and n/n: the test is undefined (never report z = inf, p = 0)
        z, p = math.nan, math.nan
        lower = rd_ci(x1, n1, x2, n2, method="wald", alpha=2 * alpha)[0]
    elif method in ("wald", "agresti_caffo"):
        with np.errstate(divide="ignore", invalid="ignore"):  # statsmodels also computes an unused odds ratio
            res = test_proportions_2indep(
                int(x1), int(n1), int(x2), int(n2), value=-margin, method=method.replace("_", "-"),
                compare="diff", alternative="larger",
            )  # fmt: skip
        z, p = float(res.statistic), float(res.pvalue)
        lower = rd_ci(x1, n1, x2, n2, method=method, alpha=2 * alpha)[0]
    elif method == "newcombe":
        z, p = math.nan, math.nan
        lower = rd_ci(x1, n1, x2, n2, method="newcombe", alpha=2 * alpha)[0]
    else:
        raise StatsInputError(f"ni_test: unknown method {method!r}; use mn, fm, wald, agresti_caffo or newcombe")
    passed = bool(p < alpha) if method != "newcombe" else (lower > -margin)  # NaN p never passes
    return NITestResult(est, z, p, float(lower), float(margin), float(alpha), bool(passed), method)


# --------------------------------------------------------------------------------------------------------------
# Paired
# --------------------------------------------------------------------------------------------------------------


def check_table(a: int, b: int, c: int, d: int) -> int:
    """Validate a paired 2×2 table (a both, b treatment only, c baseline only, d neither); return N."""
    for name, v in zip("abcd", (a, b, c, d), strict=True):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer, float, np.floating)):
            raise StatsInputError(f"paired table cell {name} must be a count, got {type(v).__name__} {v!r}")
        if not math.isfinite(float(v)) or float(v) != int(v) or v < 0:
            raise StatsInputError(f"paired table cell {name}={v!r} must be a non-negative whole number")
    n = int(a + b + c + d)
    if n < 1:
        raise StatsInputError("paired table is empty (a+b+c+d = 0)")
    return n


def tango_z(b: int, c: int, n: int, theta: float) -> float:
    """Tango (1998) score statistic for H0: Δ = θ in a paired 2×2 table (b, c discordant, n pairs)."""
    s = (b - c) - n * theta
    aa = 2.0 * n
    bb = -b - c + (2.0 * n - b + c) * theta
    cc = -c * theta * (1.0 - theta)
    q21 = (-bb + math.sqrt(max(bb * bb - 4.0 * aa * cc, 0.0))) / (2.0 * aa)
    var = n * (2.0 * q21 + theta * (1.0 - theta))
    if var <= 1e-300:
        return 0.0 if abs(s) < 1e-12 else math.copysign(math.inf, s)
    return s / math.sqrt(var)


def _tango_ci(b: int, c: int, n: int, alpha: float) -> tuple[float, float]:
    crit = stats.norm.ppf(1 - alpha / 2)
    est = (b - c) / n
    lo_e, hi_e = -1.0 + 1e-10, 1.0 - 1e-10
    if est <= lo_e or tango_z(b, c, n, lo_e) <= crit:
        lower = -1.0
    else:
        lower = optimize.brentq(lambda t: tango_z(b, c, n, t) - crit, lo_e, est, xtol=1e-12)
    if est >= hi_e or tango_z(b, c, n, hi_e) >= -crit:
        upper = 1.0
    else:
        upper = optimize.brentq(lambda t: tango_z(b, c, n, t) + crit, est, hi_e, xtol=1e-12)
    return float(lower), float(upper)


def _newcombe_paired_ci(a: int, b: int, c: int, d: int, alpha: float) -> tuple[float, float]:
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_ci(a + b, n, alpha=alpha)
    l2, u2 = wilson_ci(a + c, n, alpha=alpha)
    big_a = float((a + b) * (c + d) * (a + c) * (b + d))
    big_b = float(a * d - b * c)
    if big_b > n / 2:
        big_c = big_b - n / 2
    elif big_b < 0:
        big_c = big_b
    else:
        big_c = 0.0
    phi = big_c / math.sqrt(big_a) if big_a > 0 else 0.0
    est = p1 - p2
    lower = est - math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    upper = est + math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0.0))
    return max(lower, -1.0), min(upper, 1.0)


def rd_ci_paired(
    a: int, b: int, c: int, d: int, *, method: PairedMethod = "tango", alpha: float = 0.05
) -> tuple[float, float]:
    """Two-sided (1 − alpha) CI for the paired difference Δ = (b − c)/N.

    a = both succeed, b = treatment only, c = baseline only, d = neither. ``tango``: inverted Tango score test
    (H0: Δ = θ); ``newcombe``: Newcombe's paired method 10 (Wilson marginals with a correlation correction φ).
    Pairs are assumed independent (no clustering).
    """
    n = check_table(a, b, c, d)
    check_alpha(alpha)
    if method == "tango":
        return _tango_ci(int(b), int(c), n, alpha)
    if method == "newcombe":
        return _newcombe_paired_ci(int(a), int(b), int(c), int(d), alpha)
    raise StatsInputError(f"rd_ci_paired: unknown method {method!r}; use 'tango' or 'newcombe'")


def ni_test_paired(
    a: int, b: int, c: int, d: int, *, margin: float, alpha: float = 0.025
) -> NITestResult:
    """Paired NI test by Tango's score at θ = −δ: H0: Δ <= −δ vs H1: Δ > −δ (one-sided level ``alpha``)."""
    n = check_table(a, b, c, d)
    _check_margin(margin)
    check_one_sided_alpha(alpha)
    z = tango_z(int(b), int(c), n, -margin)
    p = float(stats.norm.sf(z))
    lower = _tango_ci(int(b), int(c), n, 2 * alpha)[0]
    return NITestResult((b - c) / n, z, p, lower, float(margin), float(alpha), bool(p < alpha), "tango")


def paired_table(y_t: np.ndarray, y_c: np.ndarray) -> tuple[int, int, int, int]:
    """(a, b, c, d) from two equal-length binary vectors (treatment, baseline) over the same tasks."""
    yt, yc = np.asarray(y_t), np.asarray(y_c)
    if yt.shape != yc.shape or yt.ndim != 1:
        raise StatsInputError(f"paired_table needs two 1-D vectors of equal length, got {yt.shape}, {yc.shape}")
    for name, v in (("treatment", yt), ("baseline", yc)):
        if v.dtype.kind not in "biuf" or not np.all(np.isin(v, (0, 1))):
            raise StatsInputError(f"paired_table: {name} outcomes must be 0/1 (or bool)")
    yt, yc = yt.astype(bool), yc.astype(bool)
    return int(np.sum(yt & yc)), int(np.sum(yt & ~yc)), int(np.sum(~yt & yc)), int(np.sum(~yt & ~yc))


def mcnemar_test(a: int, b: int, c: int, d: int, *, exact: bool = True, midp: bool = False) -> float:
    """Two-sided McNemar p-value for H0: P(b) = P(c) (equality only).

    ``exact``: 2·BinomCDF(min(b,c); b+c, ½) via statsmodels; ``midp``: 2·[F(min) − ½·f(min)] (Fagerland et al.
    2013); otherwise the continuity-corrected χ². Returns 1.0 when there are no discordant pairs.
    """
    check_table(a, b, c, d)
    b, c = int(b), int(c)
    if b + c == 0:
        return 1.0
    if midp:
        k = min(b, c)
        return float(min(1.0, 2 * (stats.binom.cdf(k, b + c, 0.5) - 0.5 * stats.binom.pmf(k, b + c, 0.5))))
    if not exact:  # Edwards' correction, max(|b − c| − 1, 0)²/(b + c): statsmodels gives 1/(b + c) at b = c, not 0
        return float(stats.chi2.sf(max(abs(b - c) - 1, 0) ** 2 / (b + c), 1))
    res = mcnemar(np.array([[a, b], [c, d]]), exact=True)
    return float(res.pvalue)
