"""`tgsuite canary` end to end on this machine: freeze -> replay an eval run -> decide, the report page, errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from canary_fixtures import PLAN_TOML, promotable_plan, write_eval_run, write_replay_log

from protocols.anchor import anchor_path
from protocols.canary import freeze_canary_plan
from reports.canary_page import render_canary_page
from tgsuite.cli import build_parser, main


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    root = tmp_path_factory.mktemp("canary")
    run = write_eval_run(root, arms={"tg": 0.2, "grpo": 0.6}, rng=np.random.default_rng(0), infra=2)
    rec = root / "rec.json"
    assert main(["canary", "--freeze", str(PLAN_TOML), "--out", str(rec)]) == 0
    assert main(["canary", "--replay", str(run), "--treatment", "tg", "--control", "grpo", "--plan", str(rec),
                 "--units", "4000", "--seed", "3", "--out", str(root / "log")]) == 0  # fmt: skip
    return root, rec


def test_freeze_replay_decide_writes_json_and_page(flow, capsys):
    root, rec = flow
    capsys.readouterr()
    code = main(["canary", "--plan", str(rec), "--episodes", str(root / "log" / "episodes.jsonl"),
                 "--assignments", str(root / "log" / "assignments.jsonl"), "--out", str(root / "rep")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("decision: ROLLBACK") and "harm on task_completion" in out
    assert "  preregistration record_in_commit: pass" in out and "prereg gate" not in out
    data = json.loads((root / "rep" / "canary.json").read_text())
    assert data["decision"] == "ROLLBACK" and data["plan_name"] == "gray_release" and data["n_units"] == 4000
    assert data["record_path"] == str(rec) and {c["status"] for c in data["prereg_checks"]} == {"pass", "not_available"}
    html = (root / "rep" / "canary.html").read_text()
    assert "default-src &#39;none&#39;" in html and "<script" not in html and html.count("<svg") == 8
    assert 'id="decision-word">ROLLBACK<' in html and "guardrail-table" in html and 'id="prereg-table"' in html


def test_freeze_anchors_and_signs_the_record(tmp_path, capsys):
    assert main(["protocol", "keygen", "--out", str(tmp_path / "k.pem")]) == 0
    capsys.readouterr()
    rec = tmp_path / "rec.json"
    assert main(["canary", "--freeze", str(PLAN_TOML), "--out", str(rec), "--sign-key", str(tmp_path / "k.pem")]) == 0
    out = capsys.readouterr().out
    assert "anchored: commit " in out and "on refs/tgsuite/prereg" in out and "signed (public key " in out
    assert anchor_path(rec).is_file()


def test_a_record_without_its_anchor_still_rolls_back_for_harm_and_says_prereg_failed(flow, capsys, tmp_path):
    root, rec = flow
    copy = tmp_path / "rec.json"
    copy.write_bytes(rec.read_bytes())  # the same record, its .anchor.json left behind
    capsys.readouterr()
    assert main(["canary", "--plan", str(copy), "--episodes", str(root / "log" / "episodes.jsonl"),
                 "--assignments", str(root / "log" / "assignments.jsonl"), "--out", str(tmp_path / "r")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("decision: ROLLBACK") and "prereg gate WARN: failed prereg check(s): anchor (no " in out
    assert "PROMOTE is blocked" in out and "into a NEW record" in out
    data = json.loads((tmp_path / "r" / "canary.json").read_text())
    assert [(c["name"], c["status"]) for c in data["prereg_checks"]] == [("anchor", "fail")]
    assert any(g["name"] == "prereg" and g["level"] == "warn" for g in data["looks"][-1]["gates"])


def test_a_backdated_record_cannot_promote(capsys, tmp_path):
    """Freeze now, route A/A traffic 40 days ago, move frozen_at before it: check_before passes (frozen_at is not in
    the hash) and this canary was PROMOTEd; the record's bytes now differ from the anchored ones."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=40)
    run = write_eval_run(tmp_path, arms={"tg": 0.5, "grpo": 0.5}, rng=np.random.default_rng(0))
    eps, asg = write_replay_log(run, tmp_path, start=start, aa=True)
    rec = tmp_path / "aa.frozen.json"
    freeze_canary_plan(promotable_plan(), out=rec)
    data = json.loads(rec.read_text())
    data["frozen_at"] = (start - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    rec.write_text(json.dumps(data, indent=2) + "\n")
    capsys.readouterr()
    assert main(["canary", "--plan", str(rec), "--episodes", str(eps), "--assignments", str(asg),
                 "--out", str(tmp_path / "r")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("decision: CONTINUE") and "  - prereg: failed prereg check(s): anchor (the record's bytes" in out
    assert "preregistration before_results: fail" in out and "prereg gate WARN" in out
    html = (tmp_path / "r" / "canary.html").read_text()
    assert 'id="decision-word">CONTINUE<' in html and "FAILED" in html


def test_a_bad_row_is_exit_2_naming_file_line_and_field(flow, capsys, tmp_path):
    root, rec = flow
    lines = (root / "log" / "episodes.jsonl").read_text().splitlines()
    bad = json.loads(lines[6])
    bad["tool_calls"] = -1
    lines[6] = json.dumps(bad)
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["canary", "--plan", str(rec), "--episodes", str(p), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"{p}:7: field tool_calls" in err and not (tmp_path / "r").exists()


def test_missing_arguments_and_help(capsys):
    assert main(["canary"]) == 2
    assert "pass --plan REC.json --episodes LOG.jsonl" in capsys.readouterr().err
    help_text = build_parser()._subparsers._group_actions[0].choices["canary"].format_help()  # type: ignore[union-attr]
    assert "worked example" in help_text and "--replay" in help_text and "--freeze" in help_text


def test_page_escapes_text():
    res = {"plan_name": "p", "plan_sha256": "a" * 64, "episodes_path": "<x>.jsonl", "assignments_path": None,
           "n_episodes": 1, "n_units": 1, "method": "msprt", "alpha_allocation": {}, "decision": "CONTINUE",
           "reasons": ["<script>alert(1)</script>"],
           "looks": [{"index": 1, "as_of": "t", "elapsed_hours": 24.0, "units": {"canary": 1, "control": 1},
                      "srm": {"canary_units": 1, "control_units": 1, "expected_share": 0.5, "log_bf": 0.0,
                              "p_anytime": 1.0, "p_chisq": 1.0, "flagged": False},
                      "gates": [], "decision": "CONTINUE", "reasons": [], "terminal": False,
                      "metrics": [{"name": "m", "role": "primary", "scale": "diff", "sign": 1, "n_canary": 1,
                                   "n_control": 1, "ratio_canary": None, "ratio_control": None, "effect": None,
                                   "var": None, "lower": None, "upper": None, "bar": -0.02, "alpha_harm": 0.05,
                                   "p_harm": 1.0, "p_ni": 1.0, "method_ni": "msprt", "status": "burn_in",
                                   "note": "<b>"}]}]}  # fmt: skip
    html = render_canary_page(res)
    assert "<script>alert" not in html and "&lt;script&gt;" in html and "&lt;x&gt;.jsonl" in html


def test_a_served_model_outside_the_plan_is_exit_2_not_a_crossover_rollback(flow, capsys, tmp_path):
    """A log whose control rows name the production model differently from the plan (here with a version suffix)
    served neither arm's model *as the plan names them*; before, every such unit counted as crossover, the gate
    blocked and an A/B canary was rolled back at look 1 with "served the other arm's model"."""
    root, rec = flow
    text = (root / "log" / "episodes.jsonl").read_text()
    assert '"served_model":"prod-current"' in text
    p = tmp_path / "renamed.jsonl"
    p.write_text(text.replace('"served_model":"prod-current"', '"served_model":"prod-current@2026-11"'))
    line = next(i for i, x in enumerate(p.read_text().splitlines(), 1) if "prod-current@2026-11" in x)
    capsys.readouterr()
    code = main(["canary", "--plan", str(rec), "--episodes", str(p), "--assignments",
                 str(root / "log" / "assignments.jsonl"), "--out", str(tmp_path / "r")])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert f"{p}:{line}: field served_model: 'prod-current@2026-11' is neither" in captured.err
    assert not (tmp_path / "r").exists()
