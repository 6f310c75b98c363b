"""evalsuite.canary decisions: §5.7 property tests, the decision rules, gates and replay safety."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from canary_fixtures import small_plan, write_eval_run

from evalsuite.canary import aggregate, delta, gsd, mixture
from evalsuite.canary.decide import decide
from evalsuite.canary.guardrails import alpha_allocation, design_metric
from evalsuite.canary.monitor import MonitorState, analyze_look, look_times, monitor
from evalsuite.canary.replay import ReplayConfig, replay

START = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    same = write_eval_run(root / "same", arms={"tg": 0.5, "grpo": 0.5}, rng=np.random.default_rng(0))
    worse = write_eval_run(root / "worse", arms={"tg": 0.1, "grpo": 0.6}, rng=np.random.default_rng(1))
    return {"same": same, "worse": worse}


def table(plan, run: Path, *, share: float, n_units: int = 3000, seed: int = 1, aa: bool = False, **cfg):
    log = replay([run], treatment="tg", control="grpo", rng=np.random.default_rng(seed),
                 cfg=ReplayConfig(start=START, n_units=n_units, canary_share=share, aa=aa, **cfg))  # fmt: skip
    return aggregate.build_table(log.episodes, plan, log.assignments), log


# ---- properties (CANARY §5.7) -------------------------------------------------------------------------------


def test_cs_shrinks_as_variance_falls_and_lambda_grows_with_distance():
    v = np.geomspace(1e-6, 1e-2, 30)
    hw = mixture.cs_halfwidth(v, tau2=1e-3, alpha=0.05)
    assert np.all(np.diff(hw) > 0)
    d = np.linspace(0, 0.2, 30)
    assert np.all(np.diff(mixture.msprt_log_lr(d, 1e-3, tau2=1e-3)) > 0)
    assert np.all(np.diff(mixture.msprt_log_lr_one_sided(d, 1e-3, tau2=1e-3)) > 0)


def test_swapping_arms_negates_and_scaling_is_affine():
    rng = np.random.default_rng(3)
    y1, n1 = rng.binomial(5, 0.6, 400).astype(float), np.full(400, 5.0)
    y2, n2 = rng.binomial(5, 0.5, 300).astype(float), np.full(300, 5.0)
    a, b = delta.ratio_and_var(y1, n1), delta.ratio_and_var(y2, n2)
    e, f = delta.effect(a, b), delta.effect(b, a)
    assert f.delta == pytest.approx(-e.delta) and f.var == pytest.approx(e.var)
    lo, hi = mixture.cs_two_sided(e.delta, e.var, tau2=1e-3, alpha=0.05)
    lo2, hi2 = mixture.cs_two_sided(f.delta, f.var, tau2=1e-3, alpha=0.05)
    assert (lo2, hi2) == pytest.approx((-hi, -lo))
    c = 7.0  # outcomes scaled by c: estimate × c, variance × c², and with tau² × c² the CS scales by c
    ec = delta.effect(delta.ratio_and_var(c * y1, n1), delta.ratio_and_var(c * y2, n2))
    assert ec.delta == pytest.approx(c * e.delta) and ec.var == pytest.approx(c * c * e.var)
    assert mixture.cs_two_sided(ec.delta, ec.var, tau2=c * c * 1e-3, alpha=0.05) == pytest.approx((c * lo, c * hi))


def test_bonferroni_allocation_sums_to_alpha_rollback():
    plan = small_plan()
    alloc = alpha_allocation(plan)
    assert sum(alloc.values()) == pytest.approx(plan.alpha_rollback)
    assert "edits_per_episode" not in alloc and len(alloc) == 6


def test_running_intersection_and_terminal_decisions(runs):
    plan = small_plan(canary_share=0.5, horizon_units=100_000, max_duration_hours=10_000)
    t, _ = table(plan, runs["same"], share=0.5, aa=True)
    looks = monitor(plan, t, [6.0 * k for k in range(1, 60)])
    for name in ("task_completion", "rework"):
        lo = [lk.metrics[i].lower for lk in looks for i, m in enumerate(lk.metrics) if m.name == name]
        hi = [lk.metrics[i].upper for lk in looks for i, m in enumerate(lk.metrics) if m.name == name]
        lo_f = [x for x in lo if x is not None]
        hi_f = [x for x in hi if x is not None]
        assert lo_f and np.all(np.diff(lo_f) >= 0) and np.all(np.diff(hi_f) <= 0)
    assert all(not lk.terminal for lk in looks[:-1])  # the canary ends at its first terminal decision


def test_replaying_look_by_look_equals_all_at_once(runs):
    plan = small_plan()
    t, _ = table(plan, runs["same"], share=0.1, aa=True)
    times = look_times(plan, t)
    all_at_once = monitor(plan, t, times)
    designs = [design_metric(plan, m) for m in plan.metrics]
    state, one_by_one = MonitorState(), []
    for x in times:
        lk, state = analyze_look(plan, t, designs, as_of=x, state=state)
        one_by_one.append(lk)
        if lk.terminal:
            break
    assert len(all_at_once) > 5 and one_by_one == all_at_once
    assert monitor(plan, t, times[:5]) == all_at_once[:5]  # a prefix of the looks gives the same decisions


# ---- decisions ----------------------------------------------------------------------------------------------


def test_clear_harm_rolls_back_early(runs):
    plan = small_plan()
    t, _ = table(plan, runs["worse"], share=0.1)
    looks = monitor(plan, t)
    last = looks[-1]
    assert last.decision == "ROLLBACK" and any(r.startswith("harm on task_completion") for r in last.reasons)
    assert last.terminal and last.elapsed_hours <= 5 * 24 and all(not lk.terminal for lk in looks[:-1])


def _wider_margins(margin: float) -> list[dict]:
    return [{**m.model_dump(), "margin": margin} if m.margin is not None else m.model_dump()
            for m in small_plan().metrics]  # fmt: skip


def test_aa_canary_at_half_share_promotes_after_min_duration(runs):
    plan = small_plan(canary_share=0.5, horizon_units=20_000, min_duration_hours=72, max_duration_hours=2000,
                      metrics=_wider_margins(0.04))  # fmt: skip
    t, _ = table(plan, runs["same"], share=0.5, n_units=6000, aa=True, days=20)
    looks = monitor(plan, t)
    assert all(lk.decision != "ROLLBACK" for lk in looks)
    promoted = [lk for lk in looks if lk.decision == "PROMOTE"]
    assert promoted and promoted[0].elapsed_hours >= 72
    assert all(m.status in ("noninferior", "superior") for m in promoted[0].metrics if m.bar is not None)


def test_gst_method_uses_planned_looks(runs):
    plan = small_plan(canary_share=0.5, horizon_units=6000, method="gst", gst_looks=5, min_duration_hours=72,
                      max_duration_hours=2000, metrics=_wider_margins(0.04))  # fmt: skip
    t, _ = table(plan, runs["same"], share=0.5, n_units=6000, aa=True, days=20)
    looks = monitor(plan, t, [96.0 * k for k in range(1, 6)])
    tc = [next(m for m in lk.metrics if m.name == "task_completion") for lk in looks]
    assert all(m.method_ni == "gst" for m in tc) and tc[0].note.startswith("GST look 1")
    assert tc[1].note.startswith("GST look 2") and looks[-1].decision == "PROMOTE"
    t1 = float(tc[0].note.split("t = ")[1].split(",")[0])
    c1 = float(tc[0].note.split("c = ")[1])
    assert c1 == pytest.approx(float(gsd.gs_bounds_spending([t1], alpha=0.025, sides=1)[0]), abs=0.05)  # t is rounded in the note
    strict = small_plan(canary_share=0.5, horizon_units=6000, method="gst", gst_looks=2, min_duration_hours=1000,
                        max_duration_hours=2000)  # fmt: skip
    tc = [next(m for m in lk.metrics if m.name == "task_completion") for lk in monitor(strict, t, [96.0, 192.0, 288.0])]
    assert "t = 1.00" in tc[1].note and "spent" in tc[2].note


def test_gst_watermark_look_between_scheduled_looks_spends_no_alpha(runs):
    """With method = "gst" only looks on the plan's schedule are GST looks. Before, the extra look at the log's
    watermark (its time set by when `tgsuite canary` runs) was a GST look too: each run between two scheduled looks
    spent alpha at a look that the next run does not take. On the product's own boundaries (gsd, the last planned
    look at t = 1, PROMOTE from 168 h, daily looks, gst_looks = 14, information linear to a 504 h horizon, 20,000
    Brownian paths), running it every hour and acting on the first PROMOTE promoted at the NI boundary in 3.37 %
    +- 0.13 % of canaries (schedule only: 2.21 %; alpha_promote 2.5 %)."""
    plan = small_plan(canary_share=0.5, horizon_units=6000, method="gst", gst_looks=14, min_duration_hours=72,
                      max_duration_hours=2000, metrics=_wider_margins(0.04))  # fmt: skip
    t, _ = table(plan, runs["same"], share=0.5, n_units=6000, aa=True, days=20)
    sched = monitor(plan, t, [24.0 * k for k in range(1, 5)])
    for h in (100.0, 110.0):  # two runs on day 5, each with the watermark look at h
        looks = monitor(plan, t, [24.0 * k for k in range(1, 5)] + [h])
        tc = next(m for m in looks[-1].metrics if m.name == "task_completion")
        prev = next(m for m in sched[-1].metrics if m.name == "task_completion")
        assert "not a planned GST look" in tc.note and tc.lower == prev.lower, tc
    nxt = monitor(plan, t, [24.0 * k for k in range(1, 6)])  # the day-5 scheduled look is still GST look k + 1
    def gst_no(look) -> int:  # type: ignore[no-untyped-def]
        return int(re.search(r"GST look (\d+)", next(m for m in look.metrics if m.name == "task_completion").note)[1])

    assert gst_no(nxt[-1]) == gst_no(sched[-1]) + 1


def test_srm_rolls_back_or_holds(runs):
    plan = small_plan(canary_share=0.1)
    t, _ = table(plan, runs["same"], share=0.2, aa=True)  # logged at 20 %, designed at 10 %
    last = monitor(plan, t)[-1]
    assert last.decision == "ROLLBACK" and last.srm.flagged and last.reasons[0].startswith("srm:")
    held = monitor(small_plan(canary_share=0.1, on_srm="hold"), t)[-1]
    assert held.decision == "CONTINUE" and held.reasons[0].startswith("HOLD")


def test_crossover_gate_blocks(runs):
    plan = small_plan(canary_share=0.5)
    t, _ = table(plan, runs["same"], share=0.5, aa=True, canary_model="something-else")
    lk = monitor(plan, t, [48.0])[-1]
    gate = next(g for g in lk.gates if g.name == "crossover")
    assert gate.level == "block" and lk.decision == "ROLLBACK"


def test_no_promotion_before_min_duration_or_in_burn_in(runs):
    plan = small_plan(canary_share=0.5, min_duration_hours=10_000, max_duration_hours=20_000, horizon_units=10**6)
    t, _ = table(plan, runs["same"], share=0.5, aa=True)
    lk = monitor(plan, t)[-1]
    assert lk.decision == "CONTINUE" and "minimum duration" in lk.reasons[0]
    early = monitor(plan, t, [1.0])[-1]
    assert any(g.name == "burn_in" and g.level == "warn" for g in early.gates)


def test_worked_look_harm_fires_through_decide():
    """§5.6 rows 1-2 (1,150 or 1,100 of 2,000 vs 10,800/18,000) under the module's rule: the one-sided harm bound at
    alpha_rollback / 6 (the bundled plan's six harm tests) is below 0 for row 2 only -> ROLLBACK there."""
    from evalsuite.canary.schema import MetricLook

    plan = small_plan(horizon_units=20_000)
    d = design_metric(plan, plan.metrics[0])
    assert d.alpha_harm == pytest.approx(0.05 / 6)
    p_c, uppers = 0.6, {}
    for s_t in (1150, 1100):
        p_t = s_t / 2000
        v = p_t * (1 - p_t) / 2000 + p_c * (1 - p_c) / 18000
        uppers[s_t] = (p_t - p_c) + mixture.one_sided_halfwidth(v, tau2=d.tau2_harm, alpha=d.alpha_harm)
    assert uppers[1150] > 0 > uppers[1100]
    m = MetricLook(name="task_completion", role="primary", scale="diff", sign=1, n_canary=2000, n_control=18000,
                   ratio_canary=0.55, ratio_control=p_c, effect=-0.05, var=None, lower=None, upper=uppers[1100],
                   bar=-0.02, alpha_harm=d.alpha_harm, p_harm=0.001, p_ni=1.0, method_ni="msprt", status="harm")  # fmt: skip
    v1 = decide(plan, metrics=[m], gates=[], elapsed_hours=10.0, units=20000)
    assert v1.decision == "ROLLBACK" and v1.terminal and v1.reasons[0].startswith("harm on task_completion")
    assert decide(plan, metrics=[], gates=[], elapsed_hours=11.0, units=20000, previous=v1) is v1
    m1 = m.model_copy(update={"upper": uppers[1150], "effect": -0.025, "status": "inconclusive"})
    assert decide(plan, metrics=[m1], gates=[], elapsed_hours=10.0, units=2000).decision == "CONTINUE"


def test_relative_margins_are_oriented_by_direction():
    """ln(R_T/R_C) > ln(1 − δ) when higher is better; ln(R_T/R_C) < ln(1 + δ) when lower is better (CANARY §2.1
    states only the first; the oriented bar of the second is −ln(1 + δ))."""
    base = small_plan().metrics
    up = {**base[0].model_dump(), "margin_type": "relative", "margin": 0.1, "baseline": 0.6}
    down = {**base[2].model_dump(), "margin_type": "relative", "margin": 0.1, "baseline": 0.2}
    plan = small_plan(metrics=[up, down])
    d_up, d_down = design_metric(plan, plan.metrics[0]), design_metric(plan, plan.metrics[1])
    assert d_up.scale == d_down.scale == "logratio"
    assert d_up.bar == pytest.approx(np.log(0.9)) and d_down.bar == pytest.approx(-np.log(1.1))
    # the horizon variance moves to the log scale with the anticipated baseline
    v = 1 / (0.1 * 3000) + 1 / (0.9 * 3000)
    assert d_up.var_horizon == pytest.approx(up["anticipated_unit_var"] * v / 0.36)


def test_a_broken_canary_is_rolled_back_not_degenerate(tmp_path):
    """0 % vs 100 % completion: every unit of an arm has the same ratio, so the delta-method variance is 0 in both
    arms; the variance floor keeps the harm test defined and the canary is rolled back right after burn-in
    (before the floor it ran to the horizon with status 'degenerate')."""
    run = write_eval_run(tmp_path, arms={"tg": 1e-12, "grpo": 1 - 1e-12}, rng=np.random.default_rng(4))
    plan = small_plan()
    t, _ = table(plan, run, share=0.1)
    looks = monitor(plan, t)
    tc = next(m for m in looks[-1].metrics if m.name == "task_completion")
    assert looks[-1].decision == "ROLLBACK" and looks[-1].reasons[0].startswith("harm on task_completion")
    assert tc.effect == pytest.approx(-1.0) and "variance floor" in tc.note and looks[-1].elapsed_hours <= 5 * 24


def test_variance_floor_only_widens():
    est = delta.ratio_and_var([5, 5, 5], [5, 5, 5])
    assert est.var == 0.0
    floored, used = delta.with_variance_floor(est, kind="binary")
    assert used and floored.var == pytest.approx((15.5 / 16) * (0.5 / 16) / 15)
    noisy = delta.ratio_and_var([0, 5, 1, 4], [5, 5, 5, 5])
    assert delta.with_variance_floor(noisy, kind="binary") == (noisy, False)
    assert delta.with_variance_floor(delta.ratio_and_var([0, 0], [3, 4]), kind="count")[0].var == pytest.approx(0.5 / 49)


def _rare_look(plan, *, n_t: int, n_c: int, events_c: list[int], eps: int = 5):
    """One look of a rare higher-is-better metric: the canary has no event in n_t units, control has ``events_c``
    events in as many units (the rest 0), ``eps`` episodes per unit."""
    from evalsuite.canary.guardrails import MetricState, evaluate_metric

    num = np.zeros(n_t + n_c)
    num[n_t:n_t + len(events_c)] = events_c
    agg = aggregate.UnitAggregates(num=num, den=np.full(n_t + n_c, float(eps)),
                                   canary=np.arange(n_t + n_c) < n_t, start=np.arange(n_t + n_c, dtype=float))  # fmt: skip
    d = design_metric(plan, plan.metrics[0])
    return evaluate_metric(plan, d, agg, MetricState())[0]


def test_a_small_canary_arm_without_events_of_a_rare_clustered_metric_is_not_harm():
    """An A/A-like look measured in an independent simulation (p = 0.005 per episode, ICC 0.3, 10 % canary): 0 of
    202 canary units with an event against 26 of 1,741 control units (36 events). Exactly, P(0 of 202 | the
    control's unit share 26/1741) = 0.048: one look at alpha 0.05 is not evidence of harm, let alone an
    anytime-valid bound. Before, the canary's variance was the episode-level floor (clustering ignored) and the
    upper bound was -0.0011 < 0: ROLLBACK; in that simulation 12.7 % of A/A canaries were rolled back at alpha 0.05.
    The pooled unit variance (``delta.with_pooled_variance_floor``) keeps the bound above 0."""
    primary = next(m for m in small_plan().metrics if m.name == "task_completion").model_dump()
    primary["anticipated_unit_var"] = 0.005 * 0.995 * 2.2 / 5
    plan = small_plan(metrics=[primary], alpha_rollback=0.05, canary_share=0.1, horizon_units=20_000,
                      min_units_per_arm=200)  # fmt: skip
    look = _rare_look(plan, n_t=202, n_c=1741, events_c=[1] * 20 + [2] * 4 + [4] * 2)
    assert look.effect is not None and look.effect < 0 and look.status not in ("harm", "inferior")
    assert look.upper is not None and look.upper > 0, look
    assert "pooled unit variance" in look.note


def test_pooled_variance_floor_only_widens():
    a, b = delta.ratio_and_var([0, 1, 0, 2, 0, 0, 1, 0], [5] * 8), delta.ratio_and_var([0] * 4, [5] * 4)
    e = delta.effect(b, a)  # a small canary arm b with no events against a larger control a
    pooled, used = delta.with_pooled_variance_floor(e)
    s2 = a.var * 8 * 7 / 10  # arm b has 0 per-unit variance: (7 s2_a + 3 * 0) / 10
    assert used and pooled.var == pytest.approx(s2 * (1 / 4 + 1 / 8)) and pooled.var > e.var
    same = delta.effect(a, a)
    assert delta.with_pooled_variance_floor(same) == (same, False)  # equal arms: pooled = unpooled
    lr = delta.effect(a, delta.ratio_and_var([1, 1, 0, 2, 1], [5, 5, 5, 5, 5]), scale="logratio")
    assert delta.with_pooled_variance_floor(lr)[0].var >= lr.var
