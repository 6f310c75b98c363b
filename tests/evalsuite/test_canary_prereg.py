"""The frozen canary record is anchored in git like an offline plan (``freeze_canary_plan`` -> ``anchor_record``)
and ``run_canary`` verifies that anchor (``verify_anchor``) when it is given the record's file: any failed check is
gate ``prereg`` at ``warn``, which blocks PROMOTE while a harm ROLLBACK still happens.

Before, ``frozen_at`` was outside the hash: a record backdated to before the first episode passed ``check_before``
and an A/A canary was PROMOTEd. Freezes run in tmp_path (``anchor_record`` makes a git repository there)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from canary_fixtures import promotable_plan, write_eval_run, write_replay_log

from evalsuite.canary.monitor import run_canary
from protocols.anchor import anchor_path
from protocols.canary import freeze_canary_plan, load_frozen_canary

NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
FUTURE = NOW + timedelta(hours=2)  # traffic routed after the freeze (the anchor commit is made now)
PAST = NOW - timedelta(days=40)  # traffic that started before the freeze


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("prereg-logs")
    same = write_eval_run(root / "same", arms={"tg": 0.5, "grpo": 0.5}, rng=np.random.default_rng(0))
    worse = write_eval_run(root / "worse", arms={"tg": 0.1, "grpo": 0.6}, rng=np.random.default_rng(1))
    return {"aa_future": write_replay_log(same, root / "aa_future", start=FUTURE, aa=True),
            "aa_past": write_replay_log(same, root / "aa_past", start=PAST, aa=True),
            "harm_past": write_replay_log(worse, root / "harm_past", start=PAST, aa=False)}  # fmt: skip


def frozen(tmp_path: Path) -> Path:
    rec = tmp_path / "prereg" / "aa.frozen.json"
    freeze_canary_plan(promotable_plan(), out=rec)
    return rec


def backdate(rec: Path, when: datetime) -> None:
    """Move frozen_at earlier and change nothing else (the plan's hash still matches: load_frozen_canary passes)."""
    data = json.loads(rec.read_text(encoding="utf-8"))
    data["frozen_at"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    rec.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    load_frozen_canary(rec)


def checks(res) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {c.name: c.status for c in res.prereg_checks}


def prereg_gates(res) -> list[str]:  # type: ignore[no-untyped-def]
    return [g.level for lk in res.looks for g in lk.gates if g.name == "prereg"]


def test_freeze_anchors_the_record_and_a_refreeze_writes_a_missing_anchor(tmp_path):
    rec = frozen(tmp_path)
    anchor = json.loads(anchor_path(rec).read_text(encoding="utf-8"))
    assert anchor["ref"] == "refs/tgsuite/prereg" and anchor["path_in_repo"] == "aa.frozen.json"
    assert (tmp_path / "prereg" / ".git").is_dir()  # a repository in the record's folder: none enclosed tmp_path
    first = load_frozen_canary(rec)
    anchor_path(rec).unlink()
    again = freeze_canary_plan(promotable_plan(), out=rec, now="2030-01-01T00:00:00Z")
    assert again.frozen_at == first.frozen_at and anchor_path(rec).is_file()  # the original record is kept
    off = tmp_path / "off.json"
    freeze_canary_plan(promotable_plan(), out=off, anchor=False)
    assert not anchor_path(off).exists()


def test_a_clean_anchored_record_decides_as_the_record_in_memory(tmp_path, logs):
    rec = frozen(tmp_path)
    eps, asg = logs["aa_future"]
    by_file = run_canary(rec, eps, asg)
    in_memory = run_canary(load_frozen_canary(rec), eps, asg)
    assert by_file.decision == in_memory.decision == "PROMOTE"
    assert [(lk.decision, lk.reasons) for lk in by_file.looks] == [(lk.decision, lk.reasons) for lk in in_memory.looks]
    assert "fail" not in checks(by_file).values() and checks(by_file)["record_in_commit"] == "pass"
    assert checks(by_file)["before_results"] == "pass" and set(prereg_gates(by_file)) == {"ok"}
    assert by_file.record_path == str(rec) and in_memory.prereg_checks == [] and prereg_gates(in_memory) == []


def test_a_backdated_frozen_at_is_detected_and_blocks_promote(tmp_path, logs):
    rec = frozen(tmp_path)
    backdate(rec, PAST - timedelta(days=1))  # frozen "before" a canary that started 40 days ago
    eps, asg = logs["aa_past"]
    assert run_canary(load_frozen_canary(rec), eps, asg).decision == "PROMOTE"  # what the record alone allowed
    res = run_canary(rec, eps, asg)
    got = checks(res)
    assert got["anchor"] == got["record_in_commit"] == got["before_results"] == "fail"
    assert "differ from those anchored at freeze" in next(c.detail for c in res.prereg_checks if c.name == "anchor")
    assert res.decision == "CONTINUE" and set(prereg_gates(res)) == {"warn"}
    reason = next(r for r in res.reasons if r.startswith("prereg: failed prereg check(s): anchor"))
    assert "PROMOTE is blocked" in reason and "into a NEW record" in reason


def test_a_backdated_record_still_rolls_back_for_harm(tmp_path, logs):
    rec = frozen(tmp_path)
    backdate(rec, PAST - timedelta(days=1))
    res = run_canary(rec, *logs["harm_past"])
    assert res.decision == "ROLLBACK" and any(r.startswith("harm on task_completion") for r in res.reasons)
    assert checks(res)["anchor"] == "fail" and res.looks[-1].terminal


def test_a_record_without_its_anchor_cannot_promote(tmp_path, logs):
    rec = frozen(tmp_path)
    anchor_path(rec).unlink()
    res = run_canary(rec, *logs["aa_future"])
    assert [(c.name, c.status) for c in res.prereg_checks] == [("anchor", "fail")]
    assert res.decision == "CONTINUE" and any(r.startswith("prereg: failed prereg check(s): anchor (no ")
                                              for r in res.reasons)  # fmt: skip


def test_a_signed_record_verifies_only_with_its_key(tmp_path, logs):
    from protocols.anchor import generate_key

    pub = generate_key(tmp_path / "k.pem")
    other = generate_key(tmp_path / "other.pem")
    rec = tmp_path / "signed.frozen.json"
    freeze_canary_plan(promotable_plan(), out=rec, sign_key=tmp_path / "k.pem")
    eps, asg = logs["aa_future"]
    assert checks(run_canary(rec, eps, asg, public_key=pub))["signature"] == "pass"
    wrong = run_canary(rec, eps, asg, public_key=other)
    assert checks(wrong)["signature"] == "fail" and wrong.decision == "CONTINUE"
