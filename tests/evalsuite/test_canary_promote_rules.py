"""Issue #36/#37, what PROMOTE waits for: a guardrail that never fires (zero events in both arms) no longer holds an
A/A canary in burn-in until the horizon ROLLBACK (the exact bound decides it; a relative margin that cannot be
evaluated says so), and PROMOTE waits until the SRM check has the power the plan asks for."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from canary_fixtures import small_plan, write_eval_run

from evalsuite.canary import aggregate
from evalsuite.canary.decide import srm_wait
from evalsuite.canary.monitor import monitor, srm_units_needed
from evalsuite.canary.replay import ReplayConfig, replay
from evalsuite.canary.srm import units_for_power
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


def _plan(relative_rework: bool = False, **over):  # type: ignore[no-untyped-def]
    metrics = []
    for m in small_plan().metrics:
        d = m.model_dump()
        if d["margin"] is not None:
            d["margin"] = 0.04
        if relative_rework and d["name"] == "rework":
            d.update(margin_type="relative", margin=0.5, baseline=0.2)
        metrics.append(d)
    return small_plan(**{"canary_share": 0.5, "horizon_units": 20_000, "min_duration_hours": 72,
                         "max_duration_hours": 2000, "metrics": metrics, **over})  # fmt: skip


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


def test_promote_waits_for_the_srm_checks_power(aa_log):
    plan = _plan(srm_detectable_share=0.46)  # a 0.46 vs 0.50 split must be detectable with power 0.8
    need = srm_units_needed(plan)
    assert need is not None and 3000 < need < 4500
    looks = _looks(plan, aa_log)
    assert looks[-1].decision == "PROMOTE" and sum(looks[-1].units.values()) >= need
    waiting = [lk for lk in looks if any("the SRM check needs" in r for r in lk.reasons)]
    assert waiting and f"the SRM check needs {need} assigned units to flag a canary share of 0.46" in waiting[-1].reasons[-1]
    early = _looks(_plan(), aa_log)  # default: 0.8 x 0.5 = 0.40, a few hundred units
    promoted = next(lk for lk in early if lk.decision == "PROMOTE")
    assert sum(promoted.units.values()) >= srm_units_needed(_plan()) and promoted.elapsed_hours < looks[-1].elapsed_hours


def test_srm_power_is_measured_on_the_test_itself():
    """0.09 vs 0.10 (the split that was flagged only after PROMOTE in 2 of 40 canaries) needs about 22,000 units at
    alpha_srm 0.001; 0.08 vs 0.10 about 5,000; the design 'mismatch' 0.10 vs 0.10 is refused."""
    n9 = units_for_power(0.1, 0.09, alpha=0.001, k=100.0, power=0.8, n_max=80_000)
    n8 = units_for_power(0.1, 0.08, alpha=0.001, k=100.0, power=0.8, n_max=80_000)
    assert n9 is not None and n8 is not None and 18_000 < n9 < 27_000 and 4_000 < n8 < 6_500
    assert units_for_power(0.1, 0.09, alpha=0.001, k=100.0, power=0.8, n_max=10_000) is None
    plan = small_plan(srm_detectable_share=0.09)
    assert srm_wait(plan, 100, None)[0].endswith("raise srm_detectable_share's distance from canary_share, alpha_srm "
                                                 "or the canary share")  # fmt: skip
    with pytest.raises(ValueError, match="srm_detectable_share must differ from canary_share"):
        small_plan(srm_detectable_share=0.1)
