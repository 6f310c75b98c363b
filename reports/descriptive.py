"""The view of a descriptive report (``tgsuite report RUN_DIR``): one run directory, no plan, no decision.

Built from the run's ``aggregate.json`` (``evalsuite.schema.RunAggregate``, computed by ``evalsuite.run_summary``)
and its episodes: per-arm rates with their CIs, the behaviour × code 2×2 per arm, a per-repository table, the
secondary metrics, what the episodes reached (``reports.reach``) and the episode table with trajectory pages. The
banner says "NO PREREGISTERED DECISION" and why; nothing here compares arms or computes a statistic (formatting
only, like the rest of ``reports``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from evalsuite.schema import ArmAggregate, RunAggregate
from harness.schema import EpisodeResult
from reports import format as fmt
from reports import pages, reach
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


def _rate(a: ArmAggregate, endpoint: str) -> str:
    return rate_text(next((r for r in a.rates if r.endpoint == endpoint), None))


def _not_scored(a: ArmAggregate) -> str:
    return f"{a.statuses.get('infra_error', 0):,} / {a.statuses.get('invalid_instance', 0):,}"


def outcomes_section(agg: RunAggregate) -> Section:
    if not agg.arms:
        return Section(id="outcomes", title="Outcomes per arm", available=False, absent="The run has no episodes.")
    rates = Table(
        id="arm-rates", header=["arm", "policy", "scored / episodes", *[label(e) for e in ENDPOINTS],
                                "not scored: infra / invalid instance"],
        rows=[[Cell(text=a.arm), Cell(text=a.policy), Cell(text=f"{a.n_scored:,} / {a.n_episodes:,}"),
               *[Cell(text=_rate(a, e)) for e in ENDPOINTS], Cell(text=_not_scored(a))] for a in agg.arms],
        caption="Rates over scored episodes with Wilson 95% CIs (episodes pooled across seeds and tasks).",
    )
    joint = [joint_table_view(a.arm, a.arm, a.joint_table) for a in agg.arms]
    return Section(id="outcomes", title="Outcomes per arm", tables=[rates, *joint],
                   intro="Each arm on its own; no difference between arms is estimated here.")


def per_repo_section(agg: RunAggregate) -> Section:
    repos = sorted({r for a in agg.arms for r in a.per_repo})
    if not repos:
        return Section(id="per-repo", title="Per repository", available=False, absent="No scored episodes.")
    rows = []
    for repo in repos:
        for a in agg.arms:
            got = {r.endpoint: r for r in a.per_repo.get(repo, [])}
            rows.append([Cell(text=repo), Cell(text=a.arm), *[Cell(text=rate_text(got.get(e))) for e in ENDPOINTS]])
    table = Table(id="per-repo-table", header=["repository", "arm", *[label(e) for e in ENDPOINTS]], rows=rows,
                  caption="Exploratory: episodes of one repository pooled, Wilson 95% CIs.")
    return Section(id="per-repo", title="Per repository", tables=[table])


def secondary_section(agg: RunAggregate) -> Section:
    metrics = sorted({m.metric for a in agg.arms for m in a.secondary})
    if not metrics:
        return Section(id="secondary", title="Secondary metrics", available=False, absent="No scored episodes.")
    rows = []
    for a in agg.arms:
        got = {m.metric: m for m in a.secondary}
        rows.append([Cell(text=a.arm), *[Cell(text=fmt.DASH if got.get(m) is None or got[m].mean is None else
                                              f"{fmt.num(got[m].mean, digits=2)} ± {fmt.num(got[m].se, digits=2)} "
                                              f"(n = {got[m].n:,})") for m in metrics]])
    table = Table(id="secondary-table", header=["arm", *metrics], rows=rows,
                  caption="Mean ± standard error (sqrt(var/n)) over the scored episodes that have the metric.")
    return Section(id="secondary", title="Secondary metrics", tables=[table])


def facts(agg: RunAggregate, now: str) -> list[KeyValue]:
    gen = ", ".join(f"{k.split('.', 1)[1]} {v}" for k, v in agg.config.items()
                    if k.startswith("generation.") and v is not None) or "policy defaults"
    return [KeyValue(key=k, value=v) for k, v in (
        ("decision", NO_DECISION), ("run", agg.run_id), ("task set", f"{agg.task_set_name} "
                                                                   f"({fmt.short_hash(agg.task_set_sha256)})"),
        ("git commit", fmt.short_hash(agg.git_commit)), ("generation", gen),
        ("aggregate computed", agg.created_at), ("report generated", now))]


def descriptive_view(agg: RunAggregate, eps: Sequence[EpisodeResult], *, paged: set[str], max_pages: int,
                     now: str) -> ReportView:
    """The whole view of a descriptive report (pure: no file access)."""
    secs = [outcomes_section(agg), per_repo_section(agg), reach.reach_section(eps), secondary_section(agg)]
    return ReportView(
        title=f"Run {agg.run_id}: descriptive report",
        subtitle=f"{len(agg.arms)} arm(s) on task set {agg.task_set_name or '?'}; no preregistered decision",
        generated_at=now, facts=facts(agg, now), verdict=verdict_view(agg), warnings=[], sections=secs,
        episodes=pages.episodes_view(eps, paged, cap=max_pages),
        nav=[("verdict", "Decision"), *[(s.id, s.title) for s in secs], ("episodes", "Episodes")],
    )


__all__ = ["NO_DECISION", "descriptive_view"]
