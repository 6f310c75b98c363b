"""The "Can this verdict be trusted?" section: assay-sensitivity checks, preregistration checks (git anchor,
signature) and the CONSORT-NI items the analysis covers. Formatting only: every entry is a field of
``AnalysisResult`` (``assay_checks``, ``prereg_checks``, ``consort``)."""

from __future__ import annotations

from evalsuite.schema import AnalysisResult, Check
from reports.model import Cell, Section, Table, Tone

_TONE: dict[str, Tone | None] = {"pass": "pass", "fail": "fail", "not_available": "na"}
_WORD = {"pass": "passed", "fail": "FAILED", "not_available": "not available"}


def _check_rows(checks: list[Check]) -> list[list[Cell]]:
    return [[Cell(text=c.name), Cell(text=_WORD[c.status], tone=_TONE[c.status]), Cell(text=c.detail)] for c in checks]


def assurance_section(a: AnalysisResult) -> Section:
    tables = []
    if a.assay_checks:
        tables.append(Table(id="assay-checks", header=["check", "result", "detail"], rows=_check_rows(a.assay_checks),
                            caption="Assay sensitivity: could this evaluation have shown a loss?"))  # fmt: skip
    if a.prereg_checks:
        tables.append(Table(id="prereg-checks", header=["check", "result", "detail"],
                            rows=_check_rows(a.prereg_checks),
                            caption="Preregistration: is the frozen plan the one committed before training?"))  # fmt: skip
    if a.consort:
        tables.append(Table(
            id="consort-ni", header=["CONSORT-NI item", "topic", "covered", "where / what"],
            rows=[[Cell(text=i.item), Cell(text=i.topic), Cell(text="yes" if i.covered else "no",
                                                               tone="pass" if i.covered else "fail"),
                   Cell(text=i.detail)] for i in a.consort],
            caption="CONSORT extension for non-inferiority trials (Piaggio et al., JAMA 2012): items this report covers.",
        ))  # fmt: skip
    if not tables:
        return Section(id="assurance", title="Can this verdict be trusted?", available=False,
                       absent="This analysis has no assay-sensitivity, preregistration or CONSORT entries.")  # fmt: skip
    failed = [c.name for c in [*a.assay_checks, *a.prereg_checks] if c.status == "fail"]
    warn = [f"Failed checks: {', '.join(failed)}; the verdict's reasons say what they change."] if failed else []
    passed = [c.name for c in a.prereg_checks if c.status == "pass"]
    intro = (f"Preregistration checks passed: {', '.join(passed) or 'none'}. " if a.prereg_checks else "") + (
        "A check that is not available was not possible for this run (e.g. a record frozen without a git anchor).")
    return Section(id="assurance", title="Can this verdict be trusted?", intro=intro, tables=tables, warnings=warn)
