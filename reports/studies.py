"""Training curves and the exploratory studies: noisy feedback, equal compute, "can do vs does do".

Study numbers come from ``AnalysisResult.exploratory``; a study that was not run says so. Training curves come from
the training runs' ``metrics.jsonl`` (see ``reports.training`` for the one descriptive statistic computed there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from evalsuite.schema import AnalysisResult, NoisyFeedbackResult, RateCI
from reports import figures, training
from reports import format as fmt
from reports.model import Cell, Figure, Section, Table

NOT_RUN = "Not run in this study."
KIND_ORDER = {"correct": 0, "irrelevant": 1, "wrong": 2}


def ordered_arms(preferred: Sequence[str], present: Iterable[str]) -> list[str]:
    """Arms in a stable order (treatment, baseline, then the rest sorted) so colours match across figures."""
    present = set(present)
    return [a for a in preferred if a in present] + sorted(present - set(preferred))


def training_section(
    runs: Mapping[str, Mapping[str, list[dict[str, float]]]] | None,
    *,
    arm_order: Sequence[str] = (),
    window: int = training.DEFAULT_WINDOW,
) -> Section:
    if not runs:
        return Section(id="training", title="Training curves", available=False,
                       absent="No training metrics were given to the report (pass --training ARM:SEED=RUN_DIR), "
                       "so training curves are not shown.")
    arms = ordered_arms(arm_order, runs)
    colours = figures.arm_colours(arms)
    figs, rows = [], []
    for candidates, title in training.CURVE_METRICS:
        key = training.pick_key(runs, candidates)
        curves = [training.arm_curves(arm, key, runs[arm]) for arm in arms]
        series = []
        for c in curves:
            series += [figures.Series(label=f"{c.arm} s{s.seed}", x=s.steps, y=s.values, colour=colours[c.arm],
                                      thin=True) for s in c.seeds if s.steps]
            if c.mean_steps:
                series.append(figures.Series(label=f"{c.arm} (mean of seeds)", x=c.mean_steps, y=c.mean_values,
                                             colour=colours[c.arm]))
            rows += _window_rows(c, title, window)
        if not series:
            figs.append(Figure(svg="", caption=f"{title}: no training run logged {' or '.join(candidates)}."))
            continue
        last = [c.mean_steps[-window] for c in curves if len(c.mean_steps) >= window]
        figs.append(Figure(
            svg=figures.line_chart(series, xlabel="training step", ylabel=title, title=title,
                                   shade_from=min(last) if last else None),
            caption=f"{title} ('{key}') per training step: thick = mean over seeds, thin = each seed; the shaded "
            f"area is the last {window} steps used in the table below."))
    table = Table(id="training-window", header=["metric", "arm", "seed", f"last {window} logged steps: mean ± std",
                                                "steps"], rows=rows,
                  caption=f"Mean ± std (ddof = 0) over the last {window} logged steps, as the paper reports it "
                  "(METHOD §6.11). Descriptive: the across-step std is not an uncertainty of the arm's effect.")
    return Section(id="training", title="Training curves", figures=figs,
                   tables=[table, *_reward_table(runs, arms, window)])


def _reward_table(runs: Mapping[str, Mapping[str, list[dict[str, float]]]], arms: Sequence[str],
                  window: int) -> list[Table]:
    """Per arm and reward term: R_k and its weighted contribution sign·w·R_k, last-window mean of the seed mean."""
    terms = training.reward_terms(runs)
    if not terms:
        return []
    rows = []
    for arm in arms:
        for term in terms:
            cells = [Cell(text=arm), Cell(text=term)]
            for key in (f"reward/{term}", f"{training.CONTRIB_PREFIX}{term}"):
                c = training.arm_curves(arm, key, runs[arm])
                w = training.window_stat(c.mean_steps, c.mean_values, window)
                cells.append(Cell(text=fmt.mean_std(w.mean, w.std, as_pct=False) if w else f"{fmt.DASH} (not logged)"))
            rows.append(cells)
    return [Table(id="training-reward-terms", header=["arm", "reward term", "R_k (mean ± std)",
                                                      "contribution sign·w·R_k (mean ± std)"], rows=rows,
                  caption=f"The reward's breakdown per term over the last {window} logged steps (mean over seeds "
                  "at each step, then mean ± std over steps, ddof = 0). Contributions sum to reward/total; each "
                  "term's scale and sign: repro/rewards.py.")]


def _window_rows(c: training.ArmCurves, title: str, window: int) -> list[list[Cell]]:
    rows = []
    for s in [*c.seeds, None]:
        steps, vals, seed = (s.steps, s.values, s.seed) if s else (c.mean_steps, c.mean_values, "mean of seeds")
        w = training.window_stat(steps, vals, window)
        rows.append([
            Cell(text=title), Cell(text=c.arm), Cell(text=str(seed)),
            Cell(text=fmt.mean_std(w.mean, w.std) if w else f"{fmt.DASH} (not logged)"),
            Cell(text=f"{fmt.num(w.first_step, digits=0)}–{fmt.num(w.last_step, digits=0)} (n = {w.n})" if w else fmt.DASH),
        ])
    return rows


def _x_positions(nf: NoisyFeedbackResult) -> tuple[dict[str, float], str]:
    if all(r.wrong_fraction is not None for r in nf.rows):
        return {r.feedback_kind: float(r.wrong_fraction or 0.0) for r in nf.rows}, "fraction of wrong hints"
    kinds = sorted({r.feedback_kind for r in nf.rows}, key=lambda k: (KIND_ORDER.get(k, 9), k))
    return {k: float(i) for i, k in enumerate(kinds)}, "hint quality: " + ", ".join(f"{i} = {k}" for i, k in enumerate(kinds))


def noisy_section(a: AnalysisResult) -> Section:
    nf = a.exploratory.noisy_feedback
    if nf is None or not nf.rows:
        return Section(id="noisy", title="Noisy feedback", available=False, absent=NOT_RUN)
    xpos, xlabel = _x_positions(nf)
    colours = figures.arm_colours(ordered_arms(list(a.arms.values()), {r.arm for r in nf.rows}))
    figs = []
    for ep in sorted({r.endpoint for r in nf.rows}):
        series = []
        for arm, colour in colours.items():
            pts = sorted((xpos[r.feedback_kind], r.rate) for r in nf.rows if r.arm == arm and r.endpoint == ep
                         and r.rate.rate is not None)
            if pts:
                y = [float(p.rate or 0.0) for _, p in pts]  # rate is not None here (filtered above)
                lo = [p.ci_low if p.ci_low is not None else v for (_, p), v in zip(pts, y, strict=True)]
                hi = [p.ci_high if p.ci_high is not None else v for (_, p), v in zip(pts, y, strict=True)]
                series.append(figures.Series(label=arm, x=[x for x, _ in pts], y=y, lo=lo, hi=hi, colour=colour))
        if series:
            figs.append(Figure(svg=figures.line_chart(series, xlabel=xlabel, ylabel=ep, title=f"{ep} vs hint quality"),
                               caption=f"{ep} as the hints get worse; band = the rate's CI from the analysis."))
    rows = [[Cell(text=r.arm), Cell(text=r.feedback_kind), Cell(text=fmt.pct(r.wrong_fraction, digits=0)),
             Cell(text=r.endpoint), Cell(text=f"{fmt.pct(r.rate.rate)} {fmt.interval(r.rate.ci_low, r.rate.ci_high, scale='pct')}"),
             Cell(text=f"{r.rate.n:,}")] for r in nf.rows]
    trends = [[Cell(text=t.arm), Cell(text=t.endpoint), Cell(text=t.method), Cell(text=fmt.num(t.statistic)),
               Cell(text=fmt.pvalue(t.p_value)), Cell(text=fmt.num(t.slope, digits=4))] for t in nf.trends]
    tables = [Table(id="noisy-table", header=["arm", "feedback", "wrong share", "endpoint", "rate (CI)", "n"], rows=rows)]
    if trends:
        tables.append(Table(id="noisy-trends", header=["arm", "endpoint", "trend test", "statistic", "p", "slope"],
                            rows=trends))
    return Section(id="noisy", title="Noisy feedback (exploratory)", figures=figs, tables=tables, notes=list(nf.notes))


def equal_compute_section(a: AnalysisResult) -> Section:
    ec = a.exploratory.equal_compute
    if ec is None:
        return Section(id="compute", title="Equal compute", available=False, absent=NOT_RUN)
    comp = [[Cell(text=r.arm), Cell(text=str(r.seed)), Cell(text=f"{r.rollout_tokens:,}"),
             Cell(text=f"{r.teacher_forward_tokens:,}"), Cell(text=f"{r.trainer_tokens:,}"),
             Cell(text=f"{r.flops:.3g}"), Cell(text=fmt.duration(r.wall_s)),
             Cell(text=f"{r.peak_memory_bytes / 2**30:.2f} GiB"), Cell(text=str(r.tuning_trials))] for r in ec.compute]
    ratios = [[Cell(text=k), *[Cell(text=f"{ec.totals.get(arm, {}).get(k, float('nan')):.4g}") for arm in sorted(ec.totals)],
               Cell(text=f"{v:.3f}×")] for k, v in sorted(ec.ratios.items())]
    cmp = [[Cell(text=c.endpoint), Cell(text=c.compute_axis), Cell(text=f"{c.budget:.3g}"),
            Cell(text=fmt.pct(c.treatment_rate)), Cell(text=fmt.pct(c.baseline_rate)), Cell(text=fmt.pp(c.estimate)),
            Cell(text=fmt.interval(c.ci_low, c.ci_high)), Cell(text=c.method or fmt.DASH), Cell(text=c.note or fmt.DASH)]
           for c in ec.comparisons]
    tables = [Table(id="compute-table", header=["arm", "seed", "rollout tokens", "teacher tokens", "trainer tokens",
                                                "FLOPs", "wall", "peak memory", "tuning trials"], rows=comp)]
    if ratios:
        tables.append(Table(id="compute-ratios", header=["quantity", *[f"{arm} (mean over seeds)" for arm in sorted(ec.totals)],
                                                         "treatment / baseline"], rows=ratios))
    if cmp:
        tables.append(Table(id="compute-matched", header=["endpoint", "axis", "budget", "treatment", "baseline", "Δ",
                                                          "CI", "method", "note"], rows=cmp,
                            caption="Arms compared at the same compute budget."))
    return Section(id="compute", title="Equal compute (exploratory)", tables=tables, notes=list(ec.notes))


def can_do_section(a: AnalysisResult) -> Section:
    cds = a.exploratory.can_do_vs_does_do
    if not cds:
        return Section(id="cando", title="Can do vs does do", available=False, absent=NOT_RUN)
    rows = [[Cell(text=cd.arm), Cell(text=f"{cd.n_states:,}"), Cell(text=ch.endpoint),
             Cell(text=f"{ch.a:,} / {ch.b:,} / {ch.c:,} / {ch.d:,}"), Cell(text=fmt.pp(ch.estimate)),
             Cell(text=fmt.interval(ch.ci_low, ch.ci_high)), Cell(text=ch.method), Cell(text=fmt.pvalue(ch.mcnemar_p))]
            for cd in cds for ch in cd.changes]
    notes = [n for cd in cds for n in cd.notes]
    return Section(
        id="cando", title="Can do vs does do (exploratory)", notes=notes,
        intro="The same held-out states answered with the plain prompt and with a corrective prompt. A large gain "
        "from the corrective prompt means the model can do the behaviour but does not do it unprompted.",
        tables=[Table(id="cando-table", header=["arm", "states", "endpoint", "both / corrective only / plain only / "
                                                "neither", "Δ (corrective − plain)", "CI", "method", "McNemar p"],
                      rows=rows)],
    )


def _rate_text(r: RateCI) -> str:
    if r.rate is None:
        return f"{fmt.DASH} (no episodes)"
    se = f", clustered SE {fmt.pp(r.se_clustered)}" if r.se_clustered is not None else ""
    return f"{fmt.pct(r.rate)} {fmt.interval(r.ci_low, r.ci_high, scale='pct')} ({r.successes:g} / {r.n}{se})"


STUDY_TITLES = {"ablations": "ablation arm", "production_loop": "production loop (distill → RL → distill)",
                "generalization": "main arm on unseen-template repositories (never a primary endpoint)"}


def label_rates_section(a: AnalysisResult) -> Section:
    """Ablations and the production loop: per-model held-out rates, each study beside its reference runs."""
    rows_in = a.exploratory.label_rates
    if not rows_in:
        return Section(id="labels", title="Ablations and the production loop", available=False, absent=NOT_RUN)
    rows = []
    for r in rows_in:
        by = {x.endpoint: x for x in r.rates}
        kind = (("reference: the SFT start" if r.study == "generalization" else f"reference: main {r.label} runs "
                 "(RL alone)") if r.reference else STUDY_TITLES[r.study])
        rows.append([Cell(text=r.study), Cell(text=r.label), Cell(text=kind),
                     *[Cell(text=_rate_text(by[e]) if e in by else fmt.DASH) for e in ("behaviour_ok", "code_ok",
                                                                                       "joint_ok")],
                     Cell(text=", ".join(str(s) for s in r.seeds))])
    return Section(
        id="labels", title="Ablations and the production loop (exploratory)" if not any(
            r.study == "generalization" for r in rows_in) else "Generalization tier, ablations and the production "
        "loop (exploratory)",
        intro="Each study model's held-out rates, its seeds' episodes pooled, beside the main runs it changes one "
        "thing of. Wilson 95 % intervals over pooled episodes (they ignore that episodes of one repository or one "
        "seed are correlated; the repository-clustered SE says how much that matters). Descriptive: no test, no "
        "multiplicity control, never part of the decision. The production loop spends more compute than RL alone.",
        tables=[Table(id="labels-table", header=["study", "model", "what it is", "behaviour_ok", "code_ok",
                                                 "joint_ok", "training seeds"], rows=rows)])
