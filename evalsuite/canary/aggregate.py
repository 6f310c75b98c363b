"""From validated episode rows to per-unit aggregates at a look (CANARY.md §3.1, §3.4).

Every variance downstream is computed from per-unit sums (Y_i, N_i), never from episodes, because episodes of one
unit are correlated. Metrics are **cohort (fixed-window)** metrics: a unit enters a metric's analysis only when its
window [first exposure, first exposure + W) has closed at the look, and only episodes inside that window count, so a
unit's value is final when it enters and units form an i.i.d. stream (the condition the confidence sequences need).
First exposure is the unit's assignment time (assignments log) or its first episode. Per-episode numerators are
winsorised at the metric's ``cap`` when one is set. Units assigned but without any episode in their window count
with (0, 0) (intention to treat; they matter for the SRM test and ratio denominators, not for the ratio itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from evalsuite.canary.schema import CanaryAssignment, CanaryEpisode
from protocols.canary_schema import CanaryMetric, CanaryPlan

COLUMNS = ("task_completed", "code_produced", "code_ran", "n_edits", "rework", "feedback_up", "feedback_down",
           "tool_calls", "tool_errors", "hallucination_reports", "episodes")  # fmt: skip


@dataclass(frozen=True)
class EpisodeTable:
    """Columnar view of the log; times are hours since ``start`` (the earliest assignment or episode)."""

    start: datetime
    unit_ids: tuple[str, ...]
    unit_canary: np.ndarray  # bool per unit
    unit_start: np.ndarray  # first exposure (hours) per unit
    ep_unit: np.ndarray  # unit index per episode
    ep_hours: np.ndarray  # episode start (hours)
    ep_crossover: np.ndarray  # bool per episode: served_model known and not the assigned arm's model
    columns: dict[str, np.ndarray]  # per-episode values, float
    watermark: float  # the latest episode (hours): no look may be later
    unit_from_assignments: np.ndarray | None = None  # bool per unit: in the assignments log (None: no such log)
    unit_pre: np.ndarray | None = None  # pre-period completion ratio per unit (NaN: 0 pre-period episodes)


def _values(e: CanaryEpisode) -> tuple[float, ...]:
    return (float(e.task_completed), float(e.code_produced), float(bool(e.code_ran)), float(e.n_edits),
            float(e.rework), float(e.feedback == "up"), float(e.feedback == "down"), float(e.tool_calls),
            float(e.tool_errors), float(e.hallucination_reports), 1.0)  # fmt: skip


def build_table(episodes: Sequence[CanaryEpisode], plan: CanaryPlan,
                assignments: Sequence[CanaryAssignment] | None = None) -> EpisodeTable:  # fmt: skip
    """Index units and episodes once; every look slices this table."""
    first: dict[str, tuple[datetime, bool]] = {}
    pre: dict[str, float] = {}
    if assignments:
        for a in assignments:
            first[a.unit_id] = (a.assign_ts, a.arm == "canary")
            if a.pre_period is not None:
                n = a.pre_period.episodes
                pre[a.unit_id] = a.pre_period.task_completed / n if n else float("nan")
    for e in sorted(episodes, key=lambda r: r.ts):
        first.setdefault(e.unit_id, (e.ts, e.arm == "canary"))
    unit_ids = tuple(first)
    logged = {a.unit_id for a in assignments or ()}
    index = {u: i for i, u in enumerate(unit_ids)}
    start = min(t for t, _ in first.values()).astimezone(UTC)  # looks are reported as UTC ("...Z")
    hours = np.array([(first[u][0] - start).total_seconds() / 3600.0 for u in unit_ids])
    model = {"control": plan.control_model, "canary": plan.canary_model}
    vals = np.array([_values(e) for e in episodes], dtype=float).reshape(len(episodes), len(COLUMNS))
    ep_hours = np.array([(e.ts - start).total_seconds() / 3600.0 for e in episodes])
    return EpisodeTable(
        start=start, unit_ids=unit_ids, unit_canary=np.array([first[u][1] for u in unit_ids], dtype=bool),
        unit_start=hours, ep_unit=np.array([index[e.unit_id] for e in episodes], dtype=int), ep_hours=ep_hours,
        ep_crossover=np.array([e.served_model is not None and e.served_model != model[e.arm] for e in episodes]),
        columns={c: vals[:, j] for j, c in enumerate(COLUMNS)}, watermark=float(ep_hours.max()),
        unit_from_assignments=None if not assignments else np.array([u in logged for u in unit_ids], dtype=bool),
        unit_pre=np.array([pre.get(u, np.nan) for u in unit_ids]) if pre else None,
    )  # fmt: skip


@dataclass(frozen=True)
class UnitAggregates:
    """Per matured unit: numerator and denominator sums, the arm, and the first exposure (hours; arrival order)."""

    num: np.ndarray
    den: np.ndarray
    canary: np.ndarray
    start: np.ndarray | None = None


def unit_aggregates(table: EpisodeTable, metric: CanaryMetric, *, as_of: float) -> UnitAggregates:
    """Per-unit sums of the metric over each matured unit's window (``as_of`` in hours since ``table.start``)."""
    w = metric.window_hours
    matured = table.unit_start + w <= as_of
    u_start = table.unit_start[table.ep_unit]
    inside = (table.ep_hours >= u_start) & (table.ep_hours < u_start + w) & matured[table.ep_unit]
    num = table.columns[metric.numerator]
    if metric.cap is not None:
        num = np.minimum(num, metric.cap)
    den = table.columns[metric.denominator]
    n_units = len(table.unit_ids)
    ys = np.bincount(table.ep_unit[inside], weights=num[inside], minlength=n_units)
    ns = np.bincount(table.ep_unit[inside], weights=den[inside], minlength=n_units)
    return UnitAggregates(num=ys[matured], den=ns[matured], canary=table.unit_canary[matured],
                          start=table.unit_start[matured])  # fmt: skip


def assigned_units(table: EpisodeTable, *, as_of: float) -> tuple[int, int]:
    """(canary, control) units whose first exposure is at or before ``as_of``."""
    seen = table.unit_start <= as_of
    return int(np.sum(seen & table.unit_canary)), int(np.sum(seen & ~table.unit_canary))


def crossover_share(table: EpisodeTable, *, as_of: float) -> tuple[float, int]:
    """Share of units seen so far that were served the other arm's model at least once, and their count."""
    seen_eps = table.ep_hours <= as_of
    units_seen = np.unique(table.ep_unit[seen_eps])
    if units_seen.size == 0:
        return 0.0, 0
    crossed = np.unique(table.ep_unit[seen_eps & table.ep_crossover])
    return crossed.size / units_seen.size, int(crossed.size)
