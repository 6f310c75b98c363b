"""Seeds × repositories uncertainty: the crossed estimator, the paired clustered estimator, variance components.

Covered (STATS §3.3): the primary method-level estimator Δ̂ = mean(Y_T) − mean(Y_C) over seed × task cell means,
with V = v_T + v_C + max(v_task − v_int, 0) and a Satterthwaite t (Cameron–Gelbach–Miller two-way rule with
small-sample-unbiased pieces); the artifact-level paired difference clustered by repository with a t_{G−1}
(Miller 2024, M2+M4); balanced random-effects ANOVA variance components per arm. Not covered: unbalanced
designs (every seed must have every task — ``outcomes.py`` enforces it), designs with < 2 seeds per arm or
< 2 repositories for the method estimand (an error, never a number).

References: Satterthwaite FE, Biometrics Bull 1946;2:110–114; Cameron AC, Gelbach JB, Miller DL, JBES
2011;29:238–249; Bell RM, McCaffrey DF, Surv Methodol 2002;28:169–181; Searle, Casella & McCulloch,
Variance Components (1992); Miller E, arXiv:2411.00640.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import stats

from evalsuite.rates import StatsInputError

DfRule = Literal["satterthwaite", "conservative"]
_TINY = 1e-15


@dataclass(frozen=True)
class EffectEstimate:
    """Estimate of Δ = treatment − baseline with its CI and the variance split (STATS §8.1)."""

    endpoint: str
    estimand: Literal["method", "artifact"]
    estimate: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    alpha: float
    lower_one_sided: float
    alpha_one_sided: float
    var_total: float
    var_training_seeds: float
    var_task_given_ckpts: float
    n_seeds: tuple[int, int]
    n_tasks: int
    n_repos: int
    method: str
    degenerate: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    # one-sided p-value function of the null value for estimators whose test is not the Wald t (score-type
    # variance, binomial fallbacks); None = the Wald t on ``df`` below
    p_fn: Callable[[float], float] | None = field(default=None, compare=False, repr=False)

    def p_value(self, null_value: float) -> float:
        """One-sided p for H0: Δ <= null_value vs H1: Δ > null_value (``p_fn``, else t on ``df``); NaN if degenerate."""
        if self.p_fn is not None and not self.degenerate:
            return float(self.p_fn(null_value))
        if self.degenerate or not self.se > 0:
            return math.nan
        t = (self.estimate - null_value) / self.se
        return float(stats.t.sf(t, self.df))


def check_matrix(y: np.ndarray, name: str) -> np.ndarray:
    """A finite 2-D float matrix (seeds × tasks), else :class:`StatsInputError` naming ``name``."""
    arr = np.asarray(y)
    if arr.dtype.kind not in "biuf":
        raise StatsInputError(f"{name} must be numeric (bool/int/float), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise StatsInputError(f"{name} must be a 2-D seeds × tasks matrix, got shape {arr.shape}")
    arr = arr.astype(float)
    if arr.size == 0:
        raise StatsInputError(f"{name} is empty (shape {arr.shape}): an arm with no seeds or no tasks")
    bad = ~np.isfinite(arr)
    if bad.any():
        s, t = np.argwhere(bad)[0]
        raise StatsInputError(f"{name} has NaN/inf at seed row {s}, task column {t}: a missing cell; fix the data")
    return arr


def check_repo(repo: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    repo = np.asarray(repo)
    if repo.ndim != 1 or repo.shape[0] != n:
        raise StatsInputError(f"repo must have one label per task ({n}), got shape {repo.shape}")
    _, inv = np.unique(repo.astype(str), return_inverse=True)
    return inv, int(inv.max()) + 1


def _residual_ms(y: np.ndarray) -> float:
    m, n = y.shape
    if m < 2 or n < 2:
        return 0.0
    r = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    return float(np.sum(r**2) / ((m - 1) * (n - 1)))


def task_weights(repo_inv: np.ndarray, n_groups: int, weighting: Literal["task", "repo"]) -> np.ndarray:
    """Task weights summing to 1: equal per task, or equal per repository (split equally within it)."""
    n = repo_inv.shape[0]
    if weighting == "task":
        return np.full(n, 1.0 / n)
    counts = np.bincount(repo_inv, minlength=n_groups).astype(float)
    return 1.0 / (n_groups * counts[repo_inv])


def _check_crossed(yt: np.ndarray, yc: np.ndarray, repo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    yt, yc = check_matrix(yt, "treatment matrix"), check_matrix(yc, "baseline matrix")
    (m_t, n), (m_c, n_c) = yt.shape, yc.shape
    if n != n_c:
        raise StatsInputError(f"treatment has {n} tasks, baseline {n_c}: both arms need the same task columns")
    if m_t < 2 or m_c < 2:
        raise StatsInputError(
            f"crossed_effect needs >= 2 training seeds per arm (got treatment {m_t}, baseline {m_c}); the method "
            "estimand cannot be estimated from one seed — add seeds or preregister the artifact estimand"
        )
    inv, g = check_repo(repo, n)
    if g < 2:
        raise StatsInputError("crossed_effect needs tasks from >= 2 repositories to estimate task-sampling variance")
    return yt, yc, inv, g


def crossed_effect(
    yt: np.ndarray,
    yc: np.ndarray,
    repo: np.ndarray,
    *,
    alpha: float = 0.05,
    alpha_one_sided: float = 0.025,
    df_rule: DfRule = "satterthwaite",
    weighting: Literal["task", "repo"] = "task",
    endpoint: str = "",
) -> EffectEstimate:
    """Crossed seeds × repositories estimator of the method-level Δ with a t on Satterthwaite df (STATS §3.3).

    ``yt`` (m_T × n) and ``yc`` (m_C × n) are seed × task cell means (mean of K episodes), tasks in the same
    column order for both arms; ``repo`` labels each task's cluster. H0: Δ <= Δ0 vs H1: Δ > Δ0 is tested by
    ``EffectEstimate.p_value``; the decision uses ``lower_one_sided`` = Δ̂ − t_{1−α1,ν}·√V.
    Degenerate data (V = 0) returns ``degenerate=True`` with NaN df and a note; callers must fall back.
    """
    yt, yc, inv, g = _check_crossed(yt, yc, repo)
    (m_t, n), m_c = yt.shape, yc.shape[0]
    w = task_weights(inv, g, weighting)
    seed_t, seed_c = yt @ w, yc @ w
    est = float(seed_t.mean() - seed_c.mean())
    v_t = float(np.var(seed_t, ddof=1) / m_t)
    v_c = float(np.var(seed_c, ddof=1) / m_c)
    d = yt.mean(axis=0) - yc.mean(axis=0)
    sums = np.bincount(inv, weights=w * (d - float(w @ d)), minlength=g)
    v_task = float(g / (g - 1) * np.sum(sums**2))
    sw2 = float(np.sum(w**2))
    v_int = _residual_ms(yt) * sw2 / m_t + _residual_ms(yc) * sw2 / m_c
    v_extra = max(v_task - v_int, 0.0)
    var = v_t + v_c + v_extra
    notes: list[str] = []
    degenerate = var <= _TINY
    if degenerate:
        df = math.nan
        notes.append("V = 0: all seed means equal and the per-task differences constant; no CI from this estimator")
    elif df_rule == "conservative":
        df = float(min(m_t, m_c) - 1)
    else:
        denom = v_t**2 / (m_t - 1) + v_c**2 / (m_c - 1) + v_extra**2 / (g - 1)
        df = var**2 / denom
    se = math.sqrt(var)
    ci_low, ci_high, lower = _t_limits(est, se, df, alpha, alpha_one_sided, degenerate)
    v_task_ckpt = min(v_task, var)
    return EffectEstimate(
        endpoint=endpoint, estimand="method", estimate=est, se=se, df=df, ci_low=ci_low, ci_high=ci_high,
        alpha=alpha, lower_one_sided=lower, alpha_one_sided=alpha_one_sided, var_total=var,
        var_training_seeds=var - v_task_ckpt, var_task_given_ckpts=v_task_ckpt, n_seeds=(m_t, m_c),
        n_tasks=n, n_repos=g, degenerate=degenerate, notes=tuple(notes),
        method=f"crossed seeds x repos, {'Satterthwaite' if df_rule == 'satterthwaite' else 'conservative'} t"
        + (", repo-weighted" if weighting == "repo" else ""),
    )  # fmt: skip


def task_piece_split(yt: np.ndarray, yc: np.ndarray, repo: np.ndarray,
                     weighting: Literal["task", "repo"] = "task") -> tuple[float, float, float]:
    """(τ_T, τ_C, c): the crossed estimator's task piece split by arm, so that τ_T + τ_C − 2c = v_task − v_int.

    τ_a is the repository-clustered variance of arm a's weighted task means less that arm's share of v_int (its
    seed × task residual), c the clustered covariance of the two arms' task means: the pieces the
    ``score_components`` rule scales by each arm's own ratio (``score_variance``)."""
    yt, yc, inv, g = _check_crossed(yt, yc, repo)
    w = task_weights(inv, g, weighting)
    sw2 = float(np.sum(w**2))
    sums = [np.bincount(inv, weights=w * (y.mean(axis=0) - float(w @ y.mean(axis=0))), minlength=g) for y in (yt, yc)]
    k = g / (g - 1)
    tau_t = k * float(np.sum(sums[0] ** 2)) - _residual_ms(yt) * sw2 / yt.shape[0]
    tau_c = k * float(np.sum(sums[1] ** 2)) - _residual_ms(yc) * sw2 / yc.shape[0]
    return tau_t, tau_c, k * float(np.sum(sums[0] * sums[1]))


def _t_limits(
    est: float, se: float, df: float, alpha: float, alpha1: float, degenerate: bool
) -> tuple[float, float, float]:
    if degenerate:
        return math.nan, math.nan, math.nan
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    return est - half, est + half, est - float(stats.t.ppf(1 - alpha1, df)) * se


def paired_clustered_diff(
    ya: np.ndarray,
    yb: np.ndarray,
    clusters: np.ndarray,
    *,
    alpha: float = 0.05,
    alpha_one_sided: float = 0.025,
    endpoint: str = "",
) -> EffectEstimate:
    """Artifact-level Δ: mean of d_t = ya_t − yb_t with a repository-clustered SE (Miller M2+M4, ×G/(G−1)) and
    a t_{G−1} critical value. ``ya``/``yb`` are per-task scores (cell means) of the two checkpoints.
    """
    ya = check_matrix(np.atleast_2d(ya), "treatment scores")[0]
    yb = check_matrix(np.atleast_2d(yb), "baseline scores")[0]
    if ya.shape != yb.shape:
        raise StatsInputError(f"paired scores need equal length, got {ya.shape} and {yb.shape}")
    inv, g = check_repo(clusters, ya.shape[0])
    if g < 2:
        raise StatsInputError("paired_clustered_diff needs tasks from >= 2 repositories")
    d = ya - yb
    n = d.shape[0]
    sums = np.bincount(inv, weights=d - d.mean(), minlength=g)
    var = float(g / (g - 1) * np.sum(sums**2) / n**2)
    degenerate = var <= _TINY
    df = float(g - 1)
    se = math.sqrt(var)
    est = float(d.mean())
    ci_low, ci_high, lower = _t_limits(est, se, df, alpha, alpha_one_sided, degenerate)
    notes = ("V = 0: per-task differences constant within the clustering; no CI from this estimator",) if degenerate else ()
    return EffectEstimate(
        endpoint=endpoint, estimand="artifact", estimate=est, se=se, df=df, ci_low=ci_low, ci_high=ci_high,
        alpha=alpha, lower_one_sided=lower, alpha_one_sided=alpha_one_sided, var_total=var,
        var_training_seeds=0.0, var_task_given_ckpts=var, n_seeds=(1, 1), n_tasks=n, n_repos=g,
        method="paired difference clustered by repository, t(G-1)", degenerate=degenerate, notes=notes,
    )  # fmt: skip


@dataclass(frozen=True)
class Components:
    seed: float
    task: float
    resid: float
    icc_seed: float


def variance_components(y: np.ndarray) -> Components:
    """Balanced random-effects ANOVA (no replication) of one arm's seeds × tasks cell means, truncated at 0.

    MS_S = n·Var_s(Ȳ_s·), MS_T = m·Var_t(Ȳ_·t); σ²_seed = (MS_S − MS_E)/n, σ²_task = (MS_T − MS_E)/m,
    σ²_resid = MS_E (seed × task interaction plus episode noise). Needs >= 2 seeds and >= 2 tasks.
    """
    y = check_matrix(y, "arm matrix")
    m, n = y.shape
    if m < 2 or n < 2:
        raise StatsInputError(f"variance_components needs >= 2 seeds and >= 2 tasks, got shape {y.shape}")
    ms_e = _residual_ms(y)
    ms_s = n * float(np.var(y.mean(axis=1), ddof=1))
    ms_t = m * float(np.var(y.mean(axis=0), ddof=1))
    seed = max((ms_s - ms_e) / n, 0.0)
    task = max((ms_t - ms_e) / m, 0.0)
    total = seed + task + ms_e
    return Components(seed=seed, task=task, resid=ms_e, icc_seed=seed / total if total > 0 else math.nan)
