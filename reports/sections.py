"""Confirmatory sections of the report, built from ``AnalysisResult`` (formatting only, no statistics).

Verdict banner, criteria table and forest plot, per-arm outcomes with the behaviour × code 2×2 tables, the
variance split, sensitivity analyses with disagreement flags, exploratory breakdowns and secondary endpoints,
power and missing data. Every number shown is a field of ``AnalysisResult``; the only arithmetic is turning a 2×2
table's counts into row percentages for reading.
"""

from __future__ import annotations

from collections.abc import Mapping

from evalsuite.schema import AnalysisResult, ArmSummary, CriterionResult, JointTable, RateCI
from protocols.schema import at_least
from reports import figures
from reports import format as fmt
from reports.judged import JUDGED_ENDPOINTS, NOT_JUDGED, NOT_JUDGED_WHY, TOUCHED_CAPTION, touched_text
from reports.model import Cell, Figure, Section, Table, Tone, VerdictView

ENDPOINT_LABEL = {
    "behaviour_ok": "behaviour OK (style/protocol checkers pass)",
    "code_ok": "code OK (hidden tests pass)",
    "joint_ok": "joint OK (both)",
}
KIND_LABEL = {
    "superiority": "superiority: lower bound > 0",
    "superiority_margin": "superiority by X: lower bound > X",
    "noninferiority": "non-inferiority: lower bound > −δ",
    "dual": "dual: lower bound > 0 and estimate ≥ X",
}
KIND_SHORT = {"superiority": "superiority", "superiority_margin": "superiority by X",
              "noninferiority": "non-inferiority", "dual": "dual (bound and estimate)"}
VERDICT_TONE: dict[str, Tone] = {"pass": "pass", "fail": "fail", "not_evaluated": "na"}


def label(endpoint: str) -> str:
    return ENDPOINT_LABEL.get(endpoint, endpoint)


def _bar_text(c: CriterionResult) -> str:
    if c.kind == "noninferiority":
        return f"> {fmt.pp(c.bar)} (margin δ = {fmt.pp(c.margin, signed=False)})"
    if c.kind == "dual":
        return f"> {fmt.pp(0.0)} and estimate ≥ {fmt.pp(c.threshold)}"
    return f"> {fmt.pp(c.bar)}"


def distinct_reasons(texts: list[str], endpoint: str | None = None) -> list[str]:
    """Each reason once: a leading ``"<endpoint>: "`` is dropped (the line already names the endpoint), exact
    repeats are dropped, and so is a reason that only wraps another one of the list (e.g. "no valid lower bound
    (X)" next to X)."""
    prefix = f"{endpoint}: " if endpoint else None
    out: list[str] = []
    for t in texts:
        t = t[len(prefix):] if prefix and t.startswith(prefix) else t
        if t not in out:
            out.append(t)
    return [t for t in out if not any(o != t and o in t for o in out)]


def criterion_reason(c: CriterionResult) -> Cell:
    """One sentence per criterion for the banner: the bound, the bar it must clear and the verdict."""
    level = f"{100 * (1 - c.alpha_one_sided):g}%"
    head = f"{c.endpoint} — {KIND_LABEL[c.kind]}"
    if c.verdict == "not_evaluated" or c.lower_one_sided is None:
        why = "; ".join(distinct_reasons(list(c.notes), c.endpoint)) or "no estimate could be formed"
        return Cell(text=f"{head}: not evaluated ({why})", tone="na")
    cmp = ">" if c.lower_one_sided > c.bar else "≤"
    text = f"{head}: one-sided {level} lower bound {fmt.pp(c.lower_one_sided)} {cmp} {fmt.pp(c.bar)}"
    if c.kind == "dual" and c.estimate is not None:
        cmp2 = "≥" if at_least(c.estimate, c.threshold) else "<"
        text += f", estimate {fmt.pp(c.estimate)} {cmp2} {fmt.pp(c.threshold)}"
    return Cell(text=f"{text} → {c.verdict.upper()}", tone=VERDICT_TONE[c.verdict])


def verdict_view(a: AnalysisResult) -> VerdictView:
    v = {"SHIP": "SHIP", "NO_SHIP": "NO-SHIP", "INCONCLUSIVE": "INCONCLUSIVE"}[a.decision.verdict]
    tone: Tone = {"SHIP": "pass", "NO-SHIP": "fail", "INCONCLUSIVE": "warn"}[v]  # type: ignore[assignment]
    headline = {
        "SHIP": "Every preregistered criterion passed.",
        "NO-SHIP": "At least one preregistered criterion failed.",
        "INCONCLUSIVE": "The decision could not be made as planned (see the reasons below).",
    }[v]
    claims = ", ".join(a.decision.claims) or "none"
    return VerdictView(
        verdict=v,  # type: ignore[arg-type]
        tone=tone,
        headline=headline,
        rule=a.decision.rule,
        criterion_reasons=[criterion_reason(c) for c in a.criteria],
        decision_reasons=_new_reasons(a),
        claims=f"Endpoints individually claimed ({a.decision.claims_procedure.replace('_', ' ')}): {claims}",
    )


def _said_in_banner(c: CriterionResult) -> list[str]:
    """The notes of ``c`` that its banner line already says (those of a criterion that was not evaluated)."""
    return list(c.notes) if c.verdict == "not_evaluated" or c.lower_one_sided is None else []


def _new_reasons(a: AnalysisResult) -> list[str]:
    """The decision's reasons that the criterion lines do not already say: a reason repeating a criterion's note
    (the bound of an evaluated criterion, or why one was not evaluated) or wrapping one is dropped."""
    said = [t for c in a.criteria for t in distinct_reasons(list(c.notes), c.endpoint)]
    return [r for r in distinct_reasons(list(a.decision.reasons))
            if not any(t in r for t in said)]


def _criterion_row(c: CriterionResult) -> list[Cell]:
    level = f"{100 * c.ci_level:g}%"
    return [
        Cell(text=c.endpoint, title=label(c.endpoint)),
        Cell(text=KIND_SHORT[c.kind], title=KIND_LABEL[c.kind]),
        Cell(text=fmt.pp(c.estimate)),
        Cell(text=f"{fmt.interval(c.ci_low, c.ci_high)} ({level})"),
        Cell(text=f"{fmt.pp(c.lower_one_sided)} (α = {c.alpha_one_sided:g})"),
        Cell(text=_bar_text(c)),
        Cell(text=fmt.pvalue(c.p_value)),
        Cell(text=c.verdict.replace("_", " ").upper(), tone=VERDICT_TONE[c.verdict]),
        Cell(text="yes" if c.claimed else "no"),
        Cell(text=f"{c.method}; seeds T/C {c.n_seeds_treatment}/{c.n_seeds_baseline}, {c.n_tasks} tasks, "
             f"{c.n_repos} repos, K = {c.k_episodes}; df {fmt.num(c.df, digits=1)}"),
    ]


def _criterion_notes(c: CriterionResult) -> list[str]:
    """Notes under the criteria table: what the banner does not already say about ``c``."""
    if _said_in_banner(c):
        return []
    notes = [n if n.startswith(c.endpoint) else f"{c.endpoint}: {n}" for n in distinct_reasons(list(c.notes))]
    if c.degenerate:
        notes.append(f"{c.endpoint}: the variance estimate was 0; fallback used: {c.fallback_used or 'none recorded'}")
    return notes


def criteria_section(a: AnalysisResult) -> Section:
    table = Table(
        id="criteria-table",
        header=["endpoint", "criterion", "Δ estimate", "two-sided CI", "one-sided lower bound", "must be",
                "p (one-sided)", "verdict", "claimed", "method and design"],
        rows=[_criterion_row(c) for c in a.criteria],
        caption="Δ = treatment − baseline, in percentage points (pp). The decision uses the one-sided lower bound.",
    )
    rows = [
        figures.ForestRow(label=c.endpoint, estimate=c.estimate, lo=c.ci_low, hi=c.ci_high,
                          threshold=c.bar if c.kind != "dual" else c.threshold,
                          passed=None if c.verdict == "not_evaluated" else c.verdict == "pass")
        for c in a.criteria
    ]
    fig = Figure(
        svg=figures.forest_plot(rows),
        caption="Forest plot: dot = estimate, bar = two-sided CI, dashed tick = the criterion's margin or "
        "threshold (for non-inferiority −δ; for 'dual' X). Green passed, red failed, grey not evaluated.",
    )
    return Section(id="criteria", title="Criteria", tables=[table], figures=[fig],
                   notes=[n for c in a.criteria for n in _criterion_notes(c)],
                   intro=f"Estimand: {a.estimand}. Arms: treatment = {a.arms.get('treatment', '?')}, "
                   f"baseline = {a.arms.get('baseline', '?')}.")


def rate_text(r: RateCI | None) -> str:
    """A rate with its CI and n for a table cell: '50.0% [15.0%, 85.0%] (n = 4)'."""
    if r is None:
        return fmt.DASH
    return f"{fmt.pct(r.rate)} {fmt.interval(r.ci_low, r.ci_high, scale='pct')} (n = {r.n:,})"


def _joint_table(s: ArmSummary) -> Table:
    return joint_table_view(s.arm, f"{s.arm} ({s.role})", s.joint_table)


def joint_table_view(arm: str, label: str, jt: JointTable) -> Table:
    """The behaviour × code 2×2 table of one arm, with each count as a share of all scored episodes."""
    n = jt.n

    def cell(k: int, tone: Tone, title: str = "") -> Cell:
        return Cell(text=f"{k:,} ({fmt.pct(k / n) if n else fmt.DASH})", tone=tone, title=title)

    return Table(
        id=f"joint-{arm}", header=["", "code OK", "code failed"],
        rows=[[Cell(text="behaviour OK"), cell(jt.both, "pass"),
               cell(jt.behaviour_only, "warn", "the style is right but the task failed")],
              [Cell(text="behaviour failed"), cell(jt.code_only, "warn"), cell(jt.neither, "fail")]],
        caption=f"{label}: behaviour × code, {n:,} scored episodes. Top right = "
        "'the style is right but the task failed'.",
    )


def outcomes_section(a: AnalysisResult, unjudged: frozenset[str] = frozenset(),
                     touched: Mapping[str, tuple[int, int]] | None = None) -> Section:
    """Per-arm rates, 2×2 tables and per-seed rates; ``unjudged``: plan arms whose episodes had no conversation
    (``reports.judged``), shown "n/a" for behaviour and joint instead of 0; ``touched``: plan arm → (graded patches
    that touched tests, graded patches), counted from the episodes (a column when given)."""
    if not a.arm_summaries:
        return Section(id="outcomes", title="Outcomes per arm", available=False,
                       absent="The analysis carries no per-arm summaries.")
    endpoints = sorted({r.endpoint for s in a.arm_summaries for r in s.rates})

    def rate(s: ArmSummary, e: str) -> str:
        if s.arm in unjudged and e in JUDGED_ENDPOINTS:
            return NOT_JUDGED
        return rate_text(next((r for r in s.rates if r.endpoint == e), None))

    extra = ["tests touched"] if touched is not None else []
    rates = Table(
        id="arm-rates", header=["arm", "role", "seeds", "scored episodes", *endpoints, *extra],
        rows=[[Cell(text=s.arm), Cell(text=s.role), Cell(text=", ".join(map(str, s.seeds))),
               Cell(text=f"{s.n_scored_episodes:,}"), *[Cell(text=rate(s, e)) for e in endpoints],
               *([Cell(text=touched_text(touched.get(s.arm, (0, 0))))] if touched is not None else [])]
              for s in a.arm_summaries],
        caption="Rates with their CI as computed by the analysis (method per rate: "
        + ", ".join(sorted({r.method for s in a.arm_summaries for r in s.rates})) + ")."
        + (" " + TOUCHED_CAPTION if touched is not None else ""),
    )
    tables = [rates]
    tables += [_joint_table(s) for s in a.arm_summaries if s.arm not in unjudged]
    seed_eps = sorted({r.endpoint for s in a.arm_summaries for r in s.per_seed})
    seeds = []
    for s in a.arm_summaries:
        for seed in sorted({r.seed for r in s.per_seed}):
            got = {r.endpoint: r for r in s.per_seed if r.seed == seed}
            seeds.append([Cell(text=s.arm), Cell(text=str(seed)), *[
                Cell(text=f"{fmt.pct(got[e].rate)} {fmt.interval(got[e].ci_low, got[e].ci_high, scale='pct')} "
                     f"(n = {got[e].n:,})" if e in got else fmt.DASH) for e in seed_eps]])
    if seeds:
        tables.append(Table(id="per-seed", header=["arm", "training seed", *seed_eps], rows=seeds,
                            caption="Per training seed (one checkpoint each), with each rate's CI."))
    notes = [f"{', '.join(sorted(unjudged))}: behaviour and joint are {NOT_JUDGED} ({NOT_JUDGED_WHY})."] \
        if unjudged else []
    return Section(id="outcomes", title="Outcomes per arm", tables=tables, notes=notes)
