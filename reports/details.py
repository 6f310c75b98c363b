"""Supporting sections: variance split, sensitivity analyses, breakdowns, secondary endpoints, power, missing data.

Formatting only: every number is a field of ``AnalysisResult``. Sensitivity analyses that disagree with the primary
verdict are flagged (``agrees_with_primary is False``), never hidden; they are prespecified checks, not a rescue.
"""

from __future__ import annotations

from evalsuite.schema import AnalysisResult, BreakdownRow, SensitivityResult
from reports import format as fmt
from reports.model import Cell, Section, Table
from reports.sections import VERDICT_TONE, rate_text

BY_TITLE = {"repo": "repository", "difficulty": "difficulty", "template_tier": "template tier",
            "stratum": "held-out stratum"}
# what each held-out stratum measures (harness.minirepos.primary; docs/HARNESS.md, "The primary held-out set")
STRATUM_NOTE = ("Strata: twin = the gold fix changes the same lines as a training task's (coding there is recall of a "
                "trained fix in a new repository); no_twin = no training task's fix does (repair beyond recall); "
                "generalization = repositories from templates no training task uses.")


def variance_section(a: AnalysisResult) -> Section:
    rows = []
    for c in a.criteria:
        v = c.variance
        if v is None:
            rows.append([Cell(text=c.endpoint), *[Cell(text=fmt.DASH) for _ in range(5)]])
            continue
        rows.append([
            Cell(text=c.endpoint),
            Cell(text=fmt.pp(v.se_total, digits=2, signed=False)),
            Cell(text=fmt.pp(v.se_training_seeds, digits=2, signed=False)),
            Cell(text=fmt.pct(v.share_training_seeds, digits=0)),
            Cell(text=fmt.pp(v.se_task_given_ckpts, digits=2, signed=False)),
            Cell(text=fmt.pct(v.share_task, digits=0)),
        ])
    comps = [[Cell(text=c.endpoint), Cell(text=vc.arm), Cell(text=fmt.num(vc.seed, digits=5)),
              Cell(text=fmt.num(vc.task, digits=5)), Cell(text=fmt.num(vc.resid, digits=5)),
              Cell(text=fmt.num(vc.icc_seed, digits=3))]
             for c in a.criteria for vc in c.variance_components]
    if all(c.variance is None for c in a.criteria):
        return Section(id="variance", title="Where the uncertainty comes from", available=False,
                       absent="The analysis did not split the variance (no crossed seeds × tasks estimate).")
    tables = [Table(id="variance-split", header=["endpoint", "SE total", "SE from training seeds", "share",
                                                 "SE from task sampling", "share"], rows=rows,
                    caption="Var(Δ̂) split into training-seed and task-sampling parts (STATS §3.3). A large "
                    "seed share means more training seeds, not more tasks, would narrow the interval.")]
    if comps:
        tables.append(Table(id="variance-components", header=["endpoint", "arm", "σ² seed", "σ² task",
                                                              "σ² residual", "ICC seed"], rows=comps,
                            caption="Random-effects ANOVA components of the cell means, per arm."))
    return Section(id="variance", title="Where the uncertainty comes from", tables=tables)


ZERO_SE = "not informative: a zero-width interval (standard error 0, no variation to measure)"


def zero_width(s: SensitivityResult) -> bool:
    """A sensitivity analysis that ran but whose interval has no width: its verdict carries no information."""
    return s.status == "ok" and s.ci_low is not None and s.ci_high is not None and s.ci_low == s.ci_high


def sensitivity_section(a: AnalysisResult) -> Section:
    rows, disagree = [], []
    for c in a.criteria:
        for s in c.sensitivity:
            degenerate = zero_width(s)
            flag = s.agrees_with_primary is False and not degenerate
            if flag:
                disagree.append(f"{c.endpoint}: {s.name} gives {s.verdict.upper()} while the primary gives "
                                f"{c.verdict.upper()}")
            scale = "pp" if s.scale == "risk_difference" else "plain"
            est = fmt.pp(s.estimate) if s.scale == "risk_difference" else fmt.num(s.estimate)
            rows.append([
                Cell(text=c.endpoint), Cell(text=s.name), Cell(text=s.method), Cell(text=s.status),
                Cell(text=est), Cell(text=fmt.interval(s.ci_low, s.ci_high, scale=scale, digits=1 if scale == "pp" else 3)),
                Cell(text=(fmt.pp(s.lower_one_sided) if s.scale == "risk_difference" else fmt.num(s.lower_one_sided))
                     + f" vs {fmt.pp(c.bar)}"),
                Cell(text=f"{s.verdict.replace('_', ' ').upper()} (not informative)" if degenerate else
                     s.verdict.replace("_", " ").upper(), tone="na" if degenerate else VERDICT_TONE[s.verdict],
                     title=ZERO_SE if degenerate else ""),
                Cell(text="n/a" if degenerate else {True: "agrees", False: "DISAGREES", None: "n/a"}[
                    s.agrees_with_primary],
                     tone="fail" if flag else ("pass" if s.agrees_with_primary and not degenerate else "na")),
                Cell(text="; ".join(x for x in (ZERO_SE if degenerate else "", s.note) if x) or fmt.DASH),
            ])
    if not rows:
        return Section(id="sensitivity", title="Sensitivity analyses", available=False,
                       absent="No sensitivity analysis was prespecified or run in this study.")
    return Section(
        id="sensitivity", title="Sensitivity analyses", warnings=disagree,
        intro="Prespecified checks of the primary analysis (STATS §3.6). They do not change the decision; a "
        "disagreement is flagged so a reader can judge how robust the verdict is.",
        tables=[Table(id="sensitivity-table", header=["endpoint", "analysis", "method", "status", "estimate", "CI",
                                                      "lower bound vs bar", "verdict", "vs primary", "note"], rows=rows)],
    )


def _breakdown_table(by: str, rows: list[BreakdownRow]) -> Table:
    body = [[Cell(text=r.level), Cell(text=r.endpoint), Cell(text=f"{r.n_tasks:,}"), Cell(text=rate_text(r.treatment)),
             Cell(text=rate_text(r.baseline)), Cell(text=fmt.pp(r.estimate)), Cell(text=fmt.interval(r.ci_low, r.ci_high))]
            for r in rows]
    methods = sorted({r.method for r in rows})
    return Table(id=f"breakdown-{by}", header=[BY_TITLE[by], "endpoint", "tasks", "treatment", "baseline", "Δ",
                                                "CI of Δ"], rows=body,
                 caption=f"Per {BY_TITLE[by]} (exploratory; method: {'; '.join(methods)})."
                 + (f" {STRATUM_NOTE}" if by == "stratum" else ""))


def breakdowns_section(a: AnalysisResult) -> Section:
    tables, missing = [], []
    for by in ("repo", "difficulty", "template_tier", "stratum"):
        rows = [r for r in a.breakdowns if r.by == by]
        if rows:
            tables.append(_breakdown_table(by, rows))
        else:
            missing.append(f"Per {BY_TITLE[by]}: not computed in this analysis.")
    if not tables:
        return Section(id="breakdowns", title="Breakdowns", available=False,
                       absent="No breakdown per repository, difficulty or template tier was computed in this analysis.")
    return Section(id="breakdowns", title="Breakdowns (exploratory)", tables=tables, notes=missing,
                   intro="Not part of the decision. Many groups are shown, so some will look different by chance.")


def secondary_section(a: AnalysisResult) -> Section:
    rows = [[Cell(text=s.endpoint), Cell(text=fmt.num(s.treatment_mean)), Cell(text=fmt.num(s.baseline_mean)),
             Cell(text=fmt.num(s.estimate)), Cell(text=fmt.interval(s.ci_low, s.ci_high, scale="plain", digits=3)),
             Cell(text=f"{s.n_treatment:,} / {s.n_baseline:,}"), Cell(text=s.method or fmt.DASH),
             Cell(text=s.note or fmt.DASH)] for s in a.secondary]
    power = [[Cell(text=p.endpoint), Cell(text=p.kind), Cell(text=fmt.pct(p.power, digits=0),
                                                              tone="warn" if p.power < 0.8 else None),
              Cell(text=fmt.pp(p.se, digits=2, signed=False)), Cell(text=fmt.num(p.df, digits=1)),
              Cell(text=str(p.seeds_per_arm)), Cell(text=f"{p.n_tasks:,}"), Cell(text=p.method)] for p in a.power]
    tables = []
    if rows:
        tables.append(Table(id="secondary-table", header=["endpoint", "treatment", "baseline", "Δ", "CI", "n T / C",
                                                          "method", "note"], rows=rows,
                            caption="Secondary endpoints (exploratory)."))
    if power:
        tables.append(Table(id="power-table", header=["endpoint", "criterion", "power", "SE", "df", "seeds/arm",
                                                      "tasks", "method"], rows=power,
                            caption="Power of the preregistered design under the plan's stated assumptions."))
    if not tables:
        return Section(id="secondary", title="Secondary endpoints and power", available=False,
                       absent="No secondary endpoint or power calculation is in this analysis.")
    return Section(id="secondary", title="Secondary endpoints and power", tables=tables)


def missing_section(a: AnalysisResult, *, max_rows: int = 200) -> Section:
    m = a.missing_data
    facts = [
        ["preregistered rule", m.rule],
        ["cells expected (arms × seeds × tasks × episodes)", f"{m.expected_cells:,}"],
        ["cells observed and scored", f"{m.observed_cells:,}"],
        ["episodes in the confirmatory analysis (complete tasks only)", f"{m.analysed_episodes:,}"],
        ["tasks dropped (no result in some arm × seed)", f"{len(m.dropped_tasks):,}" + (
            f": {', '.join(m.dropped_tasks[:20])}{' …' if len(m.dropped_tasks) > 20 else ''}" if m.dropped_tasks else "")],
        ["coverage", f"{fmt.pct(m.coverage)} (threshold {fmt.pct(m.coverage_threshold)})"],
        ["infra errors excluded", f"{m.infra_excluded:,}"],
        ["infra errors counted as failure", f"{m.infra_counted_as_failure:,}"],
        ["invalid instances excluded", f"{m.invalid_instances_excluded:,}"],
        ["superseded attempts (retries)", f"{m.superseded_attempts:,}"],
        *[[f"coverage, arm {k}", fmt.pct(v)] for k, v in sorted(m.per_arm_coverage.items())],
    ]
    rows = [[Cell(text=k), Cell(text=v, tone=("pass" if m.coverage_ok else "fail") if k == "coverage" else None)]
            for k, v in facts]
    tables = [Table(id="coverage-table", header=["", ""], rows=rows)]
    if m.missing:
        shown = m.missing[:max_rows]
        tables.append(Table(
            id="missing-cells", header=["arm", "seed", "instance", "reason"],
            rows=[[Cell(text=c.arm), Cell(text=str(c.seed)), Cell(text=c.instance_id), Cell(text=c.reason)]
                  for c in shown],
            note="" if len(m.missing) <= max_rows else f"First {max_rows} of {len(m.missing):,} missing cells shown; "
            "all are in analysis.json.",
        ))
    warn = [] if m.coverage_ok else [f"Coverage {fmt.pct(m.coverage)} is below the preregistered "
                                     f"{fmt.pct(m.coverage_threshold)}; see the decision's reasons for how the plan treats this."]
    return Section(id="missing", title="Coverage and missing data", tables=tables, warnings=warn)
