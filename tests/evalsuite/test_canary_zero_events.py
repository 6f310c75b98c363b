"""Issue #36/#37: a guardrail that never fires (zero events in both arms) no longer holds an A/A canary in burn-in
until the horizon ROLLBACK; the exact bound decides it, and a relative margin that cannot be evaluated says so."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from canary_fixtures import small_plan, write_eval_run

from evalsuite.canary import aggregate
from evalsuite.canary.monitor import monitor
from evalsuite.canary.replay import ReplayConfig, replay
from harness.schema import EpisodeResult

START = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def no_rework(tmp_path_factory) -> Path:
    """An eval run in which no episode ever reworks: the 'rework' guardrail has zero events in any replay."""
    run = write_eval_run(tmp_path_factory.mktemp("runs"), arms={"tg": 0.5, "grpo": 0.5}, rng=np.random.default_rng(0))
    for p in run.glob("episodes/*/*/s*/a*/result.json"):
        r = EpisodeResult.model_validate_json(p.read_text())
        p.write_text(r.model_copy(update={"metrics": r.metrics.model_copy(update={"rework": 0})}).model_dump_json())
    return run


@pytest.fixture(scope="module")
def aa_log(no_rework: Path):  # type: ignore[no-untyped-def]
    return replay([no_rework], treatment="tg", control="grpo", rng=np.random.default_rng(1),
                  cfg=ReplayConfig(start=START, n_units=6000, canary_share=0.5, aa=True, days=20))  # fmt: skip


def _looks(plan, log):  # type: ignore[no-untyped-def]
    return monitor(plan, aggregate.build_table(log.episodes, plan, log.assignments))


def _plan(relative_rework: bool = False):  # type: ignore[no-untyped-def]
    metrics = []
    for m in small_plan().metrics:
        d = m.model_dump()
        if d["margin"] is not None:
            d["margin"] = 0.04
        if relative_rework and d["name"] == "rework":
            d.update(margin_type="relative", margin=0.5, baseline=0.2)
        metrics.append(d)
    return small_plan(canary_share=0.5, horizon_units=20_000, min_duration_hours=72, max_duration_hours=2000,
                      metrics=metrics)  # fmt: skip


def test_aa_replay_with_a_zero_event_guardrail_promotes(aa_log):
    looks = _looks(_plan(), aa_log)
    assert looks[-1].decision == "PROMOTE" and all(lk.decision != "ROLLBACK" for lk in looks)
    rework = next(m for m in looks[-1].metrics if m.name == "rework")
    assert rework.ratio_canary == 0 and rework.ratio_control == 0 and rework.status == "noninferior"
    assert "0 events in both arms (fewer than min_events 20): non-inferiority from the exact bound" in rework.note


def test_a_relative_margin_on_a_zero_event_guardrail_says_promote_is_unreachable(aa_log):
    looks = _looks(_plan(relative_rework=True), aa_log)
    assert all(lk.decision != "PROMOTE" for lk in looks)
    rework = next(m for m in looks[-1].metrics if m.name == "rework")
    assert rework.status == "burn_in" and "PROMOTE waits until events occur" in rework.note
    assert any("rework in burn-in" in r and "PROMOTE waits until events occur" in r for r in looks[-1].reasons)
