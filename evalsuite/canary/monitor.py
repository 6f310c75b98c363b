"""Replay the looks of a canary: state in, look result and state out (pure; replaying look by look or all at once
gives the same decisions).

Looks are taken every ``plan.look_every_hours`` after the canary's start (the earliest assignment or episode) and
once more at the log's watermark (its latest episode); no look is ever later than the data (telemetry freshness).
Data-quality gates at each look: ``srm`` (sequential Dirichlet-multinomial test on assigned units, block when
flagged), ``crossover`` (share of units served the other arm's model: warn / block at the plan's thresholds) and
``burn_in`` (warn until every decision metric has its minimum matured units and events), ``missingness``
(differential missing telemetry, block beyond 1 point) and ``pre_period`` (A/A balance, warn); see
``evalsuite.canary.quality``. Analysed against a frozen record FILE, every look also carries ``prereg``: the
record's git anchor (``protocols.anchor_verify.verify_anchor``, with the canary's start as the result time); any
failed check makes it ``warn``, which blocks PROMOTE while harm can still ROLLBACK (``decide``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from evalsuite.canary import aggregate, quality, srm
from evalsuite.canary.decide import Verdict, decide, waiting_metrics
from evalsuite.canary.guardrails import MetricDesign, MetricState, alpha_allocation, design_metric, evaluate_metric
from evalsuite.canary.logs import read_assignments, read_episodes
from evalsuite.canary.schema import CanaryResult, Gate, GateLevel, LookResult, SRMLook
from evalsuite.schema import Check
from protocols.anchor_verify import verify_anchor
from protocols.canary import check_before, load_frozen_canary
from protocols.canary_schema import CanaryPlan, FrozenCanaryPlan

PREREG_FIX = ("restore the record and its .anchor.json exactly as frozen, or freeze the plan again into a NEW record "
              "(`tgsuite canary --freeze PLAN.toml --out NEW.frozen.json`) and start a new canary whose traffic is "
              "routed after that freeze")  # fmt: skip


@dataclass(frozen=True)
class MonitorState:
    """Everything carried between looks."""

    looks: int = 0
    srm_history: tuple[tuple[int, int], ...] = ()
    metrics: dict[str, MetricState] = field(default_factory=dict)
    verdict: Verdict | None = None


def look_times(plan: CanaryPlan, table: aggregate.EpisodeTable) -> list[float]:
    """Hours after the start at which looks are taken: the schedule up to the watermark, then the watermark."""
    k = int(math.floor(table.watermark / plan.look_every_hours + 1e-9))
    times = [plan.look_every_hours * i for i in range(1, k + 1)]
    if not times or table.watermark - times[-1] > 1e-9:
        times.append(table.watermark)
    return times


def _srm_gate(plan: CanaryPlan, history: tuple[tuple[int, int], ...]) -> SRMLook:
    shares = [plan.canary_share, 1.0 - plan.canary_share]
    c, k = history[-1]
    seq = srm.srm_sequential([list(h) for h in history], shares, alpha=plan.alpha_srm, k=plan.srm_prior_k)
    p_chi = srm.srm_chisq([c, k], shares)[1] if c + k > 0 else 1.0
    return SRMLook(canary_units=c, control_units=k, expected_share=plan.canary_share, log_bf=seq.log_bf,
                   p_anytime=seq.p_anytime, p_chisq=p_chi, flagged=seq.flagged)  # fmt: skip


def _gates(plan: CanaryPlan, s: SRMLook, table: aggregate.EpisodeTable, as_of: float, waiting: list[str]) -> list[Gate]:
    gates = [Gate(name="srm", level="block" if s.flagged else "ok",
                  detail=f"{s.canary_units} canary / {s.control_units} control units, design share "
                         f"{plan.canary_share:g}; anytime-valid p {s.p_anytime:.3g} (alpha {plan.alpha_srm:g})")]
    share, n = aggregate.crossover_share(table, as_of=as_of)
    level: GateLevel = "block" if share > plan.crossover_block else "warn" if share > plan.crossover_warn else "ok"
    gates.append(Gate(name="crossover", level=level, detail=f"{n} unit(s) ({share:.2%}) served the other arm's "
                      f"model (warn > {plan.crossover_warn:.1%}, block > {plan.crossover_block:.1%})"))
    gates.append(Gate(name="burn_in", level="warn" if waiting else "ok",
                      detail="; ".join(waiting) if waiting else "every decision metric is past its burn-in"))
    grace = min(m.window_hours for m in plan.metrics)
    gates.append(quality.missingness_gate(table, as_of=as_of, grace_hours=grace, alpha=plan.alpha_srm))
    gates.append(quality.pre_period_gate(table, as_of=as_of, alpha=plan.alpha_srm))
    return gates  # fmt: skip


def prereg_checks(record_path: str | Path, start: datetime, *, public_key: str | None = None) -> list[Check]:
    """Every anchor check of the frozen record file; the canary's start (its first episode or assignment) is the
    result time the anchor commit must precede. ``public_key`` (hex Ed25519) pins the signature's key."""
    checks = verify_anchor(record_path, result_times={"canary start (first episode or assignment)": start.isoformat()},
                           public_key=public_key)  # fmt: skip
    return [Check(name=c.name, status=c.status, detail=c.detail) for c in checks]


def prereg_gate(checks: Sequence[Check]) -> Gate:
    """``warn`` (blocks PROMOTE; harm can still ROLLBACK) when any anchor check failed, naming each and the fix."""
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        what = "; ".join(f"{c.name} ({c.detail})" for c in failed)
        return Gate(name="prereg", level="warn", detail=f"failed prereg check(s): {what}. PROMOTE is blocked until "
                    f"the record verifies (a harm ROLLBACK still applies); fix: {PREREG_FIX}")  # fmt: skip
    passed = ", ".join(c.name for c in checks if c.status == "pass") or "none"
    na = ", ".join(c.name for c in checks if c.status == "not_available") or "none"
    return Gate(name="prereg", level="ok", detail=f"the record's git anchor verifies (passed: {passed}; not "
                f"available: {na})")  # fmt: skip


def srm_units_needed(plan: CanaryPlan) -> int | None:
    """Assigned units the SRM check needs before PROMOTE (``srm.units_for_power`` up to 4x the horizon)."""
    return srm.units_for_power(plan.canary_share, plan.srm_detect_share, alpha=plan.alpha_srm, k=plan.srm_prior_k,
                               power=plan.srm_power, n_max=4 * plan.horizon_units)  # fmt: skip


def analyze_look(plan: CanaryPlan, table: aggregate.EpisodeTable, designs: Sequence[MetricDesign], *,
                 as_of: float, state: MonitorState, record_gates: Sequence[Gate] = ()
                 ) -> tuple[LookResult, MonitorState]:  # fmt: skip
    """One look at ``as_of`` hours after the start; ``record_gates`` (``prereg``) are the same at every look."""
    units = aggregate.assigned_units(table, as_of=as_of)
    history = (*state.srm_history, units)
    results, new_states = [], dict(state.metrics)
    k = as_of / plan.look_every_hours
    planned = abs(k - round(k)) < 1e-9  # on the schedule (not the watermark between two scheduled looks)
    for d in designs:
        agg = aggregate.unit_aggregates(table, d.metric, as_of=as_of)
        res, new_states[d.metric.name] = evaluate_metric(plan, d, agg, state.metrics.get(d.metric.name, MetricState()),
                                                         planned=planned)  # fmt: skip
        results.append(res)
    s = _srm_gate(plan, history)
    waiting = [m.name for m in waiting_metrics(plan, results)]
    gates = [*_gates(plan, s, table, as_of, waiting), *record_gates]
    verdict = decide(plan, metrics=results, gates=gates, elapsed_hours=as_of, units=sum(units), previous=state.verdict,
                     srm_units=srm_units_needed(plan))  # fmt: skip
    when = table.start + timedelta(hours=as_of)
    look = LookResult(index=state.looks + 1, as_of=when.strftime("%Y-%m-%dT%H:%M:%SZ"), elapsed_hours=as_of,
                      units={"canary": units[0], "control": units[1]}, srm=s, gates=gates, metrics=results,
                      decision=verdict.decision, reasons=list(verdict.reasons), terminal=verdict.terminal)  # fmt: skip
    return look, replace(state, looks=state.looks + 1, srm_history=history, metrics=new_states, verdict=verdict)


def monitor(plan: CanaryPlan, table: aggregate.EpisodeTable, times: Sequence[float] | None = None, *,
            record_gates: Sequence[Gate] = ()) -> list[LookResult]:  # fmt: skip
    """Every look in order (default schedule: :func:`look_times`) up to and including the first terminal one
    (ROLLBACK or PROMOTE ends the canary); the state is threaded from look to look."""
    designs = [design_metric(plan, m) for m in plan.metrics]
    state, out = MonitorState(), []
    for t in times if times is not None else look_times(plan, table):
        look, state = analyze_look(plan, table, designs, as_of=t, state=state, record_gates=record_gates)
        out.append(look)
        if look.terminal:
            break
    return out


def run_canary(record: FrozenCanaryPlan | str | Path, episodes_path: str | Path,
               assignments_path: str | Path | None = None, *, public_key: str | None = None) -> CanaryResult:  # fmt: skip
    """Read the logs, check them against the frozen plan, replay every look; the decision is the last look's.

    ``record`` is the frozen record's file (its anchor is verified: :func:`prereg_checks`, gate ``prereg``) or the
    record itself (in memory: nothing to verify, no ``prereg`` gate)."""
    record_path = None if isinstance(record, FrozenCanaryPlan) else Path(record)
    frozen = record if isinstance(record, FrozenCanaryPlan) else load_frozen_canary(record)
    plan = frozen.plan
    assignments = read_assignments(assignments_path) if assignments_path else None
    eps = read_episodes(episodes_path, assignments=assignments, assignments_path=assignments_path,
                        models={"control": plan.control_model, "canary": plan.canary_model})  # fmt: skip
    table = aggregate.build_table(eps, plan, assignments)
    check_before(frozen, table.start, source=str(assignments_path or episodes_path))
    checks = [] if record_path is None else prereg_checks(record_path, table.start, public_key=public_key)
    looks = monitor(plan, table, record_gates=() if record_path is None else (prereg_gate(checks),))
    return CanaryResult(plan_name=plan.name, plan_sha256=frozen.sha256, episodes_path=str(episodes_path),
                        assignments_path=None if assignments_path is None else str(assignments_path),
                        n_episodes=len(eps), n_units=len(table.unit_ids), method=plan.method,
                        alpha_allocation=alpha_allocation(plan), looks=looks, decision=looks[-1].decision,
                        reasons=looks[-1].reasons, record_path=None if record_path is None else str(record_path),
                        prereg_checks=checks)  # fmt: skip
