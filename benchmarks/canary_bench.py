"""Error rates of the canary decisions under continuous monitoring (CANARY.md §6), with more replications than the
tests, plus the cost of one full `tgsuite canary` replay. Prints rates with their Monte Carlo SE, times and peak
memory.

1. i.i.d. Bernoulli units, H0, 10 % canary, 20,000 units, a look every 50 units from unit 500 (391 looks):
   anytime-valid CS (two-sided, and the one-sided harm bound that ROLLBACK uses), naive repeated z (every 50 and
   every 250 units), one fixed-horizon test, LD-OBF GST with 10 looks. Then a 3-point harm (power).
2. Clustered H0: 1 + Poisson(4) episodes per unit, ICC 0.3, 10,000 units, 50/50, 97 looks: unit-level
   delta-method variance vs episode-level binomial variance, each with the CS and with the naive z.
3. Non-inferiority at the boundary (true effect = −margin = −0.02), 50/50, 20,000 units, 77 looks: P(PROMOTE)
   of the one-sided mixture bound at alpha_promote 0.025 vs a naive one-sided z.
4. The whole pipeline on A/A replay logs (replay generator -> monitor with the bundled plan scaled to 3,000
   units): share of logs that end in a false ROLLBACK (harm, SRM or a gate), in PROMOTE, and in ROLLBACK for
   "horizon reached without establishing non-inferiority" (expected at a 10 % share: a small canary cannot prove
   non-inferiority, CANARY §0.6), and seconds per canary.
5. The exact harm fast path (``fast_path = "exact_union"``) on i.i.d. Bernoulli units, 10 % canary, 2,000 units
   (about 200 canary units: the bundled plan's burn-in), p = 0.6, at the bundled plan's per-metric share
   0.05/6 halved: P(ever harm) under H0 and for drops of 3, 10, 20 and 30 points, and the share caught while the
   canary arm was still below 200 units.

6. The product's own rule in its own monitor (issue #37): ``evalsuite.canary.monitor.monitor`` with a one-metric
   plan (task completion, margin 0.02, one-sided harm bound, looks every 24 h, the bundled plan's burn-in and
   durations) on i.i.d. Bernoulli units (p = 0.6, 10 % canary, 20,000 units over 21 days): P(false ROLLBACK) under
   H0 and P(ROLLBACK for harm) at a 3-point drop, at a per-metric alpha of 0.05 (one harm metric) and of 0.05/6
   (the bundled plan's Bonferroni share). These are the figures a user of `tgsuite canary` gets; sections 1 and 5
   use the closed forms on every 50th unit.
7. A rare, clustered metric in the product monitor (``delta.with_pooled_variance_floor``, CANARY.md "Rare
   metrics"): a one-metric plan, 10 % canary, 20,000 units over 21 days, 1 + Poisson(4) episodes per unit, per-unit
   rates Beta with the given ICC, daily looks, burn-in 200 units per arm and 20 pooled events. A/A at 0.5 % per
   episode (higher is better, per-metric alpha 0.05): P(ROLLBACK for harm) at ICC 0.3 and 0.05; and a
   lower-is-better metric at its non-inferiority boundary (0.5 % vs 0.7 %, margin 0.002, ICC 0.3): P(PROMOTE) at
   alpha_promote 0.025.
8. ``method = "gst"`` when `tgsuite canary` is run every hour (CANARY.md, group-sequential option): 20,000
   Brownian paths at the NI boundary on the product's own boundaries (``evalsuite.canary.gsd``), daily scheduled
   looks (``gst_looks`` 7, 14, 21), the last planned look at t = 1, PROMOTE from 168 h, information linear to 504 h.
   P(PROMOTE) with the scheduled looks only (the rule now) and with an extra GST look at every hourly watermark
   (the rule before: each invocation spent alpha at a look the next one does not take).

Run: PYTHONPATH=. .venv/bin/python benchmarks/canary_bench.py [--reps 10000] [--pipeline-reps 200]
     [--monitor-reps 1000] [--only 1,2,3,4,5,6,7,8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import numpy as np

from evalsuite.canary import aggregate, gsd, guardrails, simulate
from evalsuite.canary.monitor import monitor
from evalsuite.canary.replay import ReplayConfig, replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from canary_fixtures import small_plan, write_eval_run  # noqa: E402


def _show(title: str, rates: dict[str, float], reps: int, seconds: float, peak: int) -> None:
    print(f"\n{title}  ({reps} reps, {seconds:.1f} s, peak {peak / 2**20:.0f} MiB)")
    for k, v in rates.items():
        print(f"  {k:16s} {v:7.4f}  ± {simulate.mc_se(v, reps):.4f}")


def _timed(title: str, reps: int, fn) -> None:  # type: ignore[no-untyped-def]
    tracemalloc.start()
    t0 = time.perf_counter()
    rates = fn()
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    _show(title, rates, reps, dt, peak)


def _pipeline(reps: int, rng: np.random.Generator) -> dict[str, float]:
    plan = small_plan(canary_share=0.1, horizon_units=3000, max_duration_hours=10_000)
    with tempfile.TemporaryDirectory() as d:
        run = write_eval_run(Path(d), arms={"tg": 0.5, "grpo": 0.5}, rng=np.random.default_rng(0))
        rollback = promote = horizon = 0
        for _ in range(reps):
            log = replay([run], treatment="tg", control="grpo", rng=rng,
                         cfg=ReplayConfig(start=datetime(2026, 3, 2, tzinfo=UTC), n_units=3000, aa=True))  # fmt: skip
            looks = monitor(plan, aggregate.build_table(log.episodes, plan, log.assignments))
            harm = [lk for lk in looks if lk.decision == "ROLLBACK" and "horizon" not in lk.reasons[0]]
            rollback += bool(harm)
            promote += looks[-1].decision == "PROMOTE"
            horizon += looks[-1].decision == "ROLLBACK" and not harm
    return {"false_rollback": rollback / reps, "promote": promote / reps, "inconclusive_at_horizon": horizon / reps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10_000)
    ap.add_argument("--pipeline-reps", type=int, default=200)
    ap.add_argument("--monitor-reps", type=int, default=1000)
    ap.add_argument("--only", default="1,2,3,4,5,6,7,8", help="comma list of sections to run")
    a = ap.parse_args()
    only = set(a.only.split(","))
    rng = np.random.default_rng(20261201)
    if "1" in only:
        _section1(a.reps, rng)
    if "2" in only:
        _timed("2. clustered H0 (ICC 0.3)", a.reps,
               lambda: simulate.clustered(a.reps, rng=rng, n_units=10_000, share=0.5, step=100, start=400))
    if "3" in only:
        _timed("3. NI boundary (effect = -margin)", a.reps, lambda: simulate.ni_boundary(a.reps, rng=rng))
    if "4" in only:
        t0 = time.perf_counter()
        _timed("4. full pipeline on A/A replay logs (3,000 units, bundled plan)", a.pipeline_reps,
               lambda: _pipeline(a.pipeline_reps, rng))
        print(f"  seconds per replayed canary: {(time.perf_counter() - t0) / a.pipeline_reps:.2f}")
    if "5" in only:
        for d in (0.0, -0.03, -0.10, -0.20, -0.30):
            _timed(f"5. exact fast path, effect {d:+.2f}", a.reps, lambda d=d: simulate.fast_path(a.reps, rng=rng, delta=d))
    if "6" in only:
        for alpha in (0.05, 0.05 / 6):
            for d in (0.0, -0.03):
                _timed(f"6. product monitor, per-metric alpha {alpha:.4g}, effect {d:+.2f}", a.monitor_reps,
                       lambda alpha=alpha, d=d: _product_monitor(a.monitor_reps, rng, alpha=alpha, delta=d))
    if "8" in only:
        for looks in (7, 14, 21):
            _timed(f"8. gst, gst_looks {looks}: PROMOTE at the NI boundary (alpha 0.025)", 20_000,
                   lambda looks=looks: _gst_hourly(20_000, np.random.default_rng(9), looks=looks))
    if "7" in only:
        for floor in (True, False):  # the same streams with and without the pooled variance floor
            tag = "pooled floor" if floor else "no floor (the rule before it)"
            for icc in (0.3, 0.05):
                _timed(f"7. rare metric (0.5 %), A/A, ICC {icc}, {tag}", a.monitor_reps,
                       lambda icc=icc, floor=floor: _rare_monitor(a.monitor_reps, np.random.default_rng(7), icc=icc,
                                                                  floor=floor))
            _timed(f"7b. rare lower-is-better metric at the NI boundary (0.5 % vs 0.7 %, margin 0.002), ICC 0.3, {tag}",
                   a.monitor_reps, lambda floor=floor: _rare_monitor(a.monitor_reps, np.random.default_rng(8), icc=0.3,
                                                                     ni_boundary=True, floor=floor))


def _iid_table(rng: np.random.Generator, *, n_units: int, share: float, p: float, delta: float,
               hours: float) -> aggregate.EpisodeTable:  # fmt: skip
    """One episode per unit, arrivals uniform over ``hours``: the table `tgsuite canary` builds from a log."""
    t = np.sort(rng.uniform(0.0, hours, n_units))
    can = rng.random(n_units) < share
    cols = {c: np.zeros(n_units) for c in aggregate.COLUMNS}
    cols["task_completed"] = (rng.random(n_units) < np.where(can, p + delta, p)).astype(float)
    cols["episodes"] = np.ones(n_units)
    return aggregate.EpisodeTable(start=datetime(2026, 3, 2, tzinfo=UTC), unit_ids=tuple(map(str, range(n_units))),
                                  unit_canary=can, unit_start=t, ep_unit=np.arange(n_units), ep_hours=t,
                                  ep_crossover=np.zeros(n_units, dtype=bool), columns=cols, watermark=float(t[-1]))  # fmt: skip


def _product_monitor(reps: int, rng: np.random.Generator, *, alpha: float, delta: float) -> dict[str, float]:
    primary = next(m for m in small_plan().metrics if m.name == "task_completion").model_dump()
    plan = small_plan(metrics=[primary], alpha_rollback=alpha, canary_share=0.1, horizon_units=20_000,
                      min_units_per_arm=200, min_duration_hours=168, max_duration_hours=504)  # fmt: skip
    harm = other = promote = 0
    for _ in range(reps):
        looks = monitor(plan, _iid_table(rng, n_units=20_000, share=0.1, p=0.6, delta=delta, hours=504.0))
        last = looks[-1]
        harm += last.decision == "ROLLBACK" and last.reasons[0].startswith("harm on")
        other += last.decision == "ROLLBACK" and not last.reasons[0].startswith(("harm on", "horizon"))
        promote += last.decision == "PROMOTE"
    return {"rollback_harm": harm / reps, "rollback_gate": other / reps, "promote": promote / reps}


def _gst_hourly(reps: int, rng: np.random.Generator, *, looks: int, alpha: float = 0.025, horizon: float = 504.0,
                min_hours: float = 168.0, step: float = 1.0) -> dict[str, float]:  # fmt: skip
    """Section 8: first-PROMOTE probability at the NI boundary, scheduled daily looks vs an extra look every
    ``step`` hours whose bound spends alpha at its own information fraction (the last planned look at t = 1)."""
    sched_t = [min(1.0, 24.0 * d / horizon) for d in range(1, looks + 1)]
    sched_t[-1] = 1.0
    sched_c = gsd.gs_bounds_spending(sched_t, alpha=alpha, sides=1, spending="obf")
    hours = np.arange(step, 24.0 * looks + 1e-9, step)
    z = np.cumsum(rng.normal(0.0, 1.0, (reps, hours.size)) * np.sqrt(np.diff(np.r_[0.0, hours / horizon])), 1)
    z /= np.sqrt(hours / horizon)
    col = {round(h, 6): i for i, h in enumerate(hours)}
    sched = np.zeros(reps, dtype=bool)
    for d in range(1, looks + 1):
        sched |= z[:, col[round(24.0 * d, 6)]] > sched_c[d - 1]
    hourly = sched.copy()
    for h in hours:
        k = int(np.ceil(h / 24.0 - 1e-9))  # the scheduled look this extra one precedes
        if abs(h - 24.0 * k) < 1e-9 or h < min_hours:
            continue
        c = gsd.gs_bounds_spending(sched_t[:k - 1] + [1.0 if k == looks else h / horizon], alpha=alpha, sides=1,
                                   spending="obf")[-1]  # fmt: skip
        hourly |= z[:, col[round(h, 6)]] > c
    return {"schedule_only": float(sched.mean()), "hourly_extra_looks": float(hourly.mean())}


def _clustered_table(rng: np.random.Generator, *, n_units: int, share: float, p: float, delta: float, icc: float,
                     hours: float, column: str) -> aggregate.EpisodeTable:  # fmt: skip
    """1 + Poisson(4) episodes per unit (the first at arrival, then exponential gaps of 3 h), each a Bernoulli of the
    unit's own rate, drawn from a Beta with mean ``p`` (``p + delta`` in the canary) and intra-class correlation
    ``icc``; arrivals uniform over ``hours``."""
    t = np.sort(rng.uniform(0.0, hours, n_units))
    can = rng.random(n_units) < share
    m = 1 + rng.poisson(4.0, n_units)
    ab = (1 - icc) / icc
    mean = np.where(can, p + delta, p)
    rate = rng.beta(mean * ab, (1 - mean) * ab)
    ep_unit = np.repeat(np.arange(n_units), m)
    gaps = rng.exponential(3.0, ep_unit.size)
    first = np.r_[0, np.cumsum(m)[:-1]]
    gaps[first] = 0.0
    cs = np.cumsum(gaps)
    ep_hours = t[ep_unit] + cs - np.repeat(cs[first], m)
    cols = {c: np.zeros(ep_unit.size) for c in aggregate.COLUMNS}
    cols[column] = (rng.random(ep_unit.size) < rate[ep_unit]).astype(float)
    cols["episodes"] = np.ones(ep_unit.size)
    return aggregate.EpisodeTable(start=datetime(2026, 3, 2, tzinfo=UTC), unit_ids=tuple(map(str, range(n_units))),
                                  unit_canary=can, unit_start=t, ep_unit=ep_unit, ep_hours=ep_hours,
                                  ep_crossover=np.zeros(ep_unit.size, dtype=bool), columns=cols,
                                  watermark=float(ep_hours.max()))  # fmt: skip


def _rare_monitor(reps: int, rng: np.random.Generator, *, icc: float, ni_boundary: bool = False, p: float = 0.005,
                  floor: bool = True) -> dict[str, float]:  # fmt: skip
    """Section 7: the product monitor on :func:`_clustered_table` logs; ``floor=False`` replaces
    ``with_pooled_variance_floor`` by the identity (the monitor as it was before the floor)."""
    if not floor:
        with mock.patch.object(guardrails, "with_pooled_variance_floor", lambda est: (est, False)):
            return _rare_monitor(reps, rng, icc=icc, ni_boundary=ni_boundary, p=p)
    primary = next(m for m in small_plan().metrics if m.name == "task_completion").model_dump()
    primary["anticipated_unit_var"] = p * (1 - p) * (1 + 4 * icc) / 5
    primary["margin"] = 0.002 if ni_boundary else 1e-4
    if ni_boundary:
        primary.update(numerator="rework", direction="lower_is_better")
    plan = small_plan(metrics=[primary], alpha_rollback=0.05, canary_share=0.1, horizon_units=20_000,
                      min_units_per_arm=200, min_duration_hours=168, max_duration_hours=504)  # fmt: skip
    harm = promote = 0
    for _ in range(reps):
        tb = _clustered_table(rng, n_units=20_000, share=0.1, p=p, delta=0.002 if ni_boundary else 0.0, icc=icc,
                              hours=504.0, column="rework" if ni_boundary else "task_completed")  # fmt: skip
        last = monitor(plan, tb)[-1]
        harm += last.decision == "ROLLBACK" and last.reasons[0].startswith("harm on")
        promote += last.decision == "PROMOTE"
    return {"rollback_harm": harm / reps, "promote": promote / reps}


def _section1(reps: int, rng: np.random.Generator) -> None:
    _timed("1. i.i.d. H0, look every 50 units", reps,
           lambda: simulate.iid(reps, rng=rng, n_units=20_000, share=0.1, step=50, start=500))
    _timed("1b. i.i.d. H0, look every 250 units", reps,
           lambda: simulate.iid(reps, rng=rng, n_units=20_000, share=0.1, step=250, start=500))
    harm_reps = max(500, reps // 4)
    _timed("1c. i.i.d. harm -0.03, look every 50 units", harm_reps,
           lambda: simulate.iid(harm_reps, rng=rng, n_units=20_000, share=0.1, step=50, start=500, delta=-0.03))


if __name__ == "__main__":
    main()  # fmt: skip
