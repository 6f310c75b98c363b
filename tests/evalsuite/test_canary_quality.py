"""Data-quality gates: differential missingness and pre-period balance (CANARY §4.3 items 3 and 6), and the
optional pre-period fields of the assignments log."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest
from canary_fixtures import small_plan, write_eval_run

from evalsuite.canary import aggregate
from evalsuite.canary.logs import CanaryDataError, read_assignments
from evalsuite.canary.monitor import monitor
from evalsuite.canary.quality import missingness_gate, pre_period_gate
from evalsuite.canary.replay import ReplayConfig, replay
from evalsuite.canary.schema import PrePeriod

START = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    run = write_eval_run(tmp_path_factory.mktemp("aa"), arms={"tg": 0.5, "grpo": 0.5}, rng=np.random.default_rng(0))
    return replay([run], treatment="tg", control="grpo", rng=np.random.default_rng(2),
                  cfg=ReplayConfig(start=START, n_units=3000, canary_share=0.5, aa=True))  # fmt: skip


def _drop_units(log, *, canary_share: float, control_share: float, seed: int = 0):
    """Episodes of a random share of each arm's units never arrive (their assignments stay)."""
    rng = np.random.default_rng(seed)
    gone = {a.unit_id for a in log.assignments
            if rng.random() < (canary_share if a.arm == "canary" else control_share)}  # fmt: skip
    return tuple(e for e in log.episodes if e.unit_id not in gone)


def _gate(look, name):
    return next(g for g in look.gates if g.name == name)


def test_missing_canary_telemetry_blocks_and_rolls_back(log):
    plan = small_plan(canary_share=0.5)
    t = aggregate.build_table(_drop_units(log, canary_share=0.3, control_share=0.0), plan, log.assignments)
    looks = monitor(plan, t)
    assert looks[-1].decision == "ROLLBACK" and looks[-1].reasons[0].startswith("missingness:")
    assert _gate(looks[-1], "missingness").level == "block"


def test_equal_missingness_and_complete_logs_pass(log):
    plan = small_plan(canary_share=0.5)
    for eps in (log.episodes, _drop_units(log, canary_share=0.2, control_share=0.2)):
        t = aggregate.build_table(eps, plan, log.assignments)
        g = missingness_gate(t, as_of=t.watermark, grace_hours=24.0, alpha=plan.alpha_srm)
        assert g.level == "ok", g.detail


def test_missingness_is_not_measurable_without_assignments(log):
    t = aggregate.build_table(log.episodes, small_plan(canary_share=0.5), None)
    g = missingness_gate(t, as_of=t.watermark, grace_hours=24.0, alpha=0.001)
    assert g.level == "ok" and "not measurable" in g.detail


def _with_pre(log, p_canary: float, p_control: float, seed: int = 3):
    rng = np.random.default_rng(seed)
    out = []
    for a in log.assignments:
        n = int(rng.integers(0, 12))
        k = int(rng.binomial(n, p_canary if a.arm == "canary" else p_control))
        out.append(a.model_copy(update={"pre_period": PrePeriod(episodes=n, task_completed=k)}))
    return tuple(out)


def test_pre_period_imbalance_warns_at_every_look_and_never_promotes(log):
    plan = small_plan(canary_share=0.5, min_duration_hours=24, horizon_units=1_000_000)
    bad = _with_pre(log, 0.3, 0.7)
    t = aggregate.build_table(log.episodes, plan, bad)
    g = pre_period_gate(t, as_of=t.watermark, alpha=plan.alpha_srm)
    assert g.level == "warn" and "pre-period completion ratio" in g.detail
    looks = monitor(plan, t)
    assert all(lk.decision != "PROMOTE" for lk in looks)
    assert any(r.startswith("pre_period:") for r in looks[-1].reasons)


def test_balanced_pre_period_passes_and_absent_is_ok(log):
    plan = small_plan(canary_share=0.5)
    t = aggregate.build_table(log.episodes, plan, _with_pre(log, 0.5, 0.5))
    assert pre_period_gate(t, as_of=t.watermark, alpha=plan.alpha_srm).level == "ok"
    t0 = aggregate.build_table(log.episodes, plan, log.assignments)
    assert "no pre-period" in pre_period_gate(t0, as_of=t0.watermark, alpha=0.001).detail


ASSIGN = {"unit_id": "u1", "arm": "canary", "assign_ts": "2026-03-02T10:00:00Z"}


def _write(tmp_path, rows):
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.mark.parametrize("pre, expect", [
    ({"episodes": "5", "task_completed": 1}, "field pre_period.episodes"),
    ({"episodes": 5, "task_completed": -1}, "field pre_period.task_completed"),
    ({"episodes": 2, "task_completed": 3}, "task_completed must be <= pre_period.episodes"),
    ({"episodes": 2, "completed": 1}, "field pre_period"),
])  # fmt: skip
def test_malformed_pre_period_is_a_located_error(tmp_path, pre, expect):
    p = _write(tmp_path, [{**ASSIGN, "pre_period": pre}])
    with pytest.raises(CanaryDataError) as e:
        read_assignments(p)
    assert f"{p}:1" in str(e.value) and expect in str(e.value)


def test_pre_period_on_some_rows_only_is_refused(tmp_path):
    rows = [{**ASSIGN, "pre_period": {"episodes": 3, "task_completed": 1}}, {**ASSIGN, "unit_id": "u2"}]
    p = _write(tmp_path, rows)
    with pytest.raises(CanaryDataError) as e:
        read_assignments(p)
    assert f"{p}:2: field pre_period" in str(e.value) and "every unit" in str(e.value)
    ok = read_assignments(_write(tmp_path, [rows[0], {**rows[1], "pre_period": {"episodes": 0,
                                                                                "task_completed": 0}}]))  # fmt: skip
    assert ok[1].pre_period == PrePeriod(episodes=0, task_completed=0)
