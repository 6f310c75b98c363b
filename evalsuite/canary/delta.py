"""Ratio metrics over randomisation units and their delta-method variances (CANARY.md §3.2).

For arm a with n units and per-unit sums (Y_i, N_i), ``R_a = sum Y / sum N`` and

    Var(R_a) ≈ [s_YY − 2 R s_YN + R² s_NN] / (n · N̄²)  =  var(u_i)/n,   u_i = (Y_i − R N_i)/N̄   (oracle O6)

with unit-level sample (co)variances (ddof = 1). The effect is ``R_T − R_C`` (scale ``diff``, V = Var_T + Var_C)
or ``ln(R_T/R_C)`` (scale ``logratio``, V = Var_T/R_T² + Var_C/R_C²). Because every variance is computed from
per-unit aggregates, episodes clustered within a unit are handled: an episode-level binomial variance would
understate the truth by the design effect 1 + (m̄ − 1)·ICC.

Covered: two-sample estimates from unit aggregates. Not covered: AIPW pseudo-outcomes for a share that changes
over time (CANARY §3.5 iii; restart the monitor per ramp phase instead) and CUPED regression adjustment.

References: Deng A, Knoblich U, Lu J. Applying the Delta method in metric analytics: a practical guide with novel
ideas. KDD 2018. Kohavi R, Tang D, Xu Y. Trustworthy Online Controlled Experiments, CUP 2020, ch. 18.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from evalsuite.rates import StatsInputError

Scale = Literal["diff", "logratio"]


@dataclass(frozen=True)
class RatioEstimate:
    """R = sum(Y)/sum(N) over ``n`` units and its delta-method variance (0 when every unit has the same ratio)."""

    ratio: float
    var: float
    n_units: int
    total_num: float
    total_den: float


@dataclass(frozen=True)
class Estimate:
    """A canary − control effect on ``scale`` with its plug-in variance (raw, not oriented by direction)."""

    delta: float
    var: float
    scale: Scale
    treatment: RatioEstimate
    control: RatioEstimate


def ratio_and_var(num: ArrayLike, den: ArrayLike) -> RatioEstimate:
    """Delta-method ratio estimate from per-unit numerators ``num`` and denominators ``den`` (>= 2 units)."""
    y, m = np.asarray(num, float), np.asarray(den, float)
    if y.shape != m.shape or y.ndim != 1:
        raise StatsInputError(f"num/den: need two 1-d arrays of equal length, got shapes {y.shape} and {m.shape}")
    n = y.size
    if n < 2:
        raise StatsInputError(f"ratio_and_var: need at least 2 units, got {n}")
    if np.any(~np.isfinite(y)) or np.any(~np.isfinite(m)) or np.any(m < 0):
        raise StatsInputError("ratio_and_var: num and den must be finite and den >= 0")
    m_bar = float(m.mean())
    if m_bar <= 0:
        raise StatsInputError("ratio_and_var: every denominator is 0 (no unit had an eligible episode)")
    r = float(y.sum() / m.sum())
    c = np.cov(np.vstack([y, m]), ddof=1)
    var = float((c[0, 0] - 2.0 * r * c[0, 1] + r * r * c[1, 1]) / (n * m_bar * m_bar))
    return RatioEstimate(ratio=r, var=max(var, 0.0), n_units=n, total_num=float(y.sum()), total_den=float(m.sum()))


def with_variance_floor(est: RatioEstimate, *, kind: Literal["binary", "count"]) -> tuple[RatioEstimate, bool]:
    """Raise the delta-method variance to the variance of independent episodes at a regularised rate, if larger.

    ``binary`` (at most one event per denominator item): r̃(1 − r̃)/ΣN with r̃ = (ΣY + ½)/(ΣN + 1); ``count``
    (Poisson-like): r̃/ΣN with r̃ = (ΣY + ½)/ΣN. The unit-level variance is 0 when every unit has the same ratio
    (e.g. a broken model that never completes a task), which would make the plug-in CS undefined exactly when the
    evidence is strongest; the floor keeps it positive. Taking the larger variance only widens bounds, so it never
    makes a test anti-conservative. Returns the estimate and whether the floor was used.
    """
    if est.total_den <= 0:
        return est, False
    if kind == "binary":
        r = (est.total_num + 0.5) / (est.total_den + 1.0)
        floor = r * (1.0 - r) / est.total_den
    else:
        floor = (est.total_num + 0.5) / est.total_den / est.total_den
    if est.var >= floor:
        return est, False
    return RatioEstimate(est.ratio, floor, est.n_units, est.total_num, est.total_den), True


def effect(treatment: RatioEstimate, control: RatioEstimate, *, scale: Scale = "diff") -> Estimate:
    """The canary − control effect: ``R_T − R_C`` or ``ln(R_T / R_C)``, variances added (independent arms)."""
    if scale == "diff":
        return Estimate(treatment.ratio - control.ratio, treatment.var + control.var, scale, treatment, control)
    if scale == "logratio":
        if treatment.ratio <= 0 or control.ratio <= 0:
            raise StatsInputError("effect(scale='logratio'): both ratios must be > 0; use an absolute margin instead")
        var = treatment.var / treatment.ratio**2 + control.var / control.ratio**2
        return Estimate(math.log(treatment.ratio / control.ratio), var, scale, treatment, control)
    raise StatsInputError(f"scale = {scale!r}: 'diff' or 'logratio'")


def with_pooled_variance_floor(est: Estimate) -> tuple[Estimate, bool]:
    """Raise V to the pooled-unit-variance V, ``s²_pooled (1/n_T + 1/n_C)``, if larger; returns it and whether used.

    ``s²_a = n_a Var_a`` is arm a's per-unit (linearised) variance (relative, ``/R_a²``, on the log-ratio scale),
    pooled with weights ``n_a − 1``. Why: a small canary arm of a rare, clustered metric estimates its own variance
    badly — with a few events in a few units, or none (then only the episode-level floor above, which ignores
    clustering), its plug-in variance is far too small exactly when its ratio is low, and the plug-in CS then
    rolls back an A/A canary of a rare higher-is-better metric, or promotes at the non-inferiority boundary of a
    rare lower-is-better one, several times more often than its alpha (docs/CANARY.md, "rare metrics"). Under
    equal arms the pooled variance is consistent and rests mostly on the large control arm; otherwise taking the
    larger of the two only widens the bounds, so validity is kept either way.
    """
    t, c = est.treatment, est.control
    if est.scale == "logratio":
        s_t, s_c = t.var * t.n_units / t.ratio**2, c.var * c.n_units / c.ratio**2
    else:
        s_t, s_c = t.var * t.n_units, c.var * c.n_units
    pooled = ((t.n_units - 1) * s_t + (c.n_units - 1) * s_c) / (t.n_units + c.n_units - 2)
    v = pooled * (1.0 / t.n_units + 1.0 / c.n_units)
    if not v > est.var:
        return est, False
    return replace(est, var=v), True
