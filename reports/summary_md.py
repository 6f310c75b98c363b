"""``summary.md``: the verdict and criteria table as GitHub-flavoured Markdown, for a pull-request comment.

Text that comes from users (plan names, deviation text) is escaped for Markdown tables and inline HTML, so it
cannot break the table or inject markup into the comment.
"""

from __future__ import annotations

import re

from evalsuite.schema import AnalysisResult
from reports import format as fmt
from reports.schema import ReportSummary

ICON = {"SHIP": "✅", "NO-SHIP": "❌", "INCONCLUSIVE": "⚠️"}


def md_escape(text: str) -> str:
    """Escape Markdown table/inline specials and HTML so user text renders literally in a table cell."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = re.sub(r"([\\`*_{}\[\]|#~])", r"\\\1", text)
    return " ".join(text.split())


def summary_markdown(s: ReportSummary, a: AnalysisResult) -> str:
    lines = [
        f"## {ICON[s.verdict]} {s.verdict}: {md_escape(s.plan_name)} (plan v{md_escape(s.plan_version)})",
        "",
        f"Protocol `{fmt.short_hash(s.protocol_hash, 16)}` · estimand {s.estimand} · treatment "
        f"{md_escape(s.arms.get('treatment', '?'))} vs baseline {md_escape(s.arms.get('baseline', '?'))} · "
        f"coverage {fmt.pct(s.coverage)}{'' if s.coverage_ok else ' (below threshold)'} · "
        f"{s.n_deviations} deviation(s)",
        "",
        "| endpoint | criterion | Δ | CI | one-sided lower bound | must exceed | verdict | sensitivity |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c, full in zip(s.criteria, a.criteria, strict=True):
        agree = {True: "agree", False: "**disagree**", None: "—"}[c.sensitivity_agree]
        lines.append(
            f"| {md_escape(c.endpoint)} | {c.kind} | {fmt.pp(c.estimate)} | "
            f"{fmt.interval(c.ci_low, c.ci_high)} ({100 * c.ci_level:g}%) | {fmt.pp(c.lower_one_sided)} | "
            f"{fmt.pp(c.bar)}{' and Δ ≥ ' + fmt.pp(full.threshold) if c.kind == 'dual' else ''} | "
            f"**{c.verdict.replace('_', ' ')}** | {agree} |"
        )
    lines += ["", *[f"- {md_escape(r)}" for r in s.reasons]]
    if s.warnings:
        lines += ["", "**Warnings**", *[f"- {md_escape(w)}" for w in s.warnings]]
    lines += ["", f"{s.n_episodes:,} episodes; open `index.html` in the report folder for the full report."]
    return "\n".join(lines) + "\n"
