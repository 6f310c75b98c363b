"""Power and sample size, stated in the plan before anything is trained (STATS §6.3, §7).

Covered:
- ``power_ni_crossed``: analytic power of the crossed seeds × repositories analysis for a criterion whose lower
  bound must exceed a bar (NI: bar = −δ), via the noncentral t on Satterthwaite df;
- ``simulate_power``: Monte Carlo power of the full IUT rule over the three correlated binary endpoints
  (behaviour, code, joint = both), analysed with the same crossed estimator as the confirmatory analysis;
- ``power_ni_independent``: per-arm n for an independent-samples NI comparison (Chow, Shao & Wang 2008, p.90);
- ``power_paired_mcnemar``: number of pairs for McNemar's test (Connor, Biometrics 1987;43:207–211).
Not covered: unequal tasks per repository in the analytic formula (it uses the mean n̄ via the design effect).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats
from statsmodels.stats.power import normal_sample_size_one_tail

from evalsuite.rates import StatsInputError, check_alpha, check_one_sided_alpha
from evalsuite.variance import crossed_effect


@dataclass(frozen=True)
class PowerResult:
    power: float
    se: float
    df: float
    var_total: float


def _check_icc_and_alpha(icc_repo: float, alpha: float) -> None:
    if icc_repo > 1:
        raise StatsInputError(f"icc_repo is a correlation in [0, 1], got {icc_repo!r}")
    check_one_sided_alpha(alpha)


def _check_power(power: float) -> None:
    if not (isinstance(power, (int, float)) and 0.0 < float(power) < 1.0):
        raise StatsInputError(f"power must be in (0, 1) (e.g. 0.8), got {power!r}")


def power_ni_crossed(
    *,
    margin: float,
    seeds_treatment: int,
    seeds_baseline: int,
    n_tasks: int,
    tasks_per_repo: float,
    sigma_seed: float,
    tau: float,
    icc_repo: float,
    sigma_e2: float,
    true_difference: float = 0.0,
    alpha: float = 0.025,
    sigma_seed_baseline: float | None = None,
    min_estimate: float | None = None,
) -> PowerResult:
    """Analytic power of P(L > −margin) for the crossed estimator (STATS §7).

    V = σ²_seed,T/m_T + σ²_seed,C/m_C + τ²·DEFF/n + σ_e²(1/m_T + 1/m_C)/n, DEFF = 1 + (n̄ − 1)ρ;
    ν = Satterthwaite over the seed pieces (df m−1) and the task piece (df G−1, G = n/n̄);
    power = 1 − F_nct(t_{1−α,ν}; ν, λ = (Δ1 + δ)/√V). For a superiority bar X use margin = −X. For the ``dual``
    criterion (L > 0 and Δ̂ >= X) pass margin = 0 and ``min_estimate`` = X: the critical value becomes
    max(t_{1−α,ν}, X/√V), since both conditions are events on the same statistic.
    """
    if min(seeds_treatment, seeds_baseline) < 2:
        raise StatsInputError("power_ni_crossed needs >= 2 seeds per arm (the seed variance has m − 1 df)")
    if n_tasks < 2 or tasks_per_repo <= 0 or n_tasks / tasks_per_repo < 2:
        raise StatsInputError("power_ni_crossed needs n_tasks >= 2 and at least 2 repositories (n_tasks/tasks_per_repo)")
    for name, v in (("sigma_seed", sigma_seed), ("tau", tau), ("sigma_e2", sigma_e2), ("icc_repo", icc_repo)):
        if not (math.isfinite(v) and v >= 0):
            raise StatsInputError(f"{name} must be a finite number >= 0, got {v!r}")
    _check_icc_and_alpha(icc_repo, alpha)
    s_c = sigma_seed if sigma_seed_baseline is None else sigma_seed_baseline
    m_t, m_c, n = seeds_treatment, seeds_baseline, n_tasks
    deff = 1.0 + (tasks_per_repo - 1.0) * icc_repo
    g = n / tasks_per_repo
    v_t = sigma_seed**2 / m_t + sigma_e2 / (m_t * n)
    v_c = s_c**2 / m_c + sigma_e2 / (m_c * n)
    v_task = tau**2 * deff / n
    var = v_t + v_c + v_task
    if var <= 0:
        raise StatsInputError("power_ni_crossed: all variance inputs are 0; state plausible sigma_seed, tau, sigma_e2")
    df = var**2 / (v_t**2 / (m_t - 1) + v_c**2 / (m_c - 1) + v_task**2 / (g - 1))
    lam = (true_difference + margin) / math.sqrt(var)
    crit = float(stats.t.ppf(1 - alpha, df))
    if min_estimate is not None:
        crit = max(crit, (min_estimate + margin) / math.sqrt(var))
    power = float(stats.nct.sf(crit, df, lam))
    return PowerResult(power=power, se=math.sqrt(var), df=float(df), var_total=float(var))


def power_artifact(*, margin: float, n_tasks: int, tasks_per_repo: float, tau: float, icc_repo: float,
                   sigma_e2: float, true_difference: float = 0.0, alpha: float = 0.025,
                   min_estimate: float | None = None) -> PowerResult:  # fmt: skip
    """Analytic power of P(L > −margin) for the artifact estimand (one checkpoint per arm, the paired per-task
    difference clustered by repository on t(G − 1)): V = τ²·DEFF/n + 2σ_e²/n, DEFF = 1 + (n̄ − 1)ρ, no seed piece
    (the estimand conditions on the two checkpoints). ``min_estimate`` as in :func:`power_ni_crossed`."""
    if n_tasks < 2 or tasks_per_repo <= 0 or n_tasks / tasks_per_repo < 2:
        raise StatsInputError("power_artifact needs n_tasks >= 2 and at least 2 repositories (n_tasks/tasks_per_repo)")
    for name, v in (("tau", tau), ("sigma_e2", sigma_e2), ("icc_repo", icc_repo)):
        if not (math.isfinite(v) and v >= 0):
            raise StatsInputError(f"{name} must be a finite number >= 0, got {v!r}")
    _check_icc_and_alpha(icc_repo, alpha)
    deff = 1.0 + (tasks_per_repo - 1.0) * icc_repo
    var = (tau**2 * deff + 2.0 * sigma_e2) / n_tasks
    if var <= 0:
        raise StatsInputError("power_artifact: tau and sigma_e2 are 0; state plausible values")
    df = n_tasks / tasks_per_repo - 1.0
    lam = (true_difference + margin) / math.sqrt(var)
    crit = float(stats.t.ppf(1 - alpha, df))
    if min_estimate is not None:
        crit = max(crit, (min_estimate + margin) / math.sqrt(var))
    return PowerResult(power=float(stats.nct.sf(crit, df, lam)), se=math.sqrt(var), df=float(df), var_total=float(var))


def power_ni_independent(p_t: float, p_c: float, *, margin: float, alpha: float = 0.025, power: float = 0.8) -> float:
    """Per-arm n for H0: p_T − p_C <= −margin (one-sided ``alpha``): n = (p_Tq_T + p_Cq_C)((z_{1−α}+z_{1−β})/(p_T−p_C+δ))²."""
    for name, v in (("p_t", p_t), ("p_c", p_c)):
        if not 0.0 < v < 1.0:
            raise StatsInputError(f"{name} must be in (0, 1), got {v!r}")
    check_one_sided_alpha(alpha)
    _check_power(power)
    diff = p_t - p_c + margin
    if diff <= 0:
        raise StatsInputError(f"true difference {p_t - p_c:+.3f} is not above the NI bar −{margin}: power cannot reach {power}")
    sd = math.sqrt(p_t * (1 - p_t) + p_c * (1 - p_c))
    return float(normal_sample_size_one_tail(diff, power, alpha, std_null=sd))


def power_paired_mcnemar(p01: float, p10: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Number of pairs for a two-sided McNemar test at level ``alpha`` (Connor 1987).

    p01 = P(baseline only succeeds), p10 = P(treatment only succeeds); ψ = p01 + p10, δ = p10 − p01:
    n = (z_{1−α/2}·√ψ + z_{1−β}·√(ψ − δ²))² / δ².
    """
    if not (0 <= p01 <= 1 and 0 <= p10 <= 1 and p01 + p10 <= 1):
        raise StatsInputError(f"discordant probabilities p01={p01}, p10={p10} must be in [0,1] and sum to <= 1")
    check_alpha(alpha)
    _check_power(power)
    delta, psi = p10 - p01, p10 + p01
    if delta == 0:
        raise StatsInputError("p01 == p10: McNemar has no power against a zero difference")
    return float(
        normal_sample_size_one_tail(
            abs(delta), power, alpha / 2, std_null=math.sqrt(psi), std_alternative=math.sqrt(psi - delta**2)
        )
    )


@dataclass(frozen=True)
class SimulatedPower:
    joint_pass: float
    per_endpoint: dict[str, float]
    n_sims: int
    mc_se: float


def _draw_arm(rng: np.random.Generator, base: np.ndarray, seed_sd: float, m: int, k: int) -> np.ndarray:
    """Binary outcomes for one endpoint: logit p = base_t + seed effect; cell means over k episodes (m × n)."""
    logit = base[None, :] + rng.normal(0.0, seed_sd, size=(m, 1))
    return rng.binomial(k, special.expit(logit)) / k


def simulate_power(
    *,
    p_baseline: dict[str, float],
    effect_logit: dict[str, float],
    bars: dict[str, float],
    seeds: int,
    n_repos: int,
    tasks_per_repo: int,
    episodes: int = 1,
    seed_sd_logit: float = 0.1,
    task_sd_logit: float = 1.0,
    repo_sd_logit: float = 0.3,
    n_sims: int = 200,
    alpha: float = 0.025,
    rng: np.random.Generator,
) -> SimulatedPower:
    """Monte Carlo pass probability of the IUT over endpoints 'behaviour_ok' and 'code_ok' (and 'joint_ok' =
    both, computed per episode-cell as the product of the two cell outcomes when episodes = 1).

    Endpoints share task and repository effects (so they are positively correlated, as in practice).
    ``bars`` maps endpoint -> value the one-sided lower bound must exceed (e.g. {'code_ok': -0.03}).
    """
    if episodes != 1 and "joint_ok" in bars:
        raise StatsInputError("simulate_power: the joint endpoint is simulated for episodes = 1 only")
    n = n_repos * tasks_per_repo
    repo = np.repeat(np.arange(n_repos), tasks_per_repo)
    hits = {e: 0 for e in bars}
    joint = 0
    for _ in range(n_sims):
        shared = rng.normal(0, task_sd_logit, n) + rng.normal(0, repo_sd_logit, n_repos)[repo]
        cells: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for e in ("behaviour_ok", "code_ok"):
            base = special.logit(p_baseline[e]) + shared
            cells[e] = (
                _draw_arm(rng, base + effect_logit.get(e, 0.0), seed_sd_logit, seeds, episodes),
                _draw_arm(rng, base, seed_sd_logit, seeds, episodes),
            )
        cells["joint_ok"] = tuple(cells["behaviour_ok"][i] * cells["code_ok"][i] for i in (0, 1))  # type: ignore[assignment]
        ok_all = True
        for e, bar in bars.items():
            est = crossed_effect(cells[e][0], cells[e][1], repo, alpha_one_sided=alpha)
            ok = (not est.degenerate) and est.lower_one_sided > bar
            hits[e] += ok
            ok_all &= ok
        joint += ok_all
    p = joint / n_sims
    return SimulatedPower(p, {e: h / n_sims for e, h in hits.items()}, n_sims, math.sqrt(p * (1 - p) / n_sims))
