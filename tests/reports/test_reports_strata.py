"""The report's held-out strata: the stratum breakdown says what each stratum measures, and the generalization tier's
rates appear beside the ablations with the SFT start as their reference."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "reports"))
import report_factory as factory  # noqa: E402

from evalsuite.schema import BreakdownRow, Exploratory, LabelRates, RateCI  # noqa: E402
from reports.details import STRATUM_NOTE, breakdowns_section  # noqa: E402
from reports.studies import label_rates_section  # noqa: E402


def _rate(ep: str, k: int, n: int) -> RateCI:
    return RateCI(endpoint=ep, rate=k / n, ci_low=0.0, ci_high=1.0, n=n, successes=k, method="wilson")


def test_the_stratum_breakdown_explains_the_strata() -> None:
    rows = [BreakdownRow(by="stratum", level=lvl, endpoint="code_ok", n_tasks=n, treatment=_rate("code_ok", k, n),
                         baseline=_rate("code_ok", k, n), estimate=0.0, ci_low=-0.1, ci_high=0.1)
            for lvl, n, k in (("twin", 30, 12), ("no_twin", 10, 0))]
    a = factory.analysis("c" * 64).model_copy(update={"breakdowns": rows})
    (tbl,) = [t for t in breakdowns_section(a).tables if t.id == "breakdown-stratum"]
    assert STRATUM_NOTE in (tbl.caption or "") and "recall of a trained fix" in STRATUM_NOTE
    assert [r[0].text for r in tbl.rows] == ["twin", "no_twin"]


def test_the_generalization_tier_is_reported_against_the_sft_start() -> None:
    rates = [_rate(e, 0, 10) for e in ("behaviour_ok", "code_ok", "joint_ok")]
    rows = [LabelRates(study="generalization", label="base", reference=True, seeds=[-1], rates=rates),
            LabelRates(study="generalization", label="tg", seeds=[0, 1, 2, 3, 4], rates=rates)]
    a = factory.analysis("c" * 64).model_copy(update={"exploratory": Exploratory(label_rates=rows)})
    sec = label_rates_section(a)
    assert sec.available and sec.title.startswith("Generalization tier")
    kinds = [r[2].text for r in sec.tables[0].rows]
    assert kinds[0] == "reference: the SFT start" and "never a primary endpoint" in kinds[1]
