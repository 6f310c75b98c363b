"""The report shows the plan it is given next to the analysis's verdict: a record other than the one analysed (or one
edited after freezing) made its margins differ from analysis.json with at most a warning; both are refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "reports"))
import report_factory as factory  # noqa: E402

from protocols.freeze import freeze_plan  # noqa: E402
from reports.build import ReportInputError, build_report  # noqa: E402


def _fixture(root: Path) -> dict:
    kw = factory.full_fixture(root)
    kw.pop("episodes")
    return kw


def test_a_record_of_another_plan_is_refused(tmp_path):
    kw = _fixture(tmp_path)
    rec = json.loads(Path(kw["protocol"]).read_text())
    rec["protocol"]["criteria"][0] = {**rec["protocol"]["criteria"][0], "margin": 0.5}
    other = freeze_plan(factory.frozen_protocol().protocol.model_validate(rec["protocol"]))
    path = tmp_path / "other.frozen.json"
    path.write_text(other.model_dump_json())
    with pytest.raises(ReportInputError, match=r"other.frozen.json: plan .* hashes to .* but .*analysis.json was made "
                                               r"against plan .*fix: pass the record given to `tgsuite analyze"):
        build_report(kw.pop("analysis"), out_dir=tmp_path / "out", **{**kw, "protocol": path})
    assert not (tmp_path / "out" / "index.html").exists()


def test_a_record_edited_after_freezing_is_refused(tmp_path):
    kw = _fixture(tmp_path)
    rec = json.loads(Path(kw["protocol"]).read_text())
    rec["protocol"]["criteria"][0] = {**rec["protocol"]["criteria"][0], "margin": 0.5}  # sha256 left as frozen
    Path(kw["protocol"]).write_text(json.dumps(rec))
    with pytest.raises(ReportInputError, match=r"protocol.json: the plan inside this frozen record hashes to .* it was "
                                               "edited after freezing"):
        build_report(kw.pop("analysis"), out_dir=tmp_path / "out", **kw)
