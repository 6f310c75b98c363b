"""The behaviour-tiers panel (``AnalysisResult.exploratory.behaviour_tiers``; ``tgsuite.pipeline.tiers``).

Per tier (format: ``tool_args@v1``, style: ``markdown@v1``, tension: ``ask_first@v1``) and arm (the SFT base, GRPO
and TG trained for that tier) on the unseen held-out repositories: compliance, compliance over applicable episodes
and the resolved rate, each with the Wilson CI computed by ``evalsuite``; a figure of compliance with its CI. When
the study was not run, the panel says so. Nothing is computed here.
"""

from __future__ import annotations

from evalsuite.schema import AnalysisResult, BehaviourTierRow, RateCI
from reports import figures
from reports import format as fmt
from reports.model import Cell, Figure, Section, Table
from reports.studies import NOT_RUN

TIER_TEXT = {
    "tool_args@v1": "every edit_file call carries a one-line reason",
    "markdown@v1": "replies to the user in Markdown",
    "ask_first@v1": "asks the user (ask_user) before the first file change",
}
INTRO = (
    "Three requirements of increasing difficulty: a machine-checkable tool-argument format, the Markdown style rule, "
    "and a requirement in tension with the task (asking for approval before editing costs a turn). For each, GRPO and "
    "TG were trained with that requirement as the behaviour reward (TG: gated hints on its failing turns) from an SFT "
    "base that saw reminders of all three, and evaluated without hints on held-out repositories built from "
    "templates never used in training."
)


def _rate(r: RateCI) -> str:
    return f"{fmt.pct(r.rate)} {fmt.interval(r.ci_low, r.ci_high, scale='pct')}" if r.n else f"{fmt.DASH} (n = 0)"


def _row(r: BehaviourTierRow) -> list[Cell]:
    seeds = ", ".join(str(s) for s in r.seeds) or fmt.DASH
    return [Cell(text=f"{r.level}: {r.tier}", title=TIER_TEXT.get(r.tier, "")), Cell(text=r.arm), Cell(text=seeds),
            Cell(text=_rate(r.compliance)), Cell(text=f"{int(r.compliance.successes):,} / {r.compliance.n:,}"),
            Cell(text=_rate(r.compliance_applicable)), Cell(text=f"{r.compliance_applicable.n:,}"),
            Cell(text=_rate(r.resolved)), Cell(text=f"{int(r.resolved.successes):,} / {r.resolved.n:,}")]


def behaviour_tiers_section(a: AnalysisResult) -> Section:
    """The panel; ``available=False`` with "Not run in this study." when there are no tier results."""
    res = a.exploratory.behaviour_tiers
    if res is None or not res.rows:
        return Section(id="tiers", title="Behaviour tiers on unseen repositories", available=False,
                       absent=f"{NOT_RUN} (It compares GRPO and TG on a tool-argument format, the Markdown rule and "
                       "asking before editing; `tgsuite reproduce --studies behaviour_tiers`.)")
    table = Table(id="tiers-table", header=["tier", "arm", "training seeds", "compliance (95% CI)", "complied / n",
                                            "compliance, applicable episodes (CI)", "applicable n",
                                            "resolved (95% CI)", "resolved / n"],
                  rows=[_row(r) for r in res.rows],
                  caption=f"Task set {res.task_set or fmt.DASH}: {res.n_instances:,} instances of unseen "
                  "repositories; episodes pooled over training seeds; Wilson CIs (descriptive, exploratory).")
    forest = [figures.ForestRow(label=f"{r.tier} · {r.arm}", estimate=r.compliance.rate, lo=r.compliance.ci_low,
                                hi=r.compliance.ci_high, threshold=None, passed=None) for r in res.rows]
    fig = Figure(svg=figures.forest_plot(forest, xlabel="compliance (%)"),
                 caption="Compliance per tier and arm, with its 95% Wilson CI.")
    notes = [f"{t}: {text}" for t, text in TIER_TEXT.items() if any(r.tier == t for r in res.rows)]
    return Section(id="tiers", title="Behaviour tiers on unseen repositories (exploratory)", intro=INTRO,
                   tables=[table], figures=[fig], notes=[*notes, *res.notes])
