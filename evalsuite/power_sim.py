"""Power you can trust: a Monte Carlo of the plan's *own* model, and the uncertainty from the seed SD.

``simulate_plan_power`` draws seed × task cell means from exactly the model ``power.power_ni_crossed`` assumes
(probability scale: arm mean + seed effect σ_seed + task × arm interaction τ with repository share ρ + cell noise
σ_e²/K; for the artifact estimand one checkpoint per arm and no seed effect) and analyses each replication with the
interval ``tgsuite analyze`` uses (score-type crossed or paired bound) and the criterion's rule; the analytic value is
a noncentral-t approximation of the Wald bound. Endpoints are simulated
independently (the plan states no correlation between them), so the all-pass value is for independent endpoints.

``seed_sd_interval``: σ_seed is usually estimated on few degrees of freedom (a pilot with m seeds in a arms has
a·(m − 1)); its 80 % chi-square interval is σ·√(df/χ²_{0.9,df}) … σ·√(df/χ²_{0.1,df}). Without a stated df the
value is a guess and the range shown is ×0.5 … ×2.

References: Satterthwaite 1946; Julious SA, Stat Med 2004;23:1921–1986 (sample size with an estimated variance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from evalsuite.power import power_ni_crossed
from evalsuite.rates import StatsInputError
from evalsuite.score_variance import crossed_score, paired_score
from protocols.schema import CriterionSpec, Protocol


@dataclass(frozen=True)
class PlanPowerSim:
    per_criterion: dict[str, float]
    all_pass: float
    n_sims: int
    mc_se: dict[str, float]


def _draw(rng: np.random.Generator, *, m: int, n_repos: int, per_repo: int, sigma_seed: float, tau: float,
          icc: float, sigma_e2: float, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    n = n_repos * per_repo
    repo = np.repeat(np.arange(n_repos), per_repo)
    inter = rng.normal(0, tau * math.sqrt(icc), n_repos)[repo] + rng.normal(0, tau * math.sqrt(1 - icc), n)
    shared = rng.normal(0, 0.1, n)
    cells = []
    for shift in (delta + inter, np.zeros(n)):
        y = 0.5 + shared + shift + rng.normal(0, sigma_seed, (m, 1)) + rng.normal(0, math.sqrt(sigma_e2), (m, n))
        cells.append(y)
    return cells[0], cells[1], repo


def _passes(yt: np.ndarray, yc: np.ndarray, repo: np.ndarray, c: CriterionSpec, proto: Protocol) -> bool:
    """The criterion's rule on the interval ``tgsuite analyze`` uses: the score-type crossed (method) or paired
    (artifact) bound, with the plan's df rule and weighting."""
    k = proto.design.episodes_per_task
    if proto.estimand == "artifact":
        e = paired_score(yt[0], yc[0], repo, k=k, alpha_one_sided=c.alpha_one_sided)
    else:
        e = crossed_score(yt, yc, repo, k=k, alpha_one_sided=c.alpha_one_sided, df_rule=proto.decision.df_rule,
                          weighting=proto.weighting, variance=proto.decision.variance)  # fmt: skip
    ok = (not e.degenerate) and e.lower_one_sided > c.bar
    return bool(ok and c.estimate_passes(e.estimate))


def simulate_plan_power(proto: Protocol, *, n_sims: int, rng: np.random.Generator) -> PlanPowerSim:
    """Monte Carlo power of each criterion (and all-pass) under the plan's [power] model (module docstring)."""
    pa, d = proto.power, proto.design
    if pa is None:
        raise StatsInputError(f"plan {proto.name}: simulated power needs a [power] section")
    artifact = proto.estimand == "artifact"
    per_repo = max(1, round(pa.tasks_per_repo or d.n_tasks / d.n_repositories))
    hits: dict[str, int] = {c.endpoint: 0 for c in proto.criteria}
    joint = 0
    for _ in range(n_sims):
        ok_all = True
        for c in proto.ordered_criteria():
            delta = pa.expected_differences.get(c.endpoint, pa.true_difference)
            yt, yc, repo = _draw(rng, m=1 if artifact else d.seeds_per_arm, n_repos=d.n_repositories,
                                 per_repo=per_repo, sigma_seed=0.0 if artifact else pa.sigma_seed, tau=pa.tau,
                                 icc=pa.icc_repo, sigma_e2=pa.sigma_e2 / d.episodes_per_task, delta=delta)  # fmt: skip
            ok = _passes(yt, yc, repo, c, proto)
            hits[c.endpoint] += ok
            ok_all &= ok
        joint += ok_all
    rates = {k: v / n_sims for k, v in hits.items()}
    se = {k: math.sqrt(max(v * (1 - v), 1e-12) / n_sims) for k, v in rates.items()}
    return PlanPowerSim(rates, joint / n_sims, n_sims, se)


def seed_sd_interval(sigma: float, df: int | None, *, level: float = 0.8) -> tuple[float, float, str]:
    """(low, high, note): the ``level`` chi-square interval of σ_seed on ``df`` (None: a guess, ×0.5 … ×2)."""
    if df is None:
        return sigma / 2, sigma * 2, "sigma_seed is a guess (no sigma_seed_df): range x0.5 to x2"
    a = (1 - level) / 2
    low = sigma * math.sqrt(df / stats.chi2.ppf(1 - a, df))
    high = sigma * math.sqrt(df / stats.chi2.ppf(a, df))
    return low, high, f"{level:.0%} chi-square interval of sigma_seed on {df} df"


def power_range(proto: Protocol, c: CriterionSpec) -> tuple[float, float, tuple[float, float], str]:
    """Analytic power of ``c`` with σ_seed at the high and the low end of its interval (low power first)."""
    pa, d = proto.power, proto.design
    assert pa is not None
    lo_s, hi_s, note = seed_sd_interval(pa.sigma_seed, pa.sigma_seed_df)
    vals = []
    for s in (hi_s, lo_s):
        vals.append(power_ni_crossed(
            margin=-c.bar, true_difference=pa.expected_differences.get(c.endpoint, pa.true_difference),
            seeds_treatment=d.seeds_per_arm, seeds_baseline=d.seeds_per_arm, n_tasks=d.n_tasks,
            tasks_per_repo=pa.tasks_per_repo or d.n_tasks / d.n_repositories, sigma_seed=s, tau=pa.tau,
            icc_repo=pa.icc_repo, sigma_e2=pa.sigma_e2 / d.episodes_per_task, alpha=c.alpha_one_sided,
            min_estimate=c.threshold if c.kind == "dual" else None,
        ).power)  # fmt: skip
    return vals[0], vals[1], (lo_s, hi_s), note
