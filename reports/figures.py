"""Figures for the HTML report: matplotlib (Agg) rendered to inline SVG text.

Each function takes already-computed numbers (from the view model) and returns an ``<svg>…</svg>`` string with no
XML prologue, no external references and element ids prefixed per figure, so several figures can sit in one HTML
page. Text stays text (``svg.fonttype='none'``), which keeps files small and searchable. Nothing here computes a
statistic; a figure shows exactly the estimates and intervals it is given.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Okabe–Ito, readable for colour-blind readers.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
PASS_COLOUR, FAIL_COLOUR, NA_COLOUR = "#009E73", "#D55E00", "#777777"
_RC: Any = {
    "svg.fonttype": "none",
    "svg.hashsalt": "tgsuite-report",
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_fig_counter = itertools.count()


@dataclass(frozen=True)
class ForestRow:
    """One row of the forest plot: an estimate, its two-sided CI and the criterion's threshold line."""

    label: str
    estimate: float | None
    lo: float | None
    hi: float | None
    threshold: float | None
    passed: bool | None


@dataclass(frozen=True)
class Series:
    """One line: ``x``/``y`` values, optional band (``lo``/``hi``), a label and a style."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    lo: Sequence[float] | None = None
    hi: Sequence[float] | None = None
    colour: str | None = None
    thin: bool = False


def _to_svg(fig: plt.Figure, prefix: str) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)  # RDF boilerplate only
    # Make every id unique to this figure so several inline SVGs never collide.
    text = re.sub(r'id="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})", text)
    text = re.sub(r'xlink:href="#([^"]+)"', lambda m: f'xlink:href="#{prefix}-{m.group(1)}"', text)
    return text.strip()


def _prefix(name: str) -> str:
    return f"fig{next(_fig_counter)}-{re.sub(r'[^a-zA-Z0-9]', '', name)[:20]}"


def forest_plot(rows: Sequence[ForestRow], *, xlabel: str = "difference, treatment − baseline (pp)") -> str:
    """Estimates with CIs, one row per criterion; a dashed tick per row marks its threshold (margin or X)."""
    with plt.rc_context(_RC):
        height = 0.6 + 0.45 * max(1, len(rows))
        fig, ax = plt.subplots(figsize=(7.0, height))
        ax.axvline(0.0, color="#444444", lw=0.8)
        for i, r in enumerate(reversed(rows)):
            colour = NA_COLOUR if r.passed is None else (PASS_COLOUR if r.passed else FAIL_COLOUR)
            if r.lo is not None and r.hi is not None:
                ax.plot([100 * r.lo, 100 * r.hi], [i, i], color=colour, lw=2.2, solid_capstyle="butt")
            if r.estimate is not None:
                ax.plot([100 * r.estimate], [i], "o", color=colour, ms=6)
            if r.threshold is not None:
                ax.plot([100 * r.threshold] * 2, [i - 0.35, i + 0.35], color="#222222", ls="--", lw=1.2)
        ax.set_yticks(range(len(rows)), [r.label for r in reversed(rows)])
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", color="#e5e5e5", lw=0.6)
        ax.set_axisbelow(True)
        return _to_svg(fig, _prefix("forest"))


def line_chart(
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    shade_from: float | None = None,
    y_is_rate: bool = True,
    legend: bool = True,
) -> str:
    """Lines (thick for means, thin for seeds) with optional CI bands and a shaded window from ``shade_from``."""
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(6.2, 3.0))
        if shade_from is not None:
            ax.axvspan(shade_from, max((max(s.x) for s in series if len(s.x)), default=shade_from), color="#f0f0f0")
        for s in series:
            scale = 100.0 if y_is_rate else 1.0
            y = [scale * v for v in s.y]
            ax.plot(s.x, y, color=s.colour, lw=0.8 if s.thin else 2.0, alpha=0.45 if s.thin else 1.0,
                    label=None if s.thin else s.label, marker=None if s.thin or len(s.x) > 12 else "o", ms=4)
            if s.lo is not None and s.hi is not None:
                ax.fill_between(s.x, [scale * v for v in s.lo], [scale * v for v in s.hi], color=s.colour, alpha=0.15)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel + (" (%)" if y_is_rate else ""))
        if title:
            ax.set_title(title, fontsize=10, loc="left")
        ax.grid(color="#e5e5e5", lw=0.6)
        ax.set_axisbelow(True)
        if legend and any(not s.thin for s in series):
            ax.legend(frameon=False, fontsize=8, loc="best")
        return _to_svg(fig, _prefix(title or ylabel))


def arm_colours(arms: Sequence[str]) -> Mapping[str, str]:
    """A stable colour per arm, in the order given."""
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(arms)}
