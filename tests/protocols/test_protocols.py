"""Plans: strict schema, canonical hashing, freeze/check, deviations; the import rule of ``protocols``."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from protocols.deviations import default_log_path, load_deviations, record_deviation
from protocols.freeze import canonical_json, check, freeze_plan, load_frozen, protocol_hash, with_task_set
from protocols.load import ProtocolError, bundled_plans, load_plan, protocol_from_dict
from protocols.schema import CriterionSpec, Protocol

SHA = "b" * 64


def _pinned_plan(tmp_path: Path, text_edit=None) -> Path:
    src = bundled_plans()["paper_claims"].read_text()
    src = src.replace('sha256 = "set-me: sha256 printed by `tgsuite tasks validate`"', f'sha256 = "{SHA}"')
    if text_edit:
        src = text_edit(src)
    p = tmp_path / "plan.toml"
    p.write_text(src)
    return p


def test_bundled_plans_load_and_mirror_the_paper():
    plans = bundled_plans()
    assert {"paper_claims", "artifact_checkpoint", "smoke", "mini"} <= set(plans)
    for path in plans.values():
        load_plan(path)
    p = load_plan(plans["paper_claims"])
    kinds = {c.endpoint: c.kind for c in p.criteria}
    assert kinds == {"behaviour_ok": "superiority_margin", "code_ok": "noninferiority", "joint_ok": "superiority"}
    assert p.estimand == "method" and p.decision.rule == "all_pass"


def test_unknown_key_is_an_error_naming_file_and_field(tmp_path):
    p = _pinned_plan(tmp_path, lambda s: s.replace("margin = 0.05", "marign = 0.05"))
    with pytest.raises(ProtocolError) as exc:
        load_plan(p)
    msg = str(exc.value)
    assert str(p) in msg and "criteria.0.marign" in msg and "unknown key" in msg


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [unclosed")
    with pytest.raises(ProtocolError, match="not valid TOML"):
        load_plan(bad)
    with pytest.raises(ProtocolError, match="not found"):
        load_plan(tmp_path / "nope.toml")


def test_criterion_field_rules():
    with pytest.raises(ValueError, match="needs margin"):
        CriterionSpec(endpoint="code_ok", kind="noninferiority")
    with pytest.raises(ValueError, match="superiority_margin"):
        CriterionSpec(endpoint="code_ok", kind="superiority", threshold=0.1)
    assert CriterionSpec(endpoint="code_ok", kind="noninferiority", margin=0.03).bar == -0.03
    assert CriterionSpec(endpoint="joint_ok", kind="dual", threshold=0.05).bar == 0.0


def test_method_estimand_needs_two_seeds(tmp_path):
    p = _pinned_plan(tmp_path, lambda s: s.replace("seeds_per_arm = 10", "seeds_per_arm = 1").replace(
        "seed_ids = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]", ""))
    with pytest.raises(ProtocolError, match="at least 2 training seeds"):
        load_plan(p)


def test_criterion_on_undeclared_endpoint(tmp_path):
    data = load_plan(_pinned_plan(tmp_path)).model_dump(mode="json")
    data["endpoints"] = [e for e in data["endpoints"] if e["id"] != "joint_ok"]
    with pytest.raises(ProtocolError, match="joint_ok"):
        protocol_from_dict(data)


def test_hash_ignores_comments_and_order_but_not_values(tmp_path):
    p1 = load_plan(_pinned_plan(tmp_path))
    p2 = load_plan(_pinned_plan(tmp_path, lambda s: "# a comment\n" + s))
    p3 = load_plan(_pinned_plan(tmp_path, lambda s: s.replace("margin = 0.05", "margin = 0.06")))
    assert protocol_hash(p1) == protocol_hash(p2) != protocol_hash(p3)
    assert json.loads(canonical_json(p1)) == p1.model_dump(mode="json")


def test_freeze_check_roundtrip_and_refusals(tmp_path):
    plan = _pinned_plan(tmp_path)
    out = tmp_path / "prereg" / "plan.frozen.json"
    rec = freeze_plan(plan, out=out, now="2026-01-01T00:00:00Z")
    assert len(rec.sha256) == 64 and rec.frozen_at == "2026-01-01T00:00:00Z"
    assert load_frozen(out) == rec
    assert freeze_plan(plan, out=out, now="2027-01-01T00:00:00Z", overwrite=True).frozen_at == rec.frozen_at
    check(out, plan)
    plan.write_text(plan.read_text().replace("margin = 0.05", "margin = 0.08"))
    with pytest.raises(ProtocolError, match="changed after freezing"):
        check(out, plan)
    with pytest.raises(ProtocolError, match="already holds a frozen plan"):
        freeze_plan(plan, out=out)
    # a hand-edited record is detected
    data = json.loads(out.read_text())
    data["protocol"]["coverage_threshold"] = 0.5
    out.write_text(json.dumps(data))
    with pytest.raises(ProtocolError, match="edited after freezing"):
        load_frozen(out)


def test_unpinned_task_set_cannot_be_frozen():
    with pytest.raises(ProtocolError, match="not a 64-hex sha256"):
        freeze_plan(load_plan(bundled_plans()["paper_claims"]))
    pinned = with_task_set(load_plan(bundled_plans()["paper_claims"]), name="mini", sha256=SHA)
    assert freeze_plan(pinned).protocol.task_set.name == "mini"


def test_deviation_log_is_append_only_and_bound_to_hash(tmp_path):
    rec = freeze_plan(load_plan(_pinned_plan(tmp_path)), out=tmp_path / "f.frozen.json")
    log = default_log_path(tmp_path / "f.frozen.json")
    assert log.name == "f.frozen.deviations.json"
    record_deviation(log, protocol_hash=rec.sha256, kind="other", description="d1", justification="j1")
    record_deviation(log, protocol_hash=rec.sha256, kind="run_before_freeze", description="d2", justification="j2",
                     run_id="r1")  # fmt: skip
    devs = load_deviations(log, protocol_hash=rec.sha256)
    assert [d.description for d in devs] == ["d1", "d2"]
    with pytest.raises(ProtocolError, match="belongs to plan hash"):
        load_deviations(log, protocol_hash="c" * 64)
    with pytest.raises(ValueError):
        record_deviation(log, protocol_hash=rec.sha256, kind="other", description="", justification="j")


def test_protocols_imports_only_stdlib_and_pydantic():
    allowed = {"__future__", "hashlib", "json", "re", "subprocess", "datetime", "importlib", "pathlib", "typing",
               "platform", "tomllib", "pydantic", "protocols", "os", "tempfile", "dataclasses",
               "collections", "contextlib", "fcntl", "time", "cryptography"}  # fmt: skip  # cryptography: Ed25519 signatures, imported lazily
    for path in Path("protocols").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for n in names:
                    assert n.split(".")[0] in allowed, f"{path} imports {n}"


def test_protocol_model_is_frozen_and_strict():
    p = load_plan(bundled_plans()["smoke"])
    with pytest.raises(ValueError):
        p.name = "x"  # type: ignore[misc]
    assert isinstance(p, Protocol)


def test_one_provenance_module_for_every_artifact(tmp_path: Path) -> None:
    """protocols.provenance: one timestamp format (Z), one dirty rule (an untracked, not ignored file is dirty),
    and the freeze, the runner manifest and the training manifests all use it."""
    import subprocess
    from datetime import datetime

    import harness.runner_manifest as rm
    import protocols.freeze as fr
    from protocols import provenance

    now = provenance.utc_now()
    assert now.endswith("Z") and datetime.fromisoformat(now).utcoffset().total_seconds() == 0
    assert provenance.git_state(tmp_path) == (None, None)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored.txt\n")
    env = ["-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", *env, "-C", str(tmp_path), "add", ".gitignore"], check=True)
    subprocess.run(["git", *env, "-C", str(tmp_path), "commit", "-qm", "x"], check=True)
    commit, dirty = provenance.git_state(tmp_path)
    assert len(commit or "") == 40 and dirty is False
    (tmp_path / "ignored.txt").write_text("x")
    assert provenance.git_state(tmp_path)[1] is False
    (tmp_path / "new_module.py").write_text("x = 1\n")
    assert provenance.git_state(tmp_path)[1] is True
    assert fr.git_state(tmp_path).dirty is True
    assert rm.git_state is provenance.git_state and rm.package_versions is provenance.package_versions
    versions = provenance.package_versions()
    assert versions["python"] and "pydantic" in versions
