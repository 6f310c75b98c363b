"""Issue #15 item 8: a frozen record is committed to git (refs/tgsuite/prereg) and optionally signed; the analysis
verifies both and says which checks passed. Every test uses a temporary git repository (never this one)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evalsuite.analyze import analyze
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from protocols.anchor import PREREG_REF, anchor_path, generate_key
from protocols.anchor_verify import verify_anchor
from protocols.freeze import freeze_plan, protocol_hash
from protocols.schema import FrozenProtocol, Protocol

SHA = "c" * 64
S5 = (0, 1, 2, 3, 4)


def _plan(margin: float = 0.02) -> Protocol:
    return Protocol.model_validate({
        "name": "t", "question": "q", "estimand": "method", "analysis_seed": 1,
        "arms": [{"name": "tg", "role": "treatment"}, {"name": "grpo", "role": "baseline"}],
        "task_set": {"name": "synthetic", "sha256": SHA},
        "design": {"seeds_per_arm": 5, "n_tasks": 40, "n_repositories": 8},
        "endpoints": [{"id": e, "role": "primary"} for e in ("behaviour_ok", "code_ok", "joint_ok")],
        "criteria": [{"endpoint": "code_ok", "kind": "noninferiority", "margin": margin}],
        "coverage_threshold": 0.9,
    })  # fmt: skip


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "project"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    (r / "README").write_text("x")
    _git(r, "add", "README")
    _git(r, "commit", "-qm", "init")
    return r


def _runs(root: Path, rec: FrozenProtocol, created: str = "2100-01-01T00:00:00Z") -> list[Path]:
    d = SyntheticDesign(arms=(SyntheticArm("tg", 0.5, 0.6, S5), SyntheticArm("grpo", 0.5, 0.6, S5)), n_repos=8,
                        tasks_per_repo=5, seed_sd=0.05)  # fmt: skip
    return write_synthetic_runs(root, d, rng=np.random.default_rng(0), protocol_hash=rec.sha256, task_set_sha256=SHA,
                                created_at=created)  # fmt: skip


def test_freeze_commits_to_a_dedicated_ref_without_touching_the_branch(repo):
    head = _git(repo, "rev-parse", "HEAD")
    out = repo / "prereg" / "t.frozen.json"
    freeze_plan(_plan(), out=out, now="2026-01-01T00:00:00Z")
    anchor = json.loads(anchor_path(out).read_text())
    assert _git(repo, "rev-parse", "HEAD") == head and _git(repo, "status", "--porcelain") == "?? prereg/"
    assert _git(repo, "rev-parse", PREREG_REF) == anchor["commit"] and anchor["code_commit"] == head
    assert _git(repo, "show", f"{anchor['commit']}:prereg/t.frozen.json").encode() == out.read_bytes().rstrip(b"\n")
    checks = {c.name: c.status for c in verify_anchor(out, result_times={"r": "2100-01-01T00:00:00Z"})}
    assert checks == {"anchor": "pass", "commit_exists": "pass", "on_prereg_ref": "pass", "record_in_commit": "pass",
                      "first_record": "pass", "before_checkpoints": "not_available", "before_results": "pass", "code_ancestor": "pass",
                      "signature": "not_available"}  # fmt: skip


def test_outside_git_a_repository_is_made_next_to_the_record(tmp_path):
    out = tmp_path / "run" / "protocol.frozen.json"
    freeze_plan(_plan(), out=out)
    assert (tmp_path / "run" / ".git").is_dir()
    assert all(c.status != "fail" for c in verify_anchor(out))


def test_loosened_margin_with_recomputed_hash_is_caught(repo):
    """The audit's attack: margin 0.02 -> 0.30 after the results, sha256 recomputed, manifests edited."""
    out = repo / "prereg" / "t.frozen.json"
    rec = freeze_plan(_plan(0.02), out=out, now="2026-01-01T00:00:00Z")
    forged = _plan(0.30)
    data = json.loads(out.read_text())
    data["protocol"] = forged.model_dump(mode="json")
    data["sha256"] = protocol_hash(forged)
    out.write_text(json.dumps(data, indent=2) + "\n")
    res = analyze(out, _runs(repo.parent / "runs", FrozenProtocol.model_validate(data)))
    assert res.decision.verdict == "INCONCLUSIVE" and res.decision.claims == []
    failed = {c.name for c in res.prereg_checks if c.status == "fail"}
    assert {"anchor", "record_in_commit"} <= failed
    assert any("preregistration check 'record_in_commit' failed" in r for r in res.decision.reasons)
    assert rec.sha256 != data["sha256"]


def test_results_older_than_the_commit_fail(repo):
    out = repo / "t.frozen.json"
    rec = freeze_plan(_plan(), out=out, now="1999-01-01T00:00:00Z")
    res = analyze(out, _runs(repo.parent / "runs", rec, created="2000-01-01T00:00:00Z"))
    assert {c.name: c.status for c in res.prereg_checks}["before_results"] == "fail"
    assert res.decision.verdict == "INCONCLUSIVE"


def test_signature_is_made_at_freeze_and_verified_at_analyze(repo, tmp_path):
    pub = generate_key(tmp_path / "k.pem")
    other = generate_key(tmp_path / "other.pem")
    out = repo / "t.frozen.json"
    rec = freeze_plan(_plan(), out=out, now="2026-01-01T00:00:00Z", sign_key=tmp_path / "k.pem")
    runs = _runs(repo.parent / "runs", rec)
    ok = analyze(out, runs, public_key=pub)
    assert {c.name: c.status for c in ok.prereg_checks}["signature"] == "pass"
    assert all(c.status != "fail" for c in ok.prereg_checks)
    bad = analyze(out, runs, public_key=other)
    sig = next(c for c in bad.prereg_checks if c.name == "signature")
    assert sig.status == "fail" and bad.decision.verdict == "INCONCLUSIVE"


def test_a_rewritten_prereg_ref_is_caught(repo):
    out = repo / "t.frozen.json"
    freeze_plan(_plan(), out=out)
    _git(repo, "update-ref", "-d", PREREG_REF)
    checks = {c.name: c.status for c in verify_anchor(out)}
    assert checks["on_prereg_ref"] == "fail"


def test_cli_keygen_sign_verify_and_power_simulate(repo, tmp_path, capsys):
    import argparse

    from tgsuite.commands import analyze as analyze_cmd
    from tgsuite.commands import protocol as protocol_cmd

    def cli(argv: list[str]) -> int:
        parser = argparse.ArgumentParser(prog="tgsuite")
        sub = parser.add_subparsers(dest="command")
        protocol_cmd.register(sub)
        analyze_cmd.register(sub)
        args = parser.parse_args(argv)
        return args.func(args)

    plan = repo / "plan.toml"
    src = Path("protocols/plans/paper_claims.toml").read_text()
    plan.write_text(src.replace('sha256 = "set-me: sha256 printed by `tgsuite tasks validate`"', f'sha256 = "{SHA}"'))
    assert cli(["protocol", "keygen", "--out", str(tmp_path / "k.pem")]) == 0
    pub = capsys.readouterr().out.split("public key ")[1].split()[0]
    out = repo / "paper.frozen.json"
    assert cli(["protocol", "freeze", str(plan), "--out", str(out), "--sign-key", str(tmp_path / "k.pem")]) == 0
    assert f"signed (public key {pub})" in capsys.readouterr().out
    assert cli(["protocol", "power", str(plan), "--simulate", "100"]) == 0
    text = capsys.readouterr().out
    assert "the plan's own [power] model" in text and "power 0.572 .. 0.927 for sigma_seed 0.010 .. 0.040" in text


def test_report_says_which_checks_passed(repo, tmp_path):
    from reports.build import build_report

    out = repo / "t.frozen.json"
    rec = freeze_plan(_plan(), out=out, now="2026-01-01T00:00:00Z")
    res = analyze(out, _runs(repo.parent / "runs", rec))
    build_report(res, out_dir=tmp_path / "report", protocol=rec)
    html = (tmp_path / "report" / "index.html").read_text()
    assert "Can this verdict be trusted?" in html
    assert "Preregistration checks passed: anchor, commit_exists, on_prereg_ref, record_in_commit" in html
    assert "CONSORT-NI item" in html and "margin justified as an acceptable loss" in html
