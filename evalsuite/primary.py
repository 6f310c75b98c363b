"""The preregistered primary estimate of one criterion from an outcome table (STATS §8.2), and its fallback.

Order: (1) no complete task → not estimable; (2) data that cannot be evidence (``checks.not_evidence``: both arms
constant, a baseline rate outside the plan's assay-sensitivity range) → not evaluated, with the reason; (3) the
method estimand: the crossed seeds × repositories estimator with the score-type variance
(``score_variance.crossed_score``); the artifact estimand: the paired repository-clustered difference of the two
artifact checkpoints, score-type likewise; (4) when that variance is 0, the plan's ``decision.fallback_method``:
``newcombe`` (episodes pooled over the analysed seeds — for the artifact estimand only the two artifact seeds) or
``tango`` (the artifact checkpoints' paired table; the plan schema allows it only with K = 1). Fallback p-values
come from the same method (Newcombe: the level at which its lower limit meets the null; Tango: its score z).
"""

from __future__ import annotations

import math

from scipy import optimize, stats

from evalsuite.checks import not_evidence
from evalsuite.noninferiority import paired_table, rd_ci_paired, tango_z
from evalsuite.outcomes import OutcomeTable
from evalsuite.rates import StatsInputError, rd_ci
from evalsuite.score_variance import crossed_score, paired_score
from evalsuite.variance import EffectEstimate
from protocols.schema import CriterionSpec, Protocol


def blank_estimate(endpoint: str, estimand: str, reason: str, a1: float) -> EffectEstimate:
    """An estimate that cannot be used (``degenerate``), carrying ``reason``."""
    nan = math.nan
    return EffectEstimate(endpoint, estimand, nan, nan, nan, nan, nan, 0.05, nan, a1, nan, nan, nan, (0, 0), 0, 0,  # type: ignore[arg-type]
                          "not estimable", True, (reason,))  # fmt: skip


def newcombe_p(x1: int, n1: int, x2: int, n2: int, null: float) -> float:
    """One-sided p of H0: Δ <= null from Newcombe's hybrid interval: the α at which its one-sided (1 − α) lower
    limit equals ``null`` (capped at 0.5 when the estimate is at or below the null)."""

    def f(a: float) -> float:
        return rd_ci(x1, n1, x2, n2, method="newcombe", alpha=2 * a)[0] - null

    lo, hi = 1e-12, 0.4999
    if f(hi) <= 0:
        return 0.5
    if f(lo) > 0:
        return lo
    return float(optimize.brentq(f, lo, hi, xtol=1e-12))


def fallback_estimate(table: OutcomeTable, c: CriterionSpec, proto: Protocol, e: EffectEstimate) -> EffectEstimate:
    """The plan's ``decision.fallback_method`` when the primary variance is 0 (module docstring)."""
    ep, endpoint, method = table.episodes, c.endpoint, proto.decision.fallback_method
    if proto.estimand == "artifact":
        st, sc = proto.arm("treatment").artifact_seed, proto.arm("baseline").artifact_seed
        keep = ((ep["role"] == "treatment") & (ep["train_seed"] == st)) | ((ep["role"] == "baseline") & (ep["train_seed"] == sc))
        ep = ep[keep]
    if method == "tango":
        seeds_t, seeds_c = table.seeds[table.arms["treatment"]], table.seeds[table.arms["baseline"]]
        yt = table.cell_matrix(endpoint, "treatment")[seeds_t.index(proto.arm("treatment").artifact_seed)]  # type: ignore[arg-type]
        yc = table.cell_matrix(endpoint, "baseline")[seeds_c.index(proto.arm("baseline").artifact_seed)]  # type: ignore[arg-type]
        a, b, cc, d = paired_table(yt.astype(int), yc.astype(int))
        lo, hi = rd_ci_paired(a, b, cc, d, method="tango")
        low1 = rd_ci_paired(a, b, cc, d, method="tango", alpha=2 * c.alpha_one_sided)[0]
        n = a + b + cc + d

        def p_fn(null: float) -> float:
            return float(stats.norm.sf(tango_z(b, cc, n, null)))

        name = "tango score (paired artifact checkpoints), fallback"
    else:
        t, cb = ep.loc[ep["role"] == "treatment", endpoint], ep.loc[ep["role"] == "baseline", endpoint]
        x1, n1, x2, n2 = int(t.sum()), len(t), int(cb.sum()), len(cb)
        lo, hi = rd_ci(x1, n1, x2, n2, method="newcombe")
        low1 = rd_ci(x1, n1, x2, n2, method="newcombe", alpha=2 * c.alpha_one_sided)[0]

        def p_fn(null: float) -> float:
            return newcombe_p(x1, n1, x2, n2, null)

        name = ("newcombe (the two artifact checkpoints' episodes), fallback" if proto.estimand == "artifact"
                else "newcombe (episodes pooled over seeds), fallback")  # fmt: skip
    note = f"primary variance was 0 ({'; '.join(e.notes)}); used {name} as preregistered (decision.fallback_method)"
    return EffectEstimate(endpoint, e.estimand, e.estimate, math.nan, math.nan, lo, hi, 0.05, low1,
                          c.alpha_one_sided, 0.0, 0.0, 0.0, e.n_seeds, e.n_tasks, e.n_repos, name, False, (note,),
                          p_fn=p_fn)  # fmt: skip


def primary_estimate(table: OutcomeTable, c: CriterionSpec, proto: Protocol) -> EffectEstimate:
    """The preregistered estimate of criterion ``c`` (module docstring for the order of the rules)."""
    e_id, a1 = c.endpoint, c.alpha_one_sided
    if not table.tasks:
        return blank_estimate(e_id, proto.estimand, "no task has results in every arm x seed", a1)
    why = not_evidence(table, c, proto)
    if why is not None:
        return blank_estimate(e_id, proto.estimand, why, a1)
    yt, yc, repo = table.cell_matrix(e_id, "treatment"), table.cell_matrix(e_id, "baseline"), table.repo_labels()
    try:
        if proto.estimand == "method":
            est = crossed_score(yt, yc, repo, k=table.k, alpha_one_sided=a1, df_rule=proto.decision.df_rule,
                                weighting=proto.weighting, endpoint=e_id, variance=proto.decision.variance)  # fmt: skip
        else:
            st, sc = proto.arm("treatment").artifact_seed, proto.arm("baseline").artifact_seed
            seeds_t, seeds_c = table.seeds[table.arms["treatment"]], table.seeds[table.arms["baseline"]]
            if st not in seeds_t or sc not in seeds_c:
                return blank_estimate(e_id, "artifact", f"artifact seeds {st}/{sc} not found (have {seeds_t}/{seeds_c})", a1)
            est = paired_score(yt[seeds_t.index(st)], yc[seeds_c.index(sc)], repo, k=table.k, alpha_one_sided=a1,
                               endpoint=e_id)  # fmt: skip
    except StatsInputError as exc:
        return blank_estimate(e_id, proto.estimand, str(exc), a1)
    if est.degenerate:
        return fallback_estimate(table, c, proto, est)
    return est
