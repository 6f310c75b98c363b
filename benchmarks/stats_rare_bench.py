"""Type-I error of the non-inferiority test at its margin, for the shipped plans' designs (issue #15, item 2), and
simulated vs analytic power (item 6). Prints the figures quoted in docs/STATS.md.

Model: evalsuite.simulate (logit; seed effects nested in arms, repository and task effects shared by the arms,
task x arm and repository x arm interactions). Columns: the old primary bound (symmetric Wald t, no assay check),
the score-type bound alone, and the score-type bound with the plan's assay-sensitivity check (what the analysis
does: a baseline rate below min_baseline_rate = 2 x margin is not evaluated, so never rejects).

Superiority (issue #37): type-I error of the superiority test (true Δ = 0) at rare baselines 0.5–10 %, with the
score-type bound (whose variance is floored at the restricted-MLE binomial variance when an arm is constant) alone
and with the plan's ``decision.min_events`` (default 10) rule.

Variance rules (``components``): the superiority and NI type-I errors of the two score-type rules side by side
(``score``, plans up to mini v4; ``score_components``, mini v5: the Bernoulli part of each arm's seed piece scaled by
the ratio of p(1 − p), only the random-effect parts by its square), and the power of each at a rare baseline (the
mini behaviour endpoint: GRPO about 0.02, TG about 0.2).

Run: .venv/bin/python benchmarks/stats_rare_bench.py [N_SIMS] [all|superiority|ni|noseed|power|components]   (default 2000,
all parts; ~5 min on 2 cores for the NI part). ``noseed``: the paper design without seed variance at baselines
0.2-0.4, where an audit measured 0.030-0.036.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from evalsuite.analyze import power_summaries
from evalsuite.power_sim import simulate_plan_power
from evalsuite.simulate import Estimator, SimDesign, superiority_power, superiority_type_one_error, type_one_error
from protocols.load import load_plan

DESIGNS = {  # name: (design, margin, min_baseline_rate) as in protocols/plans/
    "smoke (2 seeds x 12 tasks)": (SimDesign("method", 2, 4, 3), 0.10, 0.20),
    "mini (3 seeds x 40 tasks)": (SimDesign("method", 3, 8, 5), 0.10, 0.20),
    "paper_claims (10 seeds x 500 tasks)": (SimDesign("method", 10, 50, 10), 0.05, 0.10),
    "paper_claims, heterogeneous tasks (task SD 2)": (SimDesign("method", 10, 50, 10, task_sd=2.0), 0.05, 0.10),
    "artifact_checkpoint (1 vs 1 checkpoint x 500 tasks)": (SimDesign("artifact", 1, 50, 10), 0.03, 0.06),
}
BASELINES = (0.05, 0.06, 0.08, 0.10, 0.15, 0.30, 0.50)
# issue #37: an audit measured 0.030-0.036 here (10 seeds, no seed variance, baselines 0.2-0.4)
NOSEED = {"paper_claims, no seed variance (seed SD 0)": (SimDesign("method", 10, 50, 10, seed_sd=0.0), 0.05, 0.10)}
NOSEED_BASELINES = (0.20, 0.30, 0.40)
SUP_DESIGNS = {
    "5 seeds x 40 tasks": SimDesign("method", 5, 8, 5),
    "10 seeds x 40 tasks": SimDesign("method", 10, 8, 5),
    "10 seeds x 40 tasks, no random effects": SimDesign("method", 10, 8, 5, seed_sd=0, task_sd=0, repo_sd=0,
                                                        task_arm_sd=0, repo_arm_sd=0),  # fmt: skip
    "paper_claims (10 seeds x 500 tasks)": SimDesign("method", 10, 50, 10),
    "artifact (1 vs 1 checkpoint x 500 tasks)": SimDesign("artifact", 1, 50, 10),
}
SUP_BASELINES = (0.005, 0.01, 0.02, 0.05, 0.10)
MIN_EVENTS = 10  # protocols.schema.DecisionRule.min_events default


def superiority(n_sims: int) -> float:
    print(f"\ntype-I error of superiority (true difference 0), {n_sims} replications per cell")
    worst = 0.0
    for name, d in SUP_DESIGNS.items():
        print(f"\n{name}")
        print(f"  baseline   score   score+min_events {MIN_EVENTS}   (not evaluated)")
        for i, b in enumerate(SUP_BASELINES):
            rs = [superiority_type_one_error(d, baseline=b, n_sims=n_sims, rng=np.random.default_rng([7, i]),
                                             min_events=m) for m in (0, MIN_EVENTS)]  # fmt: skip
            print(f"  {b:8.3f}   {rs[0].rate:5.4f}   {rs[1].rate:7.4f} ± {rs[1].mc_se:.4f}   ({rs[1].undefined})")
            if rs[1].rate > 0.025:  # confirm on an independent stream with 5x the replications
                rs[1] = superiority_type_one_error(d, baseline=b, n_sims=5 * n_sims, rng=np.random.default_rng([8, i]),
                                                   min_events=MIN_EVENTS)  # fmt: skip
                print(f"            re-run, {5 * n_sims} replications on another stream: {rs[1].rate:.4f} ± "
                      f"{rs[1].mc_se:.4f}")  # fmt: skip
            worst = max(worst, rs[1].rate)
    print(f"\nlargest superiority type-I error of the shipped analysis: {worst:.4f} (target <= 0.025)")
    return worst


def main(n_sims: int, part: str = "all") -> None:
    t0 = time.perf_counter()
    if part in ("all", "superiority"):
        superiority(n_sims)
    if part in ("all", "ni"):
        non_inferiority(n_sims, DESIGNS, BASELINES)
    if part in ("all", "ni", "noseed"):
        non_inferiority(n_sims, NOSEED, NOSEED_BASELINES)
    if part in ("all", "power"):
        power(n_sims)
    if part in ("all", "components"):
        components(n_sims)
    print(f"\nwall time {time.perf_counter() - t0:.0f} s")


def non_inferiority(n_sims: int, designs: dict[str, tuple[SimDesign, float, float]],
                    baselines: tuple[float, ...]) -> None:  # fmt: skip
    print(f"type-I error at the NI margin, {n_sims} replications per cell (MC SE ~{(0.025 * 0.975 / n_sims) ** 0.5:.4f}"
          " at 0.025)")
    worst = 0.0
    for name, (d, margin, min_rate) in designs.items():
        print(f"\n{name}, margin {margin}, min_baseline_rate {min_rate}")
        print("  baseline   wald(old)   score   score+assay   (not evaluated)")
        for i, b in enumerate(baselines):
            if b < margin:
                continue
            rs = [type_one_error(d, baseline=b, margin=margin, n_sims=n_sims, rng=np.random.default_rng([5, i]),
                                 estimator=e, min_baseline_rate=m) for e, m in (("wald", 0), ("score", 0),
                                                                               ("score", min_rate))]  # fmt: skip
            worst = max(worst, rs[2].rate)
            print(f"  {b:8.2f}   {rs[0].rate:9.4f}   {rs[1].rate:5.4f}   {rs[2].rate:11.4f}   ({rs[2].undefined})")
            if rs[2].rate > 0.03:  # confirm on an independent stream with 5x the replications
                c = type_one_error(d, baseline=b, margin=margin, n_sims=5 * n_sims, rng=np.random.default_rng([6, i]),
                                   min_baseline_rate=min_rate)  # fmt: skip
                print(f"            re-run, {5 * n_sims} replications on another stream: score+assay {c.rate:.4f} "
                      f"± {c.mc_se:.4f}")  # fmt: skip
    print(f"\nlargest type-I error of the shipped analysis (score+assay): {worst:.4f} (nominal 0.025)")


def power(n_sims: int) -> None:
    for plan_name in ("paper_claims", "mini", "smoke"):
        plan = load_plan(f"protocols/plans/{plan_name}.toml")
        sim = simulate_plan_power(plan, n_sims=n_sims, rng=np.random.default_rng(1))
        for s in power_summaries(plan):
            print(f"power {plan_name:12s} {s.endpoint:13s} analytic {s.power:.3f}  simulated "
                  f"{sim.per_criterion[s.endpoint]:.3f} ± {sim.mc_se[s.endpoint]:.3f}  (sigma_seed range: "
                  f"{s.power_low:.3f} .. {s.power_high:.3f})")


RULE_DESIGNS = {
    "mini v5 (5 seeds x 10 repos x 4 tasks)": SimDesign("method", 5, 10, 4),
    "5 seeds x 40 tasks, heterogeneous tasks (task SD 2)": SimDesign("method", 5, 10, 4, task_sd=2.0),
    "10 seeds x 40 tasks": SimDesign("method", 10, 8, 5),
    "paper_claims (10 seeds x 500 tasks)": SimDesign("method", 10, 50, 10),
}
RULES: tuple[Estimator, ...] = ("score", "score_components")


def components(n_sims: int) -> None:
    print(f"\nvariance rules side by side, {n_sims} replications per cell (MC SE ~0.0035 at 0.025 for 2000)")
    for name, d in RULE_DESIGNS.items():
        print(f"\n{name}")
        print("  superiority (true difference 0, min_events 10): baseline   " + "   ".join(RULES))
        for i, b in enumerate(SUP_BASELINES):
            rs = [superiority_type_one_error(d, baseline=b, n_sims=n_sims, rng=np.random.default_rng([9, i]),
                                             min_events=MIN_EVENTS, estimator=r) for r in RULES]  # fmt: skip
            print(f"    {b:6.3f}   " + "   ".join(f"{r.rate:.4f}" for r in rs))
            for r, rule in zip(rs, RULES, strict=True):
                if r.rate > 0.03:  # confirm on an independent stream with 5x the replications
                    c = superiority_type_one_error(d, baseline=b, n_sims=5 * n_sims, rng=np.random.default_rng([12, i]),
                                                   min_events=MIN_EVENTS, estimator=rule)  # fmt: skip
                    print(f"      re-run {rule}, {5 * n_sims} replications on another stream: {c.rate:.4f} ± {c.mc_se:.4f}")
        print("  non-inferiority at the margin 0.10 (min baseline 0.20): baseline   " + "   ".join(RULES))
        for i, b in enumerate((0.20, 0.30, 0.50)):
            rs = [type_one_error(d, baseline=b, margin=0.10, n_sims=n_sims, rng=np.random.default_rng([10, i]),
                                 estimator=r, min_baseline_rate=0.20) for r in RULES]  # fmt: skip
            print(f"    {b:6.2f}   " + "   ".join(f"{r.rate:.4f}" for r in rs))
            for r, rule in zip(rs, RULES, strict=True):
                if r.rate > 0.03:  # confirm on an independent stream with 5x the replications
                    c = type_one_error(d, baseline=b, margin=0.10, n_sims=5 * n_sims, rng=np.random.default_rng([13, i]),
                                       estimator=rule, min_baseline_rate=0.20)  # fmt: skip
                    print(f"      re-run {rule}, {5 * n_sims} replications on another stream: {c.rate:.4f} ± {c.mc_se:.4f}")
        print("  power of superiority (baseline 0.02): treatment   " + "   ".join(RULES))
        for i, pt in enumerate((0.10, 0.15, 0.20, 0.25)):
            ps = [superiority_power(d, p_t=pt, p_c=0.02, n_sims=n_sims, rng=np.random.default_rng([11, i]),
                                    min_events=MIN_EVENTS, estimator=r) for r in RULES]  # fmt: skip
            print(f"    {pt:6.2f}   " + "   ".join(f"{p:.3f}" for p in ps))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, sys.argv[2] if len(sys.argv) > 2 else "all")
