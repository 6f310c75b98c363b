"""The behaviour-tiers report panel: absent ("Not run in this study.") and present (table, figure, notes), and in
the rendered HTML report."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "reports"))
import report_factory as factory  # noqa: E402

from evalsuite.schema import AnalysisResult, BehaviourTierRow, BehaviourTiersResult, Exploratory, RateCI  # noqa: E402
from reports.build import build_report  # noqa: E402
from reports.tiers import behaviour_tiers_section  # noqa: E402


def _rate(k: int, n: int, lo: float, hi: float) -> RateCI:
    return RateCI(endpoint="x", successes=k, n=n, rate=k / n if n else None, ci_low=lo if n else None,
                  ci_high=hi if n else None)


def _result() -> BehaviourTiersResult:
    rows = [BehaviourTierRow(tier="ask_first@v1", level="tension", arm="base", compliance=_rate(1, 8, 0.02, 0.47),
                             compliance_applicable=_rate(0, 0, 0, 0), resolved=_rate(2, 8, 0.07, 0.59)),
            BehaviourTierRow(tier="ask_first@v1", level="tension", arm="tg", seeds=[0, 1],
                             compliance=_rate(5, 8, 0.31, 0.86), compliance_applicable=_rate(3, 6, 0.19, 0.81),
                             resolved=_rate(1, 8, 0.02, 0.47))]
    return BehaviourTiersResult(rows=rows, task_set="heldout_unseen_tiers", n_instances=4, notes=["a note"])


def test_panel_absent_says_not_run() -> None:
    for ex in (Exploratory(), Exploratory(behaviour_tiers=BehaviourTiersResult(rows=[]))):
        sec = behaviour_tiers_section(AnalysisResult.model_construct(exploratory=ex))
        assert not sec.available and sec.absent.startswith("Not run in this study.") and not sec.tables


def test_panel_with_results() -> None:
    sec = behaviour_tiers_section(AnalysisResult.model_construct(exploratory=Exploratory(behaviour_tiers=_result())))
    assert sec.available and sec.id == "tiers" and len(sec.figures) == 1 and "<svg" in sec.figures[0].svg
    (table,) = sec.tables
    texts = [[c.text for c in row] for row in table.rows]
    assert texts[0][:3] == ["tension: ask_first@v1", "base", "—"]
    assert texts[1][1:5] == ["tg", "0, 1", "62.5% [31.0%, 86.0%]", "5 / 8"]
    assert texts[0][5] == "— (n = 0)" and texts[1][5] == "50.0% [19.0%, 81.0%]"
    assert "4 instances of unseen repositories" in table.caption
    assert "a note" in sec.notes and any(n.startswith("ask_first@v1: asks the user") for n in sec.notes)


def test_panel_in_the_html_report(tmp_path: Path) -> None:
    fp = factory.frozen_protocol()
    a = factory.analysis(fp.sha256)
    build_report(a, out_dir=tmp_path / "absent", protocol=fp)
    doc = (tmp_path / "absent" / "index.html").read_text()
    assert "Behaviour tiers on unseen repositories</h2>\n  <p class=\"absent\">Not run in this study." in doc
    a = a.model_copy(update={"exploratory": Exploratory(behaviour_tiers=_result())})
    build_report(a, out_dir=tmp_path / "present", protocol=fp)
    doc = (tmp_path / "present" / "index.html").read_text()
    assert 'id="tiers-table"' in doc and "62.5% [31.0%, 86.0%]" in doc and "heldout_unseen_tiers" in doc
