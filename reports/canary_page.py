"""The canary report page: the decision, confidence sequences over time, SRM, guardrails, data-quality gates and
the frozen record's preregistration (git anchor) checks (one HTML file).

Input is the JSON form of ``evalsuite.canary.schema.CanaryResult`` as ``tgsuite canary`` writes it
(``canary.json``), read as plain data: this module computes no statistic, it shows the bounds it is given.
Rendering reuses the report's Jinja environment (autoescape, StrictUndefined, ``report.css``) and its inline-SVG
figures (``reports.figures.line_chart``); the page has the same no-network Content-Security-Policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reports.figures import FAIL_COLOUR, NA_COLOUR, PALETTE, Series, line_chart
from reports.render import CSP_PAGE, render_template

TONE = {"PROMOTE": "pass", "ROLLBACK": "fail", "CONTINUE": "warn"}
STATUS_TONE = {"noninferior": "pass", "superior": "pass", "harm": "fail", "inferior": "fail",
               "inconclusive": "warn", "burn_in": "na", "degenerate": "na"}  # fmt: skip
CHECK_TONE = {"pass": "pass", "fail": "fail", "not_available": "na"}
CHECK_WORD = {"pass": "passed", "fail": "FAILED", "not_available": "not available"}


@dataclass(frozen=True)
class Cell:
    text: str
    tone: str = ""


@dataclass(frozen=True)
class Figure:
    svg: str
    caption: str


@dataclass(frozen=True)
class CanaryPageView:
    title: str
    decision: str
    tone: str
    reasons: tuple[str, ...]
    facts: tuple[tuple[str, str], ...]
    metric_figures: tuple[Figure, ...]
    srm_figure: Figure
    guardrail_head: tuple[str, ...]
    guardrail_rows: tuple[tuple[Cell, ...], ...]
    gate_rows: tuple[tuple[Cell, ...], ...]
    prereg_rows: tuple[tuple[Cell, ...], ...]  # empty: the record was analysed in memory (no anchor to verify)
    look_rows: tuple[tuple[Cell, ...], ...]


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _f(x: Any, fmt: str = "+.4f") -> str:
    return "—" if x is None else format(float(x), fmt)


def _metric_figure(looks: Sequence[Mapping[str, Any]], name: str) -> Figure:
    rows = [(lk["elapsed_hours"] / 24.0, next(m for m in lk["metrics"] if m["name"] == name)) for lk in looks]
    x = [t for t, _ in rows]
    ms = [m for _, m in rows]
    shown = [m["status"] not in ("burn_in", "degenerate") for m in ms]  # burn-in looks decide nothing: not drawn
    series = [Series(label="effect and its bounds", x=x,
                     y=[_num(m["effect"]) if ok else math.nan for m, ok in zip(ms, shown, strict=True)],
                     lo=[_num(m["lower"]) if m["lower"] is not None else _num(m["effect"]) for m in ms],
                     hi=[_num(m["upper"]) if m["upper"] is not None else _num(m["effect"]) for m in ms],
                     colour=PALETTE[0]),
              Series(label="no difference", x=x, y=[0.0] * len(x), colour=NA_COLOUR, thin=True)]  # fmt: skip
    bar = ms[-1]["bar"]
    if bar is not None:
        series.append(Series(label="-margin", x=x, y=[float(bar)] * len(x), colour=FAIL_COLOUR, thin=True))
    last = ms[-1]
    svg = line_chart(series, xlabel="days since the canary started", ylabel="oriented effect", title=name,
                     y_is_rate=False, legend=False)  # fmt: skip
    cap = (f"{name} ({last['role']}, {last['scale']}): canary − control oriented so that higher is better. Band: "
           f"running upper bound at alpha {_f(last['alpha_harm'], '.4g')} (ROLLBACK if below 0) and running lower "
           f"bound at alpha_promote ({last['method_ni']}; PROMOTE needs it above the red −margin line). Status at "
           f"the last look: {last['status']}.")  # fmt: skip
    return Figure(svg=svg, caption=cap)


def _srm_figure(looks: Sequence[Mapping[str, Any]]) -> Figure:
    x = [lk["elapsed_hours"] / 24.0 for lk in looks]
    share = [lk["srm"]["canary_units"] / max(1, lk["srm"]["canary_units"] + lk["srm"]["control_units"]) for lk in looks]
    design = looks[-1]["srm"]["expected_share"]
    svg = line_chart([Series(label="observed canary share of units", x=x, y=share, colour=PALETTE[1]),
                      Series(label="design share", x=x, y=[design] * len(x), colour=NA_COLOUR, thin=True)],
                     xlabel="days since the canary started", ylabel="canary share of units", title="SRM",
                     legend=False)  # fmt: skip
    s = looks[-1]["srm"]
    cap = (f"Sample-ratio check: {s['canary_units']} canary / {s['control_units']} control units against a design "
           f"share of {design:g}. Sequential (Dirichlet-multinomial) anytime-valid p = {s['p_anytime']:.3g}; "
           f"{'FLAGGED' if s['flagged'] else 'not flagged'}. The single-look chi-square p ({s['p_chisq']:.3g}) is "
           "for audits only; it is not valid under repeated looks.")  # fmt: skip
    return Figure(svg=svg, caption=cap)


def _guardrail_rows(last: Mapping[str, Any]) -> tuple[tuple[Cell, ...], ...]:
    out = []
    for m in last["metrics"]:
        out.append((Cell(m["name"]), Cell(m["role"]), Cell(f"{m['n_canary']} / {m['n_control']}"),
                    Cell(_f(m["ratio_canary"], ".4f")), Cell(_f(m["ratio_control"], ".4f")), Cell(_f(m["effect"])),
                    Cell(_f(m["lower"])), Cell(_f(m["upper"])), Cell(_f(m["bar"])),
                    Cell(_f(m["p_harm"], ".3g")), Cell(_f(m["p_ni"], ".3g")),
                    Cell(m["status"], STATUS_TONE.get(m["status"], "")), Cell(m["note"])))  # fmt: skip
    return tuple(out)


def _prereg_rows(result: Mapping[str, Any]) -> tuple[tuple[Cell, ...], ...]:
    """One row per anchor check (``canary.json`` written before the checks existed has none)."""
    return tuple((Cell(c["name"]), Cell(CHECK_WORD[c["status"]], CHECK_TONE[c["status"]]), Cell(c["detail"]))
                 for c in result.get("prereg_checks", []))  # fmt: skip


def canary_view(result: Mapping[str, Any]) -> CanaryPageView:
    """The page's view model from a ``CanaryResult`` JSON object."""
    looks = result["looks"]
    last = looks[-1]
    names = [m["name"] for m in last["metrics"]]
    facts = (("plan", f"{result['plan_name']} (sha256 {result['plan_sha256'][:12]}…)"),
             ("frozen record", result.get("record_path") or "passed in memory (no anchor verified)"),
             ("episodes log", f"{result['episodes_path']} ({result['n_episodes']} episodes, {result['n_units']} units)"),
             ("assignments log", result["assignments_path"] or "none (first episode = first exposure)"),
             ("method", result["method"]), ("looks", f"{len(looks)}, the last at {last['as_of']}"),
             ("harm alpha per metric", ", ".join(f"{k} {v:.4g}" for k, v in result["alpha_allocation"].items())))
    return CanaryPageView(
        title=f"Canary {result['plan_name']}", decision=result["decision"], tone=TONE[result["decision"]],
        reasons=tuple(result["reasons"]), facts=facts,
        metric_figures=tuple(_metric_figure(looks, n) for n in names), srm_figure=_srm_figure(looks),
        guardrail_head=("metric", "role", "units canary / control", "ratio canary", "ratio control", "effect",
                        "lower (NI)", "upper (harm)", "−margin", "p harm", "p NI", "status", "note"),
        guardrail_rows=_guardrail_rows(last),
        gate_rows=tuple((Cell(g["name"]), Cell(g["level"], {"ok": "pass", "warn": "warn", "block": "fail"}[g["level"]]),
                         Cell(g["detail"])) for g in last["gates"]),
        prereg_rows=_prereg_rows(result),
        look_rows=tuple((Cell(str(lk["index"])), Cell(lk["as_of"]), Cell(f"{lk['units']['canary']} / "
                         f"{lk['units']['control']}"), Cell(lk["decision"], TONE[lk["decision"]]),
                         Cell("; ".join(lk["reasons"]))) for lk in looks),
    )  # fmt: skip


def render_canary_page(result: Mapping[str, Any]) -> str:
    """Self-contained HTML for one canary (no script, no network)."""
    return render_template("canary.html", view=canary_view(result), csp=CSP_PAGE)
