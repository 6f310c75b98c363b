"""Exploratory study analyses used by the reproduction (labelled exploratory in every report).

- ``noisy_feedback_study``: compliance and coding success against the hint mix (correct, irrelevant, wrong, or
  mixtures labelled ``wrong=<fraction>``), Wilson CIs per (arm, kind), and a Cochran–Armitage trend test per arm
  over hint quality. Input: an episode DataFrame with columns arm, feedback_kind, behaviour_ok, code_ok (from
  ``episode_frame(run_dirs)``; ``EpisodeResult.feedback_kind`` carries the kind). Episodes are treated as
  independent (no seed/repository adjustment) — fine for a dose-response picture, not for a ship decision.
- ``equal_compute_study``: per-arm compute (rollout, teacher-forward and trainer tokens, FLOPs, wall time, peak
  memory, tuning trials) from :class:`CheckpointEval` rows, and arm comparisons at matched compute: each seed's
  latest checkpoint within the budget, seeds as units, Welch t on seed rates.
- ``can_do_study``: the same held-out states with a plain and a corrective prompt; paired change per endpoint
  (Tango score CI, exact McNemar p). Input: :class:`CanDoRow` rows.

References: Armitage P, Biometrics 1955;11:375–386; Tango 1998; Welch BL, Biometrika 1947;34:28–35.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from evalsuite.noninferiority import mcnemar_test, rd_ci_paired
from evalsuite.rates import StatsInputError
from evalsuite.schema import (
    CanDoResult,
    CanDoRow,
    CheckpointEval,
    ComputeRow,
    EqualComputeResult,
    Exploratory,
    MatchedComparison,
    NoisyFeedbackResult,
    NoisyFeedbackRow,
    PairedChange,
    TrendTest,
)  # fmt: skip
from harness.rundir import load_run

_KIND_SCORE = {"correct": 0.0, "irrelevant": 0.5, "wrong": 1.0}
_MIX = re.compile(r"^wrong=(?P<f>[0-9.]+)$")


def episode_frame(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Scored episodes (highest attempt) of the runs as a DataFrame; a runner arm '<arm>@s<seed>' is split into
    ``arm`` and ``train_seed`` (else ``train_seed`` is the manifest's ``ArmSpec.train_seed`` or -1)."""
    rows = []
    for d in run_dirs:
        run = load_run(d)
        specs = {a.name: a.train_seed for a in run.need_manifest().arms}
        for r in run.results:
            if r.scored:
                arm, _, seed = r.arm.partition("@s")
                train_seed = int(seed) if seed.isdigit() else specs.get(r.arm) if specs.get(r.arm) is not None else -1
                rows.append({"arm": arm if seed.isdigit() else r.arm, "train_seed": train_seed,
                             "instance_id": r.instance_id, "repo": r.cluster or r.repo,
                             "feedback_kind": r.feedback_kind or "", "behaviour_ok": r.behaviour_ok,
                             "code_ok": r.resolved, "joint_ok": r.joint_ok})  # fmt: skip
    cols = ["arm", "train_seed", "instance_id", "repo", "feedback_kind", "behaviour_ok", "code_ok", "joint_ok"]
    return pd.DataFrame(rows, columns=cols)


def wrong_fraction(kind: str) -> float:
    """Hint-quality score: correct 0, irrelevant 0.5, wrong 1, 'wrong=<f>' f. Unknown kinds raise."""
    if kind in _KIND_SCORE:
        return _KIND_SCORE[kind]
    m = _MIX.match(kind)
    if m and 0.0 <= float(m["f"]) <= 1.0:
        return float(m["f"])
    raise StatsInputError(f"feedback_kind {kind!r}: use correct, irrelevant, wrong or 'wrong=<fraction in [0,1]>'")


def cochran_armitage(successes: np.ndarray, totals: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """Two-sided Cochran–Armitage trend test; returns (z, p). H0: the success rate does not change with score."""
    x, n, s = (np.asarray(a, dtype=float) for a in (successes, totals, scores))
    big_n = n.sum()
    p = x.sum() / big_n
    s_bar = (n * s).sum() / big_n
    var = p * (1 - p) * (n * (s - s_bar) ** 2).sum()
    if var <= 0:
        return math.nan, math.nan
    z = float((x * (s - s_bar)).sum() / math.sqrt(var))
    return z, float(2 * stats.norm.sf(abs(z)))


def noisy_feedback_study(df: pd.DataFrame, *, endpoints: Sequence[str] = ("behaviour_ok", "code_ok")) -> NoisyFeedbackResult:
    from evalsuite.describe import rate_ci

    need = {"arm", "feedback_kind", *endpoints}
    if not isinstance(df, pd.DataFrame) or not need <= set(df.columns):
        raise StatsInputError(f"noisy_feedback_study needs a DataFrame with columns {sorted(need)}")
    df = df[df["feedback_kind"].astype(str) != ""]
    if df.empty:
        raise StatsInputError("noisy_feedback_study: no episode carries a feedback_kind; run the eval with hint providers")
    rows, trends, notes = [], [], []
    for arm, sub in df.groupby("arm", sort=True):
        kinds = sorted(sub["feedback_kind"].unique(), key=wrong_fraction)
        for e in endpoints:
            xs, ns, ss = [], [], []
            for k in kinds:
                y = sub.loc[sub["feedback_kind"] == k, e].astype(float)
                rows.append(NoisyFeedbackRow(arm=str(arm), feedback_kind=k, wrong_fraction=wrong_fraction(k),
                                             endpoint=e, rate=rate_ci(y, e)))  # fmt: skip
                xs.append(float(y.sum()))
                ns.append(len(y))
                ss.append(wrong_fraction(k))
            z, p = cochran_armitage(np.array(xs), np.array(ns), np.array(ss)) if len(kinds) >= 2 else (math.nan, math.nan)
            slope = float(np.polyfit(ss, np.array(xs) / np.array(ns), 1)[0]) if len(kinds) >= 2 else None
            trends.append(TrendTest(arm=str(arm), endpoint=e, method="Cochran-Armitage over wrong-hint fraction "
                                    "(correct=0, irrelevant=0.5, wrong=1); episodes independent",
                                    statistic=None if math.isnan(z) else z, p_value=None if math.isnan(p) else p,
                                    slope=slope))  # fmt: skip
    notes.append("exploratory; episodes treated as independent (no seed or repository adjustment)")
    return NoisyFeedbackResult(rows=rows, trends=trends, notes=notes)


_COMPUTE = ("rollout_tokens", "teacher_forward_tokens", "trainer_tokens", "flops", "wall_s", "peak_memory_bytes",
            "tuning_trials")  # fmt: skip


def equal_compute_study(
    evals: Sequence[CheckpointEval], *, treatment: str, baseline: str, axis: str = "flops",
    endpoints: Sequence[str] = ("behaviour_ok", "code_ok", "joint_ok"), budget: float | None = None,
) -> EqualComputeResult:  # fmt: skip
    """Compare arms at matched compute on ``axis`` (default: the largest budget every seed of both arms reached)."""
    if axis not in ("flops", "wall_s", "rollout_tokens", "trainer_tokens"):
        raise StatsInputError(f"axis {axis!r}: use flops, wall_s, rollout_tokens or trainer_tokens")
    df = pd.DataFrame([e.model_dump() for e in evals])
    if df.empty or not {treatment, baseline} <= set(df["arm"]):
        raise StatsInputError(f"equal_compute_study needs CheckpointEval rows for both arms {treatment!r}, {baseline!r}")
    last = df.sort_values("step").groupby(["arm", "seed"]).tail(1)
    compute = [ComputeRow(**{k: r[k] for k in ("arm", "seed", *_COMPUTE)}) for r in last.to_dict("records")]
    totals = {a: {k: float(g[k].mean()) for k in _COMPUTE} for a, g in last.groupby("arm")}
    ratios = {k: totals[treatment][k] / totals[baseline][k] for k in _COMPUTE if totals[baseline][k] > 0}
    b = budget if budget is not None else float(last[last["arm"].isin([treatment, baseline])][axis].min())
    comps = [_matched(df, treatment, baseline, axis, b, e) for e in endpoints]
    return EqualComputeResult(compute=compute, totals=totals, ratios=ratios, comparisons=comps,
                              notes=[f"matched on {axis} <= {b:.4g}: each seed's latest checkpoint within budget"])  # fmt: skip


def _matched(df: pd.DataFrame, t: str, c: str, axis: str, budget: float, endpoint: str) -> MatchedComparison:
    within = df[df[axis] <= budget].sort_values("step").groupby(["arm", "seed"]).tail(1)
    rates = {a: np.array([r["successes"].get(endpoint, 0) / r["n"] for r in g.to_dict("records")])
             for a, g in within.groupby("arm")}  # fmt: skip
    rt, rc = rates.get(t, np.array([])), rates.get(c, np.array([]))
    base: dict[str, Any] = {"endpoint": endpoint, "compute_axis": axis, "budget": budget}
    if rt.size == 0 or rc.size == 0:
        return MatchedComparison(**base, treatment_rate=None, baseline_rate=None, estimate=None,
                                 note="an arm has no checkpoint within the budget")  # fmt: skip
    est = float(rt.mean() - rc.mean())
    if rt.size < 2 or rc.size < 2:
        return MatchedComparison(**base, treatment_rate=float(rt.mean()), baseline_rate=float(rc.mean()),
                                 estimate=est, note="fewer than 2 seeds in an arm: no CI")  # fmt: skip
    vt, vc = rt.var(ddof=1) / rt.size, rc.var(ddof=1) / rc.size
    se = math.sqrt(vt + vc)
    if se == 0:
        return MatchedComparison(**base, treatment_rate=float(rt.mean()), baseline_rate=float(rc.mean()),
                                 estimate=est, note="seed rates have no spread: no CI")  # fmt: skip
    df_w = (vt + vc) ** 2 / (vt**2 / (rt.size - 1) + vc**2 / (rc.size - 1))
    q = stats.t.ppf(0.975, df_w) * se
    return MatchedComparison(**base, treatment_rate=float(rt.mean()), baseline_rate=float(rc.mean()), estimate=est,
                             ci_low=est - q, ci_high=est + q, method="Welch t on seed rates")  # fmt: skip


def can_do_study(rows: Sequence[CanDoRow]) -> list[CanDoResult]:
    """Per arm: paired change (corrective − plain) in compliance and in coding success on the same states."""
    if not rows:
        raise StatsInputError("can_do_study: no rows; pass one CanDoRow per (arm, held-out state)")
    out = []
    by_arm: dict[str, list[CanDoRow]] = {}
    for r in rows:
        by_arm.setdefault(r.arm, []).append(r)
    for arm, rs in sorted(by_arm.items()):
        if len({r.state_id for r in rs}) != len(rs):
            raise StatsInputError(f"can_do_study: arm {arm} has duplicate state_id rows; one row per state")
        changes = []
        for e in ("behaviour_ok", "code_ok"):
            plain = np.array([getattr(r, f"plain_{e}") for r in rs])
            corr = np.array([getattr(r, f"corrective_{e}") for r in rs])
            a, b = int(np.sum(corr & plain)), int(np.sum(corr & ~plain))
            c, d = int(np.sum(~corr & plain)), int(np.sum(~corr & ~plain))
            lo, hi = rd_ci_paired(a, b, c, d, method="tango")
            changes.append(PairedChange(endpoint=e, a=a, b=b, c=c, d=d, estimate=(b - c) / len(rs), ci_low=lo,
                                        ci_high=hi, mcnemar_p=mcnemar_test(a, b, c, d, exact=True)))  # fmt: skip
        out.append(CanDoResult(arm=arm, n_states=len(rs), changes=changes,
                               notes=["b = corrective prompt only succeeds, c = plain prompt only; states independent"]))  # fmt: skip
    return out


def build_exploratory(
    *,
    noisy_feedback_runs: Sequence[str | Path] = (),
    checkpoint_evals: Sequence[CheckpointEval] = (),
    can_do_rows: Sequence[CanDoRow] = (),
    treatment: str = "tg",
    baseline: str = "grpo",
) -> Exploratory:
    """One call for the pipeline: run whichever studies have inputs and return ``analyze(exploratory=...)``."""
    return Exploratory(
        noisy_feedback=noisy_feedback_study(episode_frame(noisy_feedback_runs)) if noisy_feedback_runs else None,
        equal_compute=equal_compute_study(checkpoint_evals, treatment=treatment, baseline=baseline)
        if checkpoint_evals else None,
        can_do_vs_does_do=can_do_study(can_do_rows) if can_do_rows else [],
    )  # fmt: skip
