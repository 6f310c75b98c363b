"""Data-quality gates beyond SRM and crossover (CANARY.md §4.3 items 3 and 6), each ``ok | warn | block``.

* ``missingness`` (item 3, differential missingness): among units in the assignments log whose first exposure is
  at least ``grace`` hours old (grace = the shortest metric window), the share whose telemetry never arrived (no
  logged episode within ``grace`` hours of first exposure), per arm. The difference canary − control is bounded by
  the exact union CS (``exact.union_difference``, valid at every look, no burn-in) at ``alpha_srm``; ``warn`` when
  it excludes 0, ``block`` when it excludes 0 by more than ``block_points`` (1 point, as the design). Units enter in
  arrival order and their status is final when they enter, so the looks form one sequence. H0: equal missing
  shares; H1: they differ. A canary that crashes before logging shows up here even when its assignments do not
  (SRM). Without an assignments log every unit is defined by its first episode and nothing is measurable.
  Per-field missingness cannot occur: a row with a missing or malformed metric field is an error in ``logs``.
* ``pre_period`` (item 6, A/A balance): the pre-exposure completion ratio per unit (assignments' optional
  ``pre_period``; units with 0 pre-period episodes are left out of the comparison, in both arms alike), compared
  across arms with the same exact CS at ``alpha_srm``; ``warn`` when the CS excludes 0 (a broken randomiser, or
  assignment that depends on history). H0: equal pre-period means; H1: they differ. It never blocks.

A gate that blocks leads to ROLLBACK or HOLD (``on_srm``), so with both SRM and missingness blocking, P(false
ROLLBACK) <= alpha_rollback + 2 alpha_srm (union bound). Not covered: segment-level gates, filters after
assignment (CANARY §4.3 item 8), per-phase gates of a ramp.

References: Fabijan A, Gupchup J, Gupta S, et al. Diagnosing sample ratio mismatch in online controlled
experiments. KDD 2019; Kohavi R, Tang D, Xu Y. Trustworthy Online Controlled Experiments, CUP 2020, ch. 21
(A/A tests, data-quality guardrails); Waudby-Smith & Ramdas, JRSS-B 2024 (see ``evalsuite.canary.exact``).
"""

from __future__ import annotations

import numpy as np

from evalsuite.canary import exact
from evalsuite.canary.aggregate import EpisodeTable
from evalsuite.canary.schema import Gate, GateLevel


def _union_gate(name: str, x: np.ndarray, canary: np.ndarray, *, alpha: float, block_points: float | None,
                what: str) -> Gate:  # fmt: skip
    if not canary.any() or canary.all():
        return Gate(name=name, level="ok", detail=f"{what}: no unit in an arm yet")
    ub = exact.union_difference(x[canary], x[~canary], alpha=alpha)
    excludes = ub.lower > 0 or ub.upper < 0
    far = block_points is not None and (ub.lower > block_points or ub.upper < -block_points)
    level: GateLevel = "block" if far else "warn" if excludes else "ok"
    detail = (f"{what}: canary {x[canary].mean():.4f} ({int(canary.sum())} units) vs control "
              f"{x[~canary].mean():.4f} ({int((~canary).sum())}); exact CS of the difference "
              f"[{ub.lower:.4f}, {ub.upper:.4f}] at alpha {alpha:g}")  # fmt: skip
    return Gate(name=name, level=level, detail=detail)


def missingness_gate(table: EpisodeTable, *, as_of: float, grace_hours: float, alpha: float,
                     block_points: float = 0.01) -> Gate:  # fmt: skip
    """Differential missingness of telemetry between arms (see the module docstring)."""
    if table.unit_from_assignments is None:
        return Gate(name="missingness", level="ok", detail="no assignments log: missing telemetry is not measurable")
    first = np.full(len(table.unit_ids), np.inf)
    np.minimum.at(first, table.ep_unit, table.ep_hours)
    due = table.unit_from_assignments & (table.unit_start + grace_hours <= as_of)
    order = np.argsort(table.unit_start, kind="stable")
    order = order[due[order]]
    missing = (first[order] >= table.unit_start[order] + grace_hours).astype(float)
    return _union_gate("missingness", missing, table.unit_canary[order], alpha=alpha, block_points=block_points,
                       what=f"share of assigned units with no episode within {grace_hours:g} h")  # fmt: skip


def pre_period_gate(table: EpisodeTable, *, as_of: float, alpha: float) -> Gate:
    """Pre-period (A/A) balance of the completion ratio between arms (see the module docstring)."""
    if table.unit_pre is None:
        return Gate(name="pre_period", level="ok", detail="no pre-period metrics in the assignments log")
    order = np.argsort(table.unit_start, kind="stable")
    order = order[(table.unit_start[order] <= as_of) & ~np.isnan(table.unit_pre[order])]
    return _union_gate("pre_period", table.unit_pre[order], table.unit_canary[order], alpha=alpha, block_points=None,
                       what="pre-period completion ratio")  # fmt: skip
