"""Sample-ratio mismatch (SRM): are units split between the arms as designed? (CANARY.md §4.1–§4.2)

H0: each randomisation unit lands in arm a with the design share theta0_a; H1: the shares differ.

* ``srm_chisq``: Pearson's chi-square on unit counts, df = arms − 1 — valid for ONE look (an audit).
* ``srm_log_bf`` / ``srm_sequential``: the Dirichlet-multinomial Bayes factor of Lindon & Malek (2022) with prior
  Dirichlet(k theta0), ``BF_n = [B(k theta0 + x_n) / B(k theta0)] / prod_a theta0_a^{x_{n,a}}``; it is a
  nonnegative martingale under H0, so ``p_n = min(1, min_{s<=n} 1/BF_s)`` is an anytime-valid p-value and
  "flag when BF >= 1/alpha" keeps P(false flag, ever) <= alpha under continuous monitoring.

* ``units_for_power``: how many assigned units the sequential test needs to flag a given mismatch (e.g. 0.09 vs a
  design share of 0.10) with a given power; the monitor holds PROMOTE until that many units are in, so a canary
  never promotes before its SRM check could have caught a broken split (issue #37: 2 of 40 canaries promoted
  before a 0.09 vs 0.10 mismatch was flagged).

Covered: fixed design shares (one test per ramp phase). Not covered: shares that change over time (run one test
per phase) and segment-level SRM.

References: Lindon M, Malek A. Anytime-valid inference for multinomial count data. NeurIPS 2022 (savvi
``Multinomial``); Fabijan A et al. Diagnosing sample ratio mismatch in online controlled experiments. KDD 2019.
"""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=64)
def units_for_power(share: float, detect_share: float, *, alpha: float, k: float, power: float, n_max: int,
                    paths: int = 400, seed: int = 0) -> int | None:  # fmt: skip
    """Assigned units (both arms) by which the sequential test flags a true canary share of ``detect_share`` (the
    design share being ``share``) with probability ``power``; None when that takes more than ``n_max`` units.

    Monte Carlo of the test itself (``paths`` binomial arrival paths from ``seed``, the test evaluated on a grid of
    1,000 unit counts up to ``n_max``), so it is exact up to simulation and grid error; looks sparser than the grid
    flag later, so treat the figure as a lower bound. Deterministic for its arguments (cached)."""
    if not (0.0 < detect_share < 1.0) or detect_share == share:
        raise StatsInputError(f"detect_share = {detect_share!r}: must lie in (0, 1) and differ from the design share")
    rng = np.random.default_rng(seed)
    grid = np.unique(np.linspace(max(n_max // 1000, 1), n_max, 1000).astype(int))
    steps = np.diff(np.concatenate([[0], grid]))
    c = np.cumsum(rng.binomial(steps, detect_share, (paths, grid.size)), axis=1).astype(float)
    n = grid.astype(float)[None, :]
    a1, a2 = k * share, k * (1.0 - share)
    log_bf = (special.gammaln(a1 + c) + special.gammaln(a2 + n - c) - special.gammaln(k + n)
              - special.gammaln(a1) - special.gammaln(a2) + special.gammaln(k)
              - c * math.log(share) - (n - c) * math.log(1.0 - share))  # fmt: skip
    hit = log_bf >= -math.log(alpha)
    first = np.where(hit.any(axis=1), grid[np.argmax(hit, axis=1)], np.iinfo(np.int64).max)
    need = float(np.quantile(first, power, method="higher"))
    return int(need) if need <= n_max else None
