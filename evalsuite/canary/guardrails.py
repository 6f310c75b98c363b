"""One metric at one look: oriented effect, always-valid harm and non-inferiority bounds, status (CANARY.md §2.1).

Work on the oriented effect theta = sign · (canary − control) (larger is better; sign from the plan's direction):

| claim        | H0              | H1             | decided when                                   | role            |
|--------------|-----------------|----------------|------------------------------------------------|-----------------|
| harm         | theta >= 0      | theta < 0      | U < 0 (U at alpha_rollback / #harm tests)      | ROLLBACK        |
| inferior     | theta >= −delta | theta < −delta | U < −delta                                     | ROLLBACK (soft) |
| non-inferior | theta <= −delta | theta > −delta | L > −delta (L at alpha_promote, no adjustment) | PROMOTE needs   |
| superior     | theta <= 0      | theta > 0      | L > 0                                          | optional        |

U and L are one-sided anytime-valid mixture bounds (``mixture.one_sided_halfwidth``), carried across looks as a
running min / max (the running intersection of a confidence sequence is still one). With ``method = "gst"`` the
NI bound is instead the repeated confidence bound theta_hat − c_k sqrt(V) of a one-sided Lan–DeMets
O'Brien–Fleming design at variance-based information fractions (Jennison & Turnbull 2000, ch. 9); harm stays
anytime-valid (the hybrid of CANARY §5.6). Each bound's mixing scale tau^2 is fixed by the plan before any data
(``tau2_for_horizon`` at the anticipated horizon variance).

Covered: difference and log-ratio scales, burn-in and degenerate-variance statuses, a variance floor
(``delta.with_variance_floor``) when every unit of an arm has the same ratio, the pooled unit variance when it is
larger (``delta.with_pooled_variance_floor``: a small canary arm of a rare metric), and the exact harm fast path
(``fast_path = "exact_union"``, CANARY §1.4 a3 and §5.4–5.6): a PrPl-EB union CS (``exact.union_difference``) on the
per-unit ratios Y_i/N_i of matured units with N_i > 0 in arrival order, at half the metric's rollback alpha (the
mixture bound gets the other half, so the metric's harm test stays at its Bonferroni share), from the first matured
unit on; during burn-in it alone can show harm. Its estimand is the unweighted mean of per-unit ratios, not
sum Y / sum N: both are 0 when the arms are identical (the false-ROLLBACK guarantee), they can differ otherwise.
Rare guardrails: a metric with an absolute margin, its matured units, and fewer than ``min_events`` events (an A/A
canary whose guardrail never fires) is decided by the exact union CS at ``alpha_promote / 2``
(``few_events_lower``) instead of staying in burn-in forever; once it has ``min_events`` the mixture bound decides.
A metric can thus use both bounds over a canary: its false-PROMOTE probability is at most 1.5 · alpha_promote in
the worst case (alpha_promote / 2 when it never reaches ``min_events``). A relative margin with no events cannot
be evaluated (a ratio of 0 has no log); the look's note says PROMOTE is unreachable then.
Not covered: the AIPW CS (a2) in the monitor (its ``c = 2/min(pi, 1-pi)`` makes a 10 % canary's CS very wide).

References: Berger RL. Multiparameter hypothesis testing and acceptance sampling. Technometrics 24:295-300, 1982;
Schultzberg M, Ankargren S, Frånberg M. Risk-aware product decisions in A/B tests with multiple metrics,
arXiv:2402.11609, 2024; Howard et al. 2021 and Johari et al. 2022 (see ``evalsuite.canary.mixture``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from evalsuite.canary import exact, gsd, mixture
from evalsuite.canary.aggregate import UnitAggregates
from evalsuite.canary.delta import Estimate, effect, ratio_and_var, with_pooled_variance_floor, with_variance_floor
from evalsuite.canary.schema import MetricLook, MetricStatus
from protocols.canary_schema import CanaryMetric, CanaryPlan


@dataclass(frozen=True)
class MetricDesign:
    """Everything fixed by the plan before the first look, for one metric."""

    metric: CanaryMetric
    scale: str
    bar: float | None  # −margin on the oriented scale
    var_horizon: float
    alpha_harm: float | None  # None: no harm test (rollback_on = never)
    tau2_harm: float
    tau2_ni: float
    alpha_fast: float | None = None  # share of alpha_harm spent on the exact fast path (None: no fast path)


@dataclass(frozen=True)
class MetricState:
    """What a metric carries from look to look (running intersection, running max log-likelihood ratios)."""

    lower: float = -math.inf
    upper: float = math.inf
    llr_harm: float = -math.inf
    llr_ni: float = -math.inf
    gst_fractions: tuple[float, ...] = ()
    fast_upper: float = math.inf
    few_events_lower: float = -math.inf  # running max of the exact NI bound used while events < min_events


def alpha_allocation(plan: CanaryPlan) -> dict[str, float]:
    """Bonferroni split of alpha_rollback over the harm tests (a union: ROLLBACK if ANY metric shows harm)."""
    harm = [m.name for m in plan.metrics if m.rollback_on != "never"]
    return {name: plan.alpha_rollback / len(harm) for name in harm}


def design_metric(plan: CanaryPlan, metric: CanaryMetric) -> MetricDesign:
    n, pi = plan.horizon_units, plan.canary_share
    var_h = metric.anticipated_unit_var * (1.0 / (pi * n) + 1.0 / ((1.0 - pi) * n))
    scale, bar = "diff", None if metric.margin is None else -metric.margin
    if metric.margin_type == "relative":
        scale, var_h = "logratio", var_h / (metric.baseline or 1.0) ** 2
        m = float(metric.margin or 0.0)
        bar = math.log(1.0 - m) if metric.sign > 0 else -math.log(1.0 + m)
    a_h = alpha_allocation(plan).get(metric.name)
    a_fast = None if a_h is None or metric.fast_path == "none" else a_h / 2.0
    a_mix = (a_h or plan.alpha_rollback) - (a_fast or 0.0)
    return MetricDesign(metric=metric, scale=scale, bar=bar, var_horizon=var_h, alpha_harm=a_h, alpha_fast=a_fast,
                        tau2_harm=mixture.tau2_for_horizon(var_h, alpha=a_mix, sides=1),
                        tau2_ni=mixture.tau2_for_horizon(var_h, alpha=plan.alpha_promote, sides=1))  # fmt: skip


# numerators with at most one event per denominator item (the rest are counts)
BINARY_NUMERATORS = frozenset({"task_completed", "code_produced", "code_ran", "rework", "feedback_up",
                               "feedback_down", "tool_errors"})  # fmt: skip


def _estimate(agg: UnitAggregates, metric: CanaryMetric, scale: str) -> tuple[Estimate | None, str]:
    t, c = agg.canary, ~agg.canary
    if t.sum() < 2 or c.sum() < 2:
        return None, "fewer than 2 matured units in an arm"
    if agg.den[t].sum() <= 0 or agg.den[c].sum() <= 0:
        return None, "no eligible episodes (denominator 0) in an arm yet"
    binary = metric.numerator in BINARY_NUMERATORS and metric.cap is None
    kind: Literal["binary", "count"] = "binary" if binary else "count"
    rt, ft = with_variance_floor(ratio_and_var(agg.num[t], agg.den[t]), kind=kind)
    rc, fc = with_variance_floor(ratio_and_var(agg.num[c], agg.den[c]), kind=kind)
    if scale == "logratio" and (rt.ratio <= 0 or rc.ratio <= 0):
        return None, "a ratio is 0, so the log ratio is undefined yet"
    note = "variance floor used (every unit of an arm had the same ratio)" if ft or fc else ""
    est, pooled = with_pooled_variance_floor(effect(rt, rc, scale="logratio" if scale == "logratio" else "diff"))
    return est, note if not pooled else _join(note, "pooled unit variance used (larger than the arms' own)")


def _ni_bound(plan: CanaryPlan, d: MetricDesign, theta: float, var: float, st: MetricState, *, planned: bool = True
              ) -> tuple[float | None, MetricState, str]:  # fmt: skip
    if d.bar is None:
        return None, st, ""
    if plan.method == "gst" and not planned:
        return None, st, "not a planned GST look (between scheduled looks): the NI bound is the last planned look's"
    if plan.method == "msprt":
        lo = theta - mixture.one_sided_halfwidth(var, tau2=d.tau2_ni, alpha=plan.alpha_promote)
        llr = float(mixture.msprt_log_lr_one_sided(theta, var, tau2=d.tau2_ni, theta0=d.bar))
        return lo, replace(st, lower=max(st.lower, lo), llr_ni=max(st.llr_ni, llr)), ""
    k = len(st.gst_fractions)
    if k >= plan.gst_looks:
        return None, st, f"the {plan.gst_looks} planned GST looks are spent"
    t = 1.0 if k + 1 == plan.gst_looks else gsd.information_fraction(var, d.var_horizon)
    if st.gst_fractions and t <= st.gst_fractions[-1]:
        return None, st, "no new information since the last GST look"
    fr = (*st.gst_fractions, t)
    c = float(gsd.gs_bounds_spending(fr, alpha=plan.alpha_promote, sides=1, spending="obf")[-1])
    lo = theta - c * math.sqrt(var)
    return lo, replace(st, lower=max(st.lower, lo), gst_fractions=fr), f"GST look {k + 1}, t = {t:.2f}, c = {c:.3f}"


def _status(d: MetricDesign, st: MetricState) -> MetricStatus:
    if d.bar is not None and st.upper < d.bar:
        return "inferior"
    if st.upper < 0:
        return "harm"
    if st.lower > 0:
        return "superior"
    if d.bar is not None and st.lower > d.bar:
        return "noninferior"
    return "inconclusive"


def _exact_union(agg: UnitAggregates, alpha: float) -> exact.UnionBound | None:
    """The exact union CS on per-unit ratios in arrival order at ``2 alpha`` (each oriented side at level alpha), or
    None when an arm has no matured unit with N_i > 0."""
    order = np.argsort(agg.start, kind="stable") if agg.start is not None else np.arange(agg.den.size)
    keep = order[agg.den[order] > 0]
    x, can = np.clip(agg.num[keep] / agg.den[keep], 0.0, 1.0), agg.canary[keep]
    if not can.any() or can.all():
        return None
    return exact.union_difference(x[can], x[~can], alpha=2.0 * alpha)


def fast_path_upper(d: MetricDesign, agg: UnitAggregates) -> float | None:
    """Oriented one-sided upper bound at ``d.alpha_fast`` from the exact union CS, or None (no fast path, or an arm
    without a matured unit with N_i > 0). ``union_difference(alpha=2a)`` spends a/4 per side and arm, so each
    oriented side is at level a."""
    if d.alpha_fast is None:
        return None
    ub = _exact_union(agg, d.alpha_fast)
    return None if ub is None else (ub.upper if d.metric.sign > 0 else -ub.lower)


def few_events_lower(plan: CanaryPlan, d: MetricDesign, agg: UnitAggregates) -> float | None:
    """Oriented non-inferiority lower bound for a metric with an absolute margin that has its matured units but
    fewer than ``plan.min_events`` events (e.g. none at all in an A/A canary): the exact union CS at
    ``alpha_promote / 2`` — distribution-free, so it needs no event count. None for relative margins (a ratio of 0
    has no log) and when an arm has no eligible unit."""
    if d.bar is None or d.scale != "diff":
        return None
    ub = _exact_union(agg, plan.alpha_promote / 2.0)
    return None if ub is None else (ub.lower if d.metric.sign > 0 else -ub.upper)


def _with_fast_path(d: MetricDesign, agg: UnitAggregates, st: MetricState) -> tuple[MetricState, str]:
    u = fast_path_upper(d, agg)
    if u is None:
        return st, ""
    note = f"exact fast path: upper {u:.4f} at alpha {d.alpha_fast:.4g}" + (" (harm)" if u < 0 else "")
    return replace(st, upper=min(st.upper, u), fast_upper=min(st.fast_upper, u)), note


def evaluate_metric(plan: CanaryPlan, d: MetricDesign, agg: UnitAggregates, st: MetricState, *, planned: bool = True
                    ) -> tuple[MetricLook, MetricState]:  # fmt: skip
    """The metric's look result and its new state (unchanged when the metric is not yet ready). ``planned``: the
    look is on the plan's schedule; with ``method = "gst"`` only such looks are GST looks (an extra look at the
    log's watermark, whose time depends on when `tgsuite canary` is run, would otherwise spend alpha at a look
    that the next run does not take, and running it every hour would promote more often than alpha_promote)."""
    m = d.metric
    n_t, n_c = int(agg.canary.sum()), int((~agg.canary).sum())
    est, why = _estimate(agg, m, d.scale)
    base = dict(name=m.name, role=m.role, scale=d.scale, sign=m.sign, n_canary=n_t, n_control=n_c, bar=d.bar,
                alpha_harm=d.alpha_harm, method_ni="none" if d.bar is None else plan.method)  # fmt: skip
    st, fast = _with_fast_path(d, agg, st)
    if est is None and "log ratio is undefined" in why and d.bar is not None:
        why += ("; with no events in an arm a relative margin cannot be evaluated, so PROMOTE waits until events "
                "occur (an absolute margin lets the exact bound decide)")
    if est is None or est.var <= 0:
        status: MetricStatus = "harm" if st.upper < 0 else "burn_in" if est is None else "degenerate"
        note = why or "zero variance: every unit has the same value; no decision on this metric"
        return _look(base, st, status, _join(note, fast), est), st
    # events pooled over the arms: a canary with 0 events against a control with thousands is evidence, not burn-in
    events = est.treatment.total_num + est.control.total_num
    if min(n_t, n_c) >= plan.min_units_per_arm and events < plan.min_events and d.bar is not None:
        lo = few_events_lower(plan, d, agg)
        if lo is not None:  # a rare (or never seen) guardrail: decided by the exact bound, not held in burn-in
            st = replace(st, few_events_lower=max(st.few_events_lower, lo))
            note = (f"{events:g} events in both arms (fewer than min_events {plan.min_events}): non-inferiority from "
                    f"the exact bound at alpha {plan.alpha_promote / 2:.4g}, lower {st.few_events_lower:+.4f}")  # fmt: skip
            shown = replace(st, lower=st.few_events_lower)
            few: MetricStatus = "harm" if st.upper < 0 else _status(d, shown)
            return _look(base, shown, few, _join(note, fast), est), st
    if min(n_t, n_c) < plan.min_units_per_arm or events < plan.min_events:
        note = (f"burn-in: {min(n_t, n_c)} matured units in the smaller arm (need {plan.min_units_per_arm}), "
                f"{events:g} events in both arms (need {plan.min_events})")  # fmt: skip
        if events == 0 and d.bar is not None and d.scale != "diff":
            note += ("; no events in either arm and a relative margin: a ratio of 0 has no log, so PROMOTE is "
                     "unreachable until events occur (use an absolute margin for a guardrail that may never fire)")
        return _look(base, st, "harm" if st.upper < 0 else "burn_in", _join(note, fast), est), st
    theta = m.sign * est.delta
    if d.alpha_harm is not None:
        a_mix = d.alpha_harm - (d.alpha_fast or 0.0)
        hi = theta + mixture.one_sided_halfwidth(est.var, tau2=d.tau2_harm, alpha=a_mix)
        llr = float(mixture.msprt_log_lr_one_sided(-theta, est.var, tau2=d.tau2_harm, theta0=0.0))
        st = replace(st, upper=min(st.upper, hi), llr_harm=max(st.llr_harm, llr))
    _, st, note = _ni_bound(plan, d, theta, est.var, st, planned=planned)
    return _look(base, st, _status(d, st), _join(why, note, fast), est), st


def _join(*notes: str) -> str:
    return "; ".join(x for x in notes if x)


def _fin(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _look(base: dict, st: MetricState, status: MetricStatus, note: str, est: Estimate | None) -> MetricLook:
    sign = int(base["sign"])
    return MetricLook(**base, status=status, note=note,
                      ratio_canary=None if est is None else est.treatment.ratio,
                      ratio_control=None if est is None else est.control.ratio,
                      effect=None if est is None else sign * est.delta, var=None if est is None else est.var,
                      lower=_fin(st.lower), upper=_fin(st.upper), fast_upper=_fin(st.fast_upper),
                      p_harm=mixture.always_valid_p([st.llr_harm]) if math.isfinite(st.llr_harm) else 1.0,
                      p_ni=(None if base["bar"] is None or base["method_ni"] == "gst" else
                            mixture.always_valid_p([st.llr_ni]) if math.isfinite(st.llr_ni) else 1.0))  # fmt: skip
