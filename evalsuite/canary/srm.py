"""Sample-ratio mismatch (SRM): are units split between the arms as designed? (CANARY.md §4.1–§4.2)

H0: each randomisation unit lands in arm a with the design share theta0_a; H1: the shares differ.

* ``srm_chisq``: Pearson's chi-square on unit counts, df = arms − 1 — valid for ONE look (an audit).
* ``srm_log_bf`` / ``srm_sequential``: the Dirichlet-multinomial Bayes factor of Lindon & Malek (2022) with prior
  Dirichlet(k theta0), ``BF_n = [B(k theta0 + x_n) / B(k theta0)] / prod_a theta0_a^{x_{n,a}}``; it is a
  nonnegative martingale under H0, so ``p_n = min(1, min_{s<=n} 1/BF_s)`` is an anytime-valid p-value and
  "flag when BF >= 1/alpha" keeps P(false flag, ever) <= alpha under continuous monitoring.

Covered: fixed design shares (one test per ramp phase). Not covered: shares that change over time (run one test
per phase) and segment-level SRM.

References: Lindon M, Malek A. Anytime-valid inference for multinomial count data. NeurIPS 2022 (savvi
``Multinomial``); Fabijan A et al. Diagnosing sample ratio mismatch in online controlled experiments. KDD 2019.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import special, stats

from evalsuite.rates import StatsInputError


@dataclass(frozen=True)
class SequentialSRM:
    """The sequential SRM test after the looks so far."""

    log_bf: float  # at the latest look
    p_anytime: float  # min(1, min over looks of 1/BF)
    flagged: bool  # p_anytime <= alpha


def _check(counts: ArrayLike, shares: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x, th = np.asarray(counts, float), np.asarray(shares, float)
    if x.shape != th.shape or x.ndim != 1 or x.size < 2:
        raise StatsInputError(f"counts/shares: need two 1-d arrays of the same length >= 2, got {x.shape}, {th.shape}")
    if np.any(x < 0) or np.any(th <= 0):
        raise StatsInputError("counts must be >= 0 and shares > 0")
    return x, th / th.sum()


def srm_chisq(counts: ArrayLike, shares: ArrayLike) -> tuple[float, float]:
    """Pearson chi-square statistic and p-value (single look). Oracle: 600 vs 400 at 50/50 -> p = 2.54e-10."""
    x, th = _check(counts, shares)
    expected = x.sum() * th
    chi2 = float(np.sum((x - expected) ** 2 / expected))
    return chi2, float(stats.chi2.sf(chi2, x.size - 1))


def srm_log_bf(counts: ArrayLike, shares: ArrayLike, *, k: float = 100.0) -> float:
    """log Dirichlet-multinomial Bayes factor against ``shares`` (prior concentration ``k``)."""
    x, th = _check(counts, shares)
    if not k > 0:
        raise StatsInputError(f"k = {k!r}: the prior concentration must be > 0")
    a0 = k * th

    def log_beta(a: np.ndarray) -> float:
        return float(np.sum(special.gammaln(a)) - special.gammaln(np.sum(a)))

    return log_beta(a0 + x) - log_beta(a0) - float(np.sum(x * np.log(th)))


def srm_sequential(counts_history: Sequence[ArrayLike], shares: ArrayLike, *, alpha: float, k: float = 100.0
                   ) -> SequentialSRM:  # fmt: skip
    """Anytime-valid SRM over cumulative unit counts at each look so far (oldest first)."""
    if not counts_history:
        raise StatsInputError("counts_history: need at least one look")
    if not (0.0 < alpha < 1.0):
        raise StatsInputError(f"alpha = {alpha!r}: must lie in (0, 1), e.g. 0.001")
    logs = [srm_log_bf(c, shares, k=k) for c in counts_history]
    p = min(1.0, math.exp(-max(logs)))
    return SequentialSRM(log_bf=logs[-1], p_anytime=p, flagged=p <= alpha)
