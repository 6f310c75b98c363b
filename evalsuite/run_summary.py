"""Descriptive per-arm aggregate of one run directory, without a plan (``aggregate.json``, like lm-eval's results).

``aggregate_run(results, manifest, config=...)`` → ``evalsuite.schema.RunAggregate``: per arm the episode counts
(scored, infrastructure errors, invalid instances, every status), the rates of ``code_ok`` (= resolved),
``behaviour_ok`` and ``joint_ok`` over scored episodes with Wilson 95 % CIs and the repository-clustered SE
(``evalsuite.describe.rate_ci``, the analysis's own function), the behaviour × code 2×2 table, the same rates per
repository, and the means of the secondary per-episode metrics (``harness.schema.EpisodeMetrics``) with sqrt(var/n).

What it is not: a comparison or a decision. Episodes are pooled across seeds and tasks (the Wilson CI treats them
as independent, which they are not when seeds repeat tasks); for a preregistered comparison use
``evalsuite.analyze``. Infrastructure errors and invalid instances are counted but never in a denominator.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from evalsuite.describe import joint_table, rate_ci
from evalsuite.rates import se_clt
from evalsuite.schema import ArmAggregate, MetricMean, RunAggregate
from harness.rundir import load_run
from harness.schema import EpisodeMetrics, EpisodeResult, RunManifest

AGGREGATE_FILE = "aggregate.json"
ENDPOINTS = ("code_ok", "behaviour_ok", "joint_ok")
METRICS: tuple[str, ...] = tuple(EpisodeMetrics.model_fields)
NOTE = ("Descriptive: no preregistered decision. Rates pool the scored episodes (the Wilson CI treats them as "
        "independent, which repeated seeds on one task are not; se_clustered is the repository-clustered SE). For a "
        "decision, freeze a plan and run `tgsuite analyze`.")


def _frame(results: Sequence[EpisodeResult]) -> pd.DataFrame:
    rows = [{"arm": r.arm, "repo": r.cluster, "code_ok": bool(r.resolved), "behaviour_ok": bool(r.behaviour_ok),
             "joint_ok": bool(r.joint_ok), **r.metrics.model_dump()} for r in results if r.scored]
    cols = ["arm", "repo", *ENDPOINTS, *METRICS]
    return pd.DataFrame(rows, columns=cols)


def _metric_mean(values: pd.Series, metric: str) -> MetricMean:
    v = values.dropna().astype(float)
    if v.empty:
        return MetricMean(metric=metric, n=0, mean=None)
    se = se_clt(v.to_numpy()) if len(v) >= 2 else None
    return MetricMean(metric=metric, n=len(v), mean=float(v.mean()), se=se if se is None or math.isfinite(se) else None)


def _arm(arm: str, policy: str, results: Sequence[EpisodeResult], ep: pd.DataFrame) -> ArmAggregate:
    statuses = Counter(r.status for r in results)
    per_repo = {str(repo): [rate_ci(sub[e], e) for e in ENDPOINTS] for repo, sub in ep.groupby("repo", sort=True)}
    return ArmAggregate(
        arm=arm, policy=policy, n_episodes=len(results), n_scored=len(ep), statuses=dict(sorted(statuses.items())), rates=[rate_ci(ep[e], e, ep["repo"]) for e in ENDPOINTS],
        joint_table=joint_table(ep), per_repo=per_repo, secondary=[_metric_mean(ep[m], m) for m in METRICS],
    )


def aggregate_run(results: Sequence[EpisodeResult], manifest: RunManifest | None = None, *,
                  config: Mapping[str, float | int | str | bool | None] | None = None,
                  run_id: str | None = None, now: str | None = None) -> RunAggregate:
    """The descriptive aggregate of a run's results (module docstring). Arms in manifest order, then any other.

    ``config``: settings that shaped the run and are not in the manifest (e.g. generation settings).
    """
    ep = _frame(results)
    policies = {a.name: a.policy for a in manifest.arms} if manifest is not None else {}
    names = [a for a in policies if any(r.arm == a for r in results)]
    names += sorted({r.arm for r in results} - set(names))
    arms = [_arm(a, policies.get(a, next(r.policy for r in results if r.arm == a)),
                 [r for r in results if r.arm == a], ep[ep["arm"] == a]) for a in names]
    m = manifest
    return RunAggregate(
        run_id=run_id or (m.run_id if m else (results[0].run_id if results else "")),
        created_at=now or datetime.now(UTC).isoformat(timespec="seconds"),
        task_set_name=m.task_set_name if m else "", task_set_sha256=m.task_set_sha256 if m else "",
        git_commit=m.git_commit if m else None, argv=list(m.argv) if m else [],
        config={**({k: v for k, v in m.limits.items()} if m else {}), **({"sandbox": m.sandbox} if m else {}),
                **dict(config or {})},
        versions=dict(m.packages) if m else {}, arms=arms, note=NOTE,
    )


def aggregate_run_dir(run_dir: str | Path, *, config: Mapping[str, float | int | str | bool | None] | None = None,
                      write: bool = True) -> RunAggregate:
    """``aggregate_run`` over a run directory (``harness.rundir.load_run``: the latest attempt of each episode);
    with ``write`` it is also written to ``RUN_DIR/aggregate.json``. Raises ``EvalDataError`` naming the file."""
    run = load_run(run_dir)
    results = sorted(run.results, key=lambda r: (r.arm, r.instance_id, r.seed))
    agg = aggregate_run(results, run.need_manifest(), config=config, run_id=run.need_manifest().run_id)
    if write:
        path = Path(run_dir) / AGGREGATE_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(agg.model_dump_json(indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return agg


__all__ = ["AGGREGATE_FILE", "ENDPOINTS", "METRICS", "aggregate_run", "aggregate_run_dir"]
