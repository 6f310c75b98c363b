"""The per-look decision CONTINUE / ROLLBACK / PROMOTE (CANARY.md §2.3, §5.4). ROLLBACK and PROMOTE are terminal.

Order of the rules:
1. a terminal decision never changes;
2. SRM flagged or a data-quality gate at ``block`` -> ROLLBACK (``on_srm = "rollback"``) or HOLD (CONTINUE, with
   the reason);
3. any harm metric whose upper bound excludes no-harm (U < 0; U < −delta for ``rollback_on = "inferior"``) ->
   ROLLBACK. This is a union of harm tests, each at alpha_rollback / h (Bonferroni), so P(false ROLLBACK) <=
   alpha_rollback + alpha_srm when the canary is truly no worse on every metric;
4. PROMOTE when the canary is ready (elapsed >= min_duration, no metric waiting (``waiting_metrics``), enough
   assigned units for the SRM check to flag the plan's ``srm_detectable_share`` with ``srm_power`` (``srm_wait``), no
   gate at ``warn``) and EVERY metric with a margin is non-inferior (L > −delta), plus the primary superior if required.
   This is an intersection–union test: each claim at alpha_promote with no adjustment (Berger 1982), so
   P(PROMOTE | some metric truly worse than its margin) <= alpha_promote;
5. at the horizon (units >= horizon_units or elapsed >= max_duration): ROLLBACK "inconclusive", or keep going
   (``on_horizon_inconclusive = "extend"``, valid for the anytime-valid method only);
6. otherwise CONTINUE.
Both guarantees hold at any data-dependent look time because every bound is a confidence sequence (msprt), or at
the planned looks (gst).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalsuite.canary.schema import Decision, Gate, MetricLook
from protocols.canary_schema import CanaryPlan


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reasons: tuple[str, ...]
    terminal: bool


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.4f}"


def _p(x: float) -> str:
    return "< 1e-300" if x == 0 else f"{x:.2g}"  # exp(-log Lambda) underflows for overwhelming evidence


def _harm(plan: CanaryPlan, metrics: Sequence[MetricLook]) -> list[str]:
    rules = {m.name: m.rollback_on for m in plan.metrics}
    out = []
    for m in metrics:
        if m.upper is None or rules[m.name] == "never":
            continue
        if rules[m.name] == "any_harm" and m.upper < 0:
            how = (f"exact fast path, upper {_fmt(m.fast_upper)} at alpha {m.alpha_harm / 2:.4g}"
                   if m.fast_upper is not None and m.fast_upper < 0 else f"always-valid p {_p(m.p_harm)}")
            out.append(f"harm on {m.name}: upper bound {_fmt(m.upper)} < 0 at alpha {m.alpha_harm:.4g} "
                       f"(effect {_fmt(m.effect)}, {how})")  # fmt: skip
        elif rules[m.name] == "inferior" and m.bar is not None and m.upper < m.bar:
            out.append(f"{m.name} inferior: upper bound {_fmt(m.upper)} < -margin {_fmt(m.bar)}")
    return out


def _promotable(plan: CanaryPlan, metrics: Sequence[MetricLook]) -> tuple[bool, list[str]]:
    missing = []
    for m in metrics:
        if m.bar is not None and not (m.lower is not None and m.lower > m.bar):
            missing.append(f"{m.name}: lower bound {_fmt(m.lower)} not > -margin {_fmt(m.bar)} ({m.status})")
    primary = next(m for m in metrics if m.role == "primary")
    if plan.require_superiority and not (primary.lower is not None and primary.lower > 0):
        missing.append(f"{primary.name}: superiority required, lower bound {_fmt(primary.lower)} not > 0")
    return not missing, missing


def waiting_metrics(plan: CanaryPlan, metrics: Sequence[MetricLook]) -> list[MetricLook]:
    """Decision metrics that keep PROMOTE waiting: every metric with a margin until it is past burn-in, and a
    harm-only metric until it has ``min_units_per_arm`` matured units per arm. A harm-only metric that stays below
    ``min_events`` events (e.g. rare hallucination reports) does not block PROMOTE: it has shown no harm,
    and, with ``fast_path = "exact_union"`` in its plan, an exact CS watches it for harm from the first matured unit
    (``guardrails.fast_path_upper``; CANARY §1.4 a3)."""
    return [m for m in metrics if m.status in ("burn_in", "degenerate") and
            (m.bar is not None or (m.alpha_harm is not None and min(m.n_canary, m.n_control) < plan.min_units_per_arm))]


def srm_wait(plan: CanaryPlan, units: int, srm_units: int | None) -> list[str]:
    """Why PROMOTE must still wait for the SRM check's power (empty: it has it). ``srm_units``: the units the check
    needs (``srm.units_for_power``), None when it cannot get there within 4x the horizon."""
    what = (f"the SRM check needs {{}} assigned units to flag a canary share of {plan.srm_detect_share:.3g} (design "
            f"{plan.canary_share:.3g}) with power {plan.srm_power:g}")  # fmt: skip
    if srm_units is None:
        return [what.format(f"more than {4 * plan.horizon_units}") + ": PROMOTE is unreachable with this plan; "
                "raise srm_detectable_share's distance from canary_share, alpha_srm or the canary share"]
    return [what.format(srm_units) + f" ({units} so far)"] if units < srm_units else []


def decide(plan: CanaryPlan, *, metrics: Sequence[MetricLook], gates: Sequence[Gate], elapsed_hours: float,
           units: int, previous: Verdict | None = None, srm_units: int | None = 0) -> Verdict:  # fmt: skip
    """The decision at one look from its metric results and gates (rules in the module docstring)."""
    if previous is not None and previous.terminal:
        return previous
    blocks = [f"{g.name}: {g.detail}" for g in gates if g.level == "block"]
    if blocks:
        if plan.on_srm == "rollback":
            return Verdict("ROLLBACK", tuple(blocks), True)
        return Verdict("CONTINUE", ("HOLD (no decision while a data gate blocks): " + "; ".join(blocks),), False)
    harm = _harm(plan, metrics)
    if harm:
        return Verdict("ROLLBACK", tuple(harm), True)
    waiting = [f"{m.name} in burn-in ({m.note})" for m in waiting_metrics(plan, metrics)]
    warns = [f"{g.name}: {g.detail}" for g in gates if g.level == "warn"]
    ok, missing = _promotable(plan, metrics)
    waiting += srm_wait(plan, units, srm_units)
    if elapsed_hours >= plan.min_duration_hours and not waiting and not warns and ok:
        return Verdict("PROMOTE", tuple(f"{m.name} non-inferior: lower bound {_fmt(m.lower)} > -margin "
                                        f"{_fmt(m.bar)}" for m in metrics if m.bar is not None), True)  # fmt: skip
    if units >= plan.horizon_units or elapsed_hours >= plan.max_duration_hours:
        why = f"horizon reached ({units} units, {elapsed_hours:.0f} h) without establishing non-inferiority"
        if plan.on_horizon_inconclusive == "rollback":
            return Verdict("ROLLBACK", (why, *missing), True)
        return Verdict("CONTINUE", (why + "; extending (anytime-valid method)", *missing), False)
    reasons = [f"minimum duration {plan.min_duration_hours:g} h not reached ({elapsed_hours:.0f} h)"
               ] if elapsed_hours < plan.min_duration_hours else []  # fmt: skip
    return Verdict("CONTINUE", tuple(reasons + waiting + warns + missing) or ("no rule fired",), False)
