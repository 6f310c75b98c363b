"""The report's view model: display-ready text built from ``AnalysisResult`` and friends, consumed by templates.

Every value here is already formatted (``reports.format``); templates only lay it out. A section whose data is
absent carries ``available=False`` and an ``absent`` sentence saying so plainly ("not run in this study"), so the
template shows the reason instead of hiding the section. Nothing here is computed beyond formatting and the
descriptive window statistic of training logs documented in ``reports.training``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Tone = Literal["pass", "fail", "na", "warn"]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Cell(_View):
    """One table cell: text plus an optional tone (colour) and a tooltip."""

    text: str
    tone: Tone | None = None
    title: str = ""


class Table(_View):
    """A plain table: header and rows of cells, with an optional caption and footnote."""

    id: str
    header: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    note: str = ""


class Section(_View):
    """A block of the report. ``available=False`` renders the ``absent`` sentence instead of content."""

    id: str
    title: str
    intro: str = ""
    available: bool = True
    absent: str = ""
    tables: list[Table] = Field(default_factory=list)
    figures: list[Figure] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class Figure(_View):
    svg: str  # trusted: produced by reports.figures from numbers, inserted with |safe
    caption: str


class VerdictView(_View):
    verdict: Literal["SHIP", "NO-SHIP", "INCONCLUSIVE", "NO PREREGISTERED DECISION"]
    tone: Tone
    headline: str
    rule: str
    criterion_reasons: list[Cell]
    decision_reasons: list[str]
    claims: str


class KeyValue(_View):
    key: str
    value: str
    tone: Tone | None = None


class EpisodeRow(_View):
    """One row of the per-episode table (also embedded as compact JSON for paging in the browser)."""

    run: str
    instance: str
    repo: str
    arm: str
    seed: int
    attempt: int
    status: str
    failure: str
    resolved: bool
    behaviour: bool | None  # None: not judged (graded patches without a conversation, ``reports.judged``)
    joint: bool | None
    difficulty: str
    tier: str
    link: str | None  # relative href of the trajectory page, None when no page was written


class EpisodesView(_View):
    available: bool
    absent: str = ""
    n_total: int = 0
    n_pages: int = 0
    page_policy: str = ""
    first_rows: list[EpisodeRow] = Field(default_factory=list)
    rows_json: list[list[str | int | bool | None]] = Field(default_factory=list)
    counts: Table | None = None


class ReportView(_View):
    title: str
    subtitle: str
    generated_at: str
    facts: list[KeyValue]
    verdict: VerdictView
    warnings: list[str]
    sections: list[Section]
    episodes: EpisodesView
    nav: list[tuple[str, str]]


class MessageView(_View):
    index: int
    role: str
    turn: int
    content: str
    is_hint: bool
    truncated: bool
    tool_calls: list[KeyValue]
    tool_name: str
    n_lines: int = 0


class DiffLine(_View):
    kind: Literal["add", "del", "hunk", "meta", "ctx"]
    text: str


class TrajectoryView(_View):
    title: str
    back_href: str
    facts: list[KeyValue]
    behaviour: list[Table]
    messages: list[MessageView]
    discarded: list[MessageView]
    trajectory_error: str | None
    final_message: str | None
    diff: list[DiffLine] | None
    grade: list[KeyValue]
    tests: Table | None
    logs: list[KeyValue]


Section.model_rebuild()
