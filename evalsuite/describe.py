"""Descriptive parts of the analysis: per-arm rates (Wilson CI + repository-clustered SE), per-seed rates, the
behaviour × code 2×2 table, exploratory breakdowns (repository, difficulty, template tier), secondary endpoints.

Everything here is descriptive or exploratory: breakdowns pool episodes (no seed or cluster adjustment) and are
labelled so; secondary endpoints use the crossed estimator when the design allows it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from evalsuite.outcomes import OutcomeTable
from evalsuite.rates import StatsInputError, rd_ci, se_clustered, wilson_ci
from evalsuite.schema import ArmSummary, BreakdownRow, JointTable, RateCI, SecondaryResult, SeedRate
from evalsuite.variance import crossed_effect

BINARY = ("behaviour_ok", "code_ok", "joint_ok")


def rate_ci(y: pd.Series, endpoint: str, clusters: pd.Series | None = None) -> RateCI:
    n = int(len(y))
    k = float(y.sum())
    if n == 0:
        return RateCI(endpoint=endpoint, successes=0, n=0, rate=None, method="wilson (no episodes)")
    lo, hi = wilson_ci(int(round(k)), n)
    se = None
    if clusters is not None and clusters.nunique() >= 2:
        se = se_clustered(y.to_numpy(dtype=float), clusters.to_numpy())
    return RateCI(endpoint=endpoint, successes=k, n=n, rate=k / n, ci_low=lo, ci_high=hi, se_clustered=se)


def joint_table(ep: pd.DataFrame) -> JointTable:
    b, c = ep["behaviour_ok"].astype(bool), ep["code_ok"].astype(bool)
    return JointTable(both=int((b & c).sum()), behaviour_only=int((b & ~c).sum()), code_only=int((~b & c).sum()),
                      neither=int((~b & ~c).sum()))  # fmt: skip


def arm_summaries(table: OutcomeTable) -> list[ArmSummary]:
    out = []
    for role, arm in table.arms.items():
        ep = table.episodes[table.episodes["arm"] == arm]
        rates = [rate_ci(ep[e], e, ep["repo"]) for e in BINARY]
        per_seed = []
        for s in table.seeds[arm]:
            sub = ep[ep["train_seed"] == s]
            for e in BINARY:
                r = rate_ci(sub[e], e)
                per_seed.append(SeedRate(seed=s, endpoint=e, successes=r.successes, n=r.n, rate=r.rate,
                                         ci_low=r.ci_low, ci_high=r.ci_high))  # fmt: skip
        out.append(ArmSummary(arm=arm, role=role, seeds=table.seeds[arm], n_scored_episodes=len(ep),  # type: ignore[arg-type]
                              rates=rates, per_seed=per_seed, joint_table=joint_table(ep)))  # fmt: skip
    return out


def breakdowns(table: OutcomeTable) -> list[BreakdownRow]:
    ep = table.episodes
    t_arm, c_arm = table.arms["treatment"], table.arms["baseline"]
    rows = []
    by_cols: tuple[Literal["repo", "difficulty", "template_tier", "stratum"], ...] = (
        "repo", "difficulty", "template_tier", "stratum")
    for by in by_cols:
        if by not in ep.columns:  # "stratum": tables built before it existed
            continue
        levels = sorted(ep[by].astype(str).unique())
        if by != "repo" and len(levels) < 2:
            continue
        for level in levels:
            sub = ep[ep[by].astype(str) == level]
            t, c = sub[sub["arm"] == t_arm], sub[sub["arm"] == c_arm]
            for e in BINARY:
                rt, rc = rate_ci(t[e], e), rate_ci(c[e], e)
                est = lo = hi = None
                if rt.n and rc.n:
                    est = rt.rate - rc.rate  # type: ignore[operator]
                    lo, hi = rd_ci(int(round(rt.successes)), rt.n, int(round(rc.successes)), rc.n, method="newcombe")
                rows.append(BreakdownRow(by=by, level=level, endpoint=e, n_tasks=int(sub["instance_id"].nunique()),
                                         treatment=rt, baseline=rc, estimate=est, ci_low=lo, ci_high=hi))  # fmt: skip
    return rows


def secondary(table: OutcomeTable, endpoints: Sequence[str], *, alpha_one_sided: float = 0.025) -> list[SecondaryResult]:
    ep = table.episodes
    out = []
    for e in endpoints:
        t = ep.loc[ep["role"] == "treatment", e].dropna()
        c = ep.loc[ep["role"] == "baseline", e].dropna()
        tm = float(t.mean()) if len(t) else None
        cm = float(c.mean()) if len(c) else None
        est = lo = hi = None
        method, note = "", ""
        if tm is not None and cm is not None:
            est = tm - cm
            yt, yc = table.cell_matrix(e, "treatment"), table.cell_matrix(e, "baseline")
            if np.isfinite(yt).all() and np.isfinite(yc).all():
                try:
                    r = crossed_effect(yt, yc, table.repo_labels(), alpha_one_sided=alpha_one_sided, endpoint=e)
                    if not r.degenerate:
                        est, lo, hi, method = r.estimate, r.ci_low, r.ci_high, r.method
                except StatsInputError as exc:
                    note = str(exc)
            else:
                note = "some seed x task cells have no value for this metric; difference of episode means, no CI"
        if est is not None and not math.isfinite(est):
            est = None
        out.append(SecondaryResult(endpoint=e, treatment_mean=tm, baseline_mean=cm, estimate=est, ci_low=lo,
                                   ci_high=hi, method=method, n_treatment=len(t), n_baseline=len(c), note=note))  # fmt: skip
    return out
