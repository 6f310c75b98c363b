"""The exact harm fast path in the monitor (CANARY §1.4 a3, §5.4: 'burn-in met or exact fast-path')."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime

import numpy as np
import pytest
from canary_fixtures import PLAN_TOML, small_plan, write_eval_run
from pydantic import ValidationError

from evalsuite.canary import aggregate, mixture
from evalsuite.canary.guardrails import design_metric, fast_path_upper
from evalsuite.canary.monitor import monitor
from evalsuite.canary.replay import ReplayConfig, replay
from protocols.canary_schema import CanaryMetric

START = datetime(2026, 3, 2, tzinfo=UTC)


def _metrics(**by_name: dict) -> list[dict]:
    data = tomllib.loads(PLAN_TOML.read_text(encoding="utf-8"))
    return [{**m, **by_name.get(m["name"], {})} for m in data["metrics"]]


def _table(plan, run, *, share: float, seed: int = 1, aa: bool = False):
    log = replay([run], treatment="tg", control="grpo", rng=np.random.default_rng(seed),
                 cfg=ReplayConfig(start=START, n_units=3000, canary_share=share, aa=aa))  # fmt: skip
    return aggregate.build_table(log.episodes, plan, log.assignments)


@pytest.fixture(scope="module")
def worse(tmp_path_factory):
    return write_eval_run(tmp_path_factory.mktemp("w"), arms={"tg": 0.1, "grpo": 0.7}, rng=np.random.default_rng(1))


def test_a_harm_in_burn_in_is_rolled_back_by_the_fast_path(worse):
    """Burn-in of 1,000 units per arm is never reached by a 10 % canary of 3,000 units: without the fast path the
    harm on task completion decides nothing; with it the canary is rolled back from the exact CS."""
    fast = small_plan(min_units_per_arm=1000, metrics=_metrics(task_completion={"fast_path": "exact_union"}))
    plain = small_plan(min_units_per_arm=1000)
    looks = monitor(fast, _table(fast, worse, share=0.1))
    tc = next(m for m in looks[-1].metrics if m.name == "task_completion")
    assert looks[-1].decision == "ROLLBACK" and looks[-1].reasons[0].startswith("harm on task_completion")
    assert tc.status == "harm" and "exact fast path" in tc.note and tc.n_canary < 1000
    assert tc.fast_upper == tc.upper < 0 and "exact fast path, upper" in looks[-1].reasons[0]
    first = monitor(plain, _table(plain, worse, share=0.1), times=[looks[-1].elapsed_hours])[0]
    tc0 = next(m for m in first.metrics if m.name == "task_completion")
    assert tc0.status == "burn_in" and first.decision != "ROLLBACK"


def test_fast_path_takes_half_the_metric_alpha():
    plan = small_plan(metrics=_metrics(task_completion={"fast_path": "exact_union"}))
    m = next(x for x in plan.metrics if x.name == "task_completion")
    d, d0 = design_metric(plan, m), design_metric(small_plan(), m.model_copy(update={"fast_path": "none"}))
    assert d.alpha_harm == d0.alpha_harm == pytest.approx(0.05 / 6)
    assert d.alpha_fast == pytest.approx(d.alpha_harm / 2) and d0.alpha_fast is None
    assert d.tau2_harm == pytest.approx(mixture.tau2_for_horizon(d.var_horizon, alpha=d.alpha_harm / 2, sides=1))


def test_fast_path_bound_is_oriented_and_uses_arrival_order():
    plan = small_plan(metrics=_metrics(rework={"fast_path": "exact_union"}))
    d = design_metric(plan, next(x for x in plan.metrics if x.name == "rework"))  # lower is better
    rng = np.random.default_rng(2)
    can = np.r_[np.ones(80, bool), np.zeros(80, bool)]
    num = np.r_[rng.binomial(4, 0.9, 80), rng.binomial(4, 0.1, 80)].astype(float)
    agg = aggregate.UnitAggregates(num=num, den=np.full(160, 4.0), canary=can, start=rng.permutation(160) * 1.0)
    assert fast_path_upper(d, agg) < 0  # more rework in the canary is harm on the oriented scale
    flipped = aggregate.UnitAggregates(num=num, den=np.full(160, 4.0), canary=~can, start=agg.start)
    assert fast_path_upper(d, flipped) > 0


def test_aa_canary_with_fast_paths_is_not_rolled_back(tmp_path):
    run = write_eval_run(tmp_path, arms={"tg": 0.5, "grpo": 0.5}, rng=np.random.default_rng(0))
    on = {"fast_path": "exact_union"}
    plan = small_plan(metrics=_metrics(task_completion=on, tool_error_rate=on, rework=on, thumbs_down=on))
    looks = monitor(plan, _table(plan, run, share=0.5, aa=True))
    assert not any(m.status == "harm" for lk in looks for m in lk.metrics)
    assert not any(r.startswith("harm") for r in looks[-1].reasons)


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"rollback_on": "inferior", "margin": 0.02}, "rollback_on = 'any_harm'"),
        ({"numerator": "n_edits"}, "in [0, 1]"),
        ({"numerator": "tool_errors", "denominator": "episodes"}, "in [0, 1]"),
    ],
)
def test_fast_path_needs_a_bounded_harm_metric(over, needle):
    base = dict(name="m", numerator="task_completed", direction="higher_is_better", anticipated_unit_var=0.1,
                fast_path="exact_union")  # fmt: skip
    with pytest.raises(ValidationError) as e:
        CanaryMetric(**{**base, **over})
    assert needle in str(e.value)


def test_fast_path_accepts_capped_counts_and_defaults_off():
    m = CanaryMetric(name="h", numerator="hallucination_reports", direction="lower_is_better",
                     anticipated_unit_var=0.01, cap=1.0, fast_path="exact_union")  # fmt: skip
    assert m.fast_path == "exact_union"
    assert CanaryMetric(name="t", numerator="task_completed", direction="higher_is_better",
                        anticipated_unit_var=0.1).fast_path == "none"  # fmt: skip
