"""The view of a descriptive report (``tgsuite report RUN_DIR``): one run directory, no plan, no decision.

Built from the run's ``aggregate.json`` (``evalsuite.schema.RunAggregate``, computed by ``evalsuite.run_summary``)
and its episodes: per-arm rates with their CIs, the behaviour × code 2×2 per arm, a per-repository table, the
secondary metrics, what the episodes reached (``reports.reach``) and the episode table with trajectory pages. The
banner says "NO PREREGISTERED DECISION" and why; nothing here compares arms or computes a statistic (formatting
only, like the rest of ``reports``).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

from evalsuite.schema import ArmAggregate, RunAggregate
from harness.schema import EpisodeResult
from reports import format as fmt
from reports import pages, reach
from reports.judged import (
    JUDGED_ENDPOINTS,
    NOT_JUDGED,
    NOT_JUDGED_WHY,
    TOUCHED_CAPTION,
    tests_touched,
    touched_text,
    unjudged_arms,
)
from reports.model import Cell, KeyValue, ReportView, Section, Table, VerdictView
from reports.sections import joint_table_view, label, rate_text

ENDPOINTS = ("code_ok", "behaviour_ok", "joint_ok")
NO_DECISION: Literal["NO PREREGISTERED DECISION"] = "NO PREREGISTERED DECISION"


def verdict_view(agg: RunAggregate) -> VerdictView:
    return VerdictView(
        verdict=NO_DECISION, tone="na",
        headline="Descriptive report: no plan was frozen for this run, so nothing here is a ship / no-ship decision.",
        rule="none: rates are shown as measured. For a decision, freeze a plan (`tgsuite protocol freeze`), then "
             "`tgsuite analyze` and `tgsuite report --analysis`.",
        criterion_reasons=[], decision_reasons=[agg.note], claims="No endpoint is claimed.",
    )


def _rate(a: ArmAggregate, endpoint: str, unjudged: AbstractSet[str] = frozenset()) -> str:
    if a.arm in unjudged and endpoint in JUDGED_ENDPOINTS:
        return NOT_JUDGED
    return rate_text(next((r for r in a.rates if r.endpoint == endpoint), None))




def _not_scored(a: ArmAggregate) -> str:
    return f"{a.statuses.get('infra_error', 0):,} / {a.statuses.get('invalid_instance', 0):,}"


def outcomes_section(agg: RunAggregate, eps: Sequence[EpisodeResult] = ()) -> Section:
    if not agg.arms:
        return Section(id="outcomes", title="Outcomes per arm", available=False, absent="The run has no episodes.")
    unjudged = unjudged_arms(eps)
    rates = Table(
        id="arm-rates", header=["arm", "policy", "scored / episodes", *[label(e) for e in ENDPOINTS],
                                "tests touched", "not scored: infra / invalid instance"],
        rows=[[Cell(text=a.arm), Cell(text=a.policy), Cell(text=f"{a.n_scored:,} / {a.n_episodes:,}"),
               *[Cell(text=_rate(a, e, unjudged), title=NOT_JUDGED_WHY if a.arm in unjudged and e in JUDGED_ENDPOINTS
                      else "") for e in ENDPOINTS],
               Cell(text=touched_text(tests_touched(eps, a.arm))), Cell(text=_not_scored(a))] for a in agg.arms],
        caption="Rates over scored episodes with Wilson 95% CIs (episodes pooled across seeds and tasks). "
                + TOUCHED_CAPTION,
    )
    joint = [joint_table_view(a.arm, a.arm, a.joint_table) for a in agg.arms if a.arm not in unjudged]
    notes = [f"{', '.join(sorted(unjudged))}: behaviour and joint are {NOT_JUDGED} ({NOT_JUDGED_WHY}); only the "
             "coding endpoint was measured."] if unjudged else []
    return Section(id="outcomes", title="Outcomes per arm", tables=[rates, *joint], notes=notes,
                   intro="Each arm on its own; no difference between arms is estimated here.")


def per_repo_section(agg: RunAggregate, eps: Sequence[EpisodeResult] = ()) -> Section:
    repos = sorted({r for a in agg.arms for r in a.per_repo})
    if not repos:
        return Section(id="per-repo", title="Per repository", available=False, absent="No scored episodes.")
    unjudged = unjudged_arms(eps)
    rows = []
    for repo in repos:
        for a in agg.arms:
            got = {r.endpoint: r for r in a.per_repo.get(repo, [])}
            rows.append([Cell(text=repo), Cell(text=a.arm), *[
                Cell(text=NOT_JUDGED if a.arm in unjudged and e in JUDGED_ENDPOINTS else rate_text(got.get(e)))
                for e in ENDPOINTS]])
    table = Table(id="per-repo-table", header=["repository", "arm", *[label(e) for e in ENDPOINTS]], rows=rows,
                  caption="Exploratory: episodes of one repository pooled, Wilson 95% CIs.")
    return Section(id="per-repo", title="Per repository", tables=[table])


def secondary_section(agg: RunAggregate, eps: Sequence[EpisodeResult] = ()) -> Section:
    metrics = sorted({m.metric for a in agg.arms for m in a.secondary})
    if not metrics:
        return Section(id="secondary", title="Secondary metrics", available=False, absent="No scored episodes.")
    unjudged = unjudged_arms(eps)
    rows = []
    for a in agg.arms:
        got = {m.metric: m for m in a.secondary}
        if a.arm in unjudged:
            rows.append([Cell(text=a.arm), *[Cell(text=NOT_JUDGED, title=NOT_JUDGED_WHY) for _ in metrics]])
            continue
        rows.append([Cell(text=a.arm), *[Cell(text=fmt.DASH if got.get(m) is None or got[m].mean is None else
                                              f"{fmt.num(got[m].mean, digits=2)} ± {fmt.num(got[m].se, digits=2)} "
                                              f"(n = {got[m].n:,})") for m in metrics]])
    table = Table(id="secondary-table", header=["arm", *metrics], rows=rows,
                  caption="Mean ± standard error (sqrt(var/n)) over the scored episodes that have the metric.")
    notes = [f"{', '.join(sorted(unjudged))}: {NOT_JUDGED}, see Outcomes per arm."] if unjudged else []
    return Section(id="secondary", title="Secondary metrics", tables=[table], notes=notes)


def generation_facts(config: dict[str, object]) -> list[tuple[str, str]]:
    """One header line per model arm: endpoint, model and the settings it sent (``generation.<arm>.<key>`` of
    aggregate.json, from the run manifest); older aggregates with run-wide ``generation.<key>`` keys still read."""
    per_arm: dict[str, dict[str, object]] = {}
    for key, value in config.items():
        parts = key.split(".", 2)
        if parts[0] != "generation" or value is None:
            continue
        arm, name = (parts[1], parts[2]) if len(parts) == 3 else ("every model arm", parts[1])
        per_arm.setdefault(arm, {})[name] = value
    lines = []
    for arm, got in sorted(per_arm.items()):
        where = " · ".join(str(got.pop(k)) for k in ("endpoint", "model") if k in got)
        settings = ", ".join(f"{k} {v}" for k, v in got.items())
        lines.append((f"model arm {arm}", "; ".join(x for x in (where, settings) if x)))
    return lines or [("generation", "no model arm (scripted or graded patches only)")]


def facts(agg: RunAggregate, now: str) -> list[KeyValue]:
    return [KeyValue(key=k, value=v) for k, v in (
        ("decision", NO_DECISION), ("run", agg.run_id), ("task set", f"{agg.task_set_name} "
                                                                   f"({fmt.short_hash(agg.task_set_sha256)})"),
        ("git commit", fmt.short_hash(agg.git_commit)), *generation_facts(dict(agg.config)),
        ("aggregate computed", agg.created_at), ("report generated", now))]


def descriptive_view(agg: RunAggregate, eps: Sequence[EpisodeResult], *, paged: set[str], max_pages: int,
                     now: str) -> ReportView:
    """The whole view of a descriptive report (pure: no file access)."""
    secs = [outcomes_section(agg, eps), per_repo_section(agg, eps), reach.reach_section(eps, paper=False),
            secondary_section(agg, eps)]
    return ReportView(
        title=f"Run {agg.run_id}: descriptive report",
        subtitle=f"{len(agg.arms)} arm(s) on task set {agg.task_set_name or '?'}; no preregistered decision",
        generated_at=now, facts=facts(agg, now), verdict=verdict_view(agg), warnings=[], sections=secs,
        episodes=pages.episodes_view(eps, paged, cap=max_pages),
        nav=[("verdict", "Decision"), *[(s.id, s.title) for s in secs], ("episodes", "Episodes")],
    )


__all__ = ["NO_DECISION", "descriptive_view"]
