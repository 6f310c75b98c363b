"""Monte Carlo checks of the primary estimators: the type-I error of the non-inferiority test at its margin.

Model (the audit's, issue #15): logit p = μ_arm + seed effect (nested in arm) + repository and task effects (shared
by the arms) + task × arm and repository × arm interactions; K Bernoulli episodes per (seed, task) cell. μ_T is set
so that the *marginal* rates differ by exactly −δ (the boundary of H0), computed by Gauss–Hermite quadrature over
the random effects. The artifact design draws one checkpoint per arm (its seed effect is part of the checkpoint,
so the estimand conditions on it: the seed effect is set to 0 there).

Covered: method (crossed) and artifact (paired) designs, the score-type estimator used by the analysis under
either variance rule (``score``, ``score_components``; the artifact estimand has only ``score``) and the plain
Wald-t estimator for comparison; the power of superiority at given marginal rates (``superiority_power``). Not covered: unequal repository sizes, missing cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize, special

from evalsuite.score_variance import crossed_score, paired_score
from evalsuite.variance import crossed_effect, paired_clustered_diff

Estimator = Literal["score", "score_components", "wald"]


@dataclass(frozen=True)
class SimDesign:
    """A design and its variance components (logit scale)."""

    estimand: Literal["method", "artifact"]
    seeds: int
    n_repos: int
    tasks_per_repo: int
    episodes: int = 1
    seed_sd: float = 0.3
    task_sd: float = 1.0
    repo_sd: float = 0.5
    task_arm_sd: float = 0.3
    repo_arm_sd: float = 0.2


@dataclass(frozen=True)
class TypeOneResult:
    baseline: float
    margin: float
    rejections: int
    n_sims: int
    rate: float
    mc_se: float
    undefined: int  # replications where the estimator gave no bound (counted as no rejection)


def _marginal(mu: float, sd: float) -> float:
    x, w = np.polynomial.hermite_e.hermegauss(60)
    return float(np.sum(w * special.expit(mu + sd * x)) / math.sqrt(2 * math.pi))


def _arm_sd(d: SimDesign) -> float:
    seed = d.seed_sd if d.estimand == "method" else 0.0
    return math.sqrt(seed**2 + d.task_sd**2 + d.repo_sd**2 + d.task_arm_sd**2 + d.repo_arm_sd**2)


def _logit_for(d: SimDesign, rate: float) -> float:
    """μ whose marginal rate over the design's random effects is ``rate``."""
    sd = _arm_sd(d)
    return float(optimize.brentq(lambda m: _marginal(m, sd) - rate, -40, 40))


def null_logits(d: SimDesign, baseline: float, margin: float) -> tuple[float, float]:
    """(μ_T, μ_C) with marginal rates baseline − margin and baseline. When baseline <= margin the null's treatment
    rate would be <= 0; it is set to 1e-4 (0.01 points inside H1, so the reported rate slightly over-states the
    type-I error there)."""
    return _logit_for(d, max(baseline - margin, 1e-4)), _logit_for(d, baseline)


def draw(d: SimDesign, mu_t: float, mu_c: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One replication: (yt, yc, repo) with seed × task cell means."""
    n = d.n_repos * d.tasks_per_repo
    repo = np.repeat(np.arange(d.n_repos), d.tasks_per_repo)
    shared = rng.normal(0, d.task_sd, n) + rng.normal(0, d.repo_sd, d.n_repos)[repo]
    seed_sd = d.seed_sd if d.estimand == "method" else 0.0
    out = []
    for mu in (mu_t, mu_c):
        inter = rng.normal(0, d.task_arm_sd, n) + rng.normal(0, d.repo_arm_sd, d.n_repos)[repo]
        logit = mu + shared + inter + rng.normal(0, seed_sd, (d.seeds, 1))
        out.append(rng.binomial(d.episodes, special.expit(logit)) / d.episodes)
    return out[0], out[1], repo


def _lower(d: SimDesign, yt: np.ndarray, yc: np.ndarray, repo: np.ndarray, estimator: Estimator) -> float:
    if d.estimand == "method":
        e = (crossed_effect(yt, yc, repo) if estimator == "wald"
             else crossed_score(yt, yc, repo, k=d.episodes, variance=estimator))  # fmt: skip
    else:
        e = (paired_clustered_diff(yt[0], yc[0], repo) if estimator == "wald"
             else paired_score(yt[0], yc[0], repo, k=d.episodes))  # fmt: skip
    return math.nan if e.degenerate else e.lower_one_sided


def type_one_error(d: SimDesign, *, baseline: float, margin: float, n_sims: int, rng: np.random.Generator,
                   estimator: Estimator = "score", min_baseline_rate: float = 0.0,
                   max_baseline_rate: float = 1.0) -> TypeOneResult:  # fmt: skip
    """Share of replications at the NI boundary (true Δ = −margin) whose lower bound exceeds −margin.

    Like the analysis, a replication is not evaluated (no rejection, counted in ``undefined``) when both arms are
    constant or the observed baseline rate is outside [min_baseline_rate, max_baseline_rate] (the plan's assay
    sensitivity check).
    """
    mu_t, mu_c = null_logits(d, baseline, margin)
    if d.estimand == "artifact" and d.seeds != 1:
        raise ValueError("the artifact design compares one checkpoint per arm: seeds must be 1")
    hits = undefined = 0
    for _ in range(n_sims):
        yt, yc, repo = draw(d, mu_t, mu_c, rng)
        if np.ptp(np.concatenate([yt.ravel(), yc.ravel()])) == 0 or not (
                min_baseline_rate <= float(np.mean(yc)) <= max_baseline_rate):
            undefined += 1
            continue
        low = _lower(d, yt, yc, repo, estimator)
        if math.isnan(low):
            undefined += 1
        elif low > -margin:
            hits += 1
    rate = hits / n_sims
    return TypeOneResult(baseline, margin, hits, n_sims, rate, math.sqrt(max(rate * (1 - rate), 1e-12) / n_sims),
                         undefined)  # fmt: skip


def _superiority_hits(d: SimDesign, mu_t: float, mu_c: float, *, n_sims: int, rng: np.random.Generator,
                      min_events: int, estimator: Estimator) -> tuple[int, int]:
    """(replications whose superiority bound is above 0, replications not evaluated) at logits ``mu_t``, ``mu_c``.

    Like the analysis (``evalsuite.checks.not_evidence``), a replication is not evaluated (no rejection) when both
    arms are constant or the two arms together have fewer than ``min_events`` of the rarer outcome (successes or
    failures), or when the estimator gives no bound."""
    if d.estimand == "artifact" and d.seeds != 1:
        raise ValueError("the artifact design compares one checkpoint per arm: seeds must be 1")
    hits = undefined = 0
    for _ in range(n_sims):
        yt, yc, repo = draw(d, mu_t, mu_c, rng)
        both = np.concatenate([yt.ravel(), yc.ravel()]) * d.episodes
        events = min(float(both.sum()), float(d.episodes * both.size - both.sum()))
        if np.ptp(both) == 0 or events < min_events:
            undefined += 1
            continue
        low = _lower(d, yt, yc, repo, estimator)
        if math.isnan(low):
            undefined += 1
        elif low > 0:
            hits += 1
    return hits, undefined


def superiority_type_one_error(d: SimDesign, *, baseline: float, n_sims: int, rng: np.random.Generator,
                               min_events: int = 0, estimator: Estimator = "score") -> TypeOneResult:  # fmt: skip
    """Share of replications with equal marginal rates (true Δ = 0) whose lower bound exceeds 0 (superiority);
    replications that are not evidence (``_superiority_hits``) are counted in ``undefined``."""
    mu = _logit_for(d, baseline)
    hits, undefined = _superiority_hits(d, mu, mu, n_sims=n_sims, rng=rng, min_events=min_events,
                                        estimator=estimator)  # fmt: skip
    rate = hits / n_sims
    return TypeOneResult(baseline, 0.0, hits, n_sims, rate, math.sqrt(max(rate * (1 - rate), 1e-12) / n_sims),
                         undefined)  # fmt: skip


def superiority_power(d: SimDesign, *, p_t: float, p_c: float, n_sims: int, rng: np.random.Generator,
                      min_events: int = 0, estimator: Estimator = "score") -> float:
    """Share of replications at marginal rates ``p_t``, ``p_c`` whose superiority bound is above 0 (replications
    that are not evidence never reject)."""
    hits, _ = _superiority_hits(d, _logit_for(d, p_t), _logit_for(d, p_c), n_sims=n_sims, rng=rng,
                                min_events=min_events, estimator=estimator)  # fmt: skip
    return hits / n_sims
