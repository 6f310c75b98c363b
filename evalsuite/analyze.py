"""The confirmatory analysis: (FrozenProtocol, run directories) → :class:`evalsuite.schema.AnalysisResult`.

Refuses (``ProtocolError``) a plan whose hash differs from its frozen record, a run whose manifest names another
protocol hash (or none), a run created before the freeze, and a run on another task set — unless a matching
:class:`protocols.schema.Deviation` is recorded; every recorded deviation is copied into the result. Refuses
(``EvalDataError``, ``evalsuite.integrity``) two checkpoints behind one arm and seed, a relabelled seed, an agent
outcome re-run as a new attempt (or, by the run's ``attempts.jsonl``, an episode deleted and re-run, a result edited,
a log deleted), and one cell evaluated by two runs (or an episode copied from another run).
Decision: SHIP / NO_SHIP by the intersection–union rule (``decide.py``); INCONCLUSIVE when coverage is below the
plan's threshold, a criterion cannot be evaluated (degenerate data with no fallback, too few seeds or
repositories for the estimand, the artifact seed missing).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from evalsuite import assurance, describe, integrity, sensitivity
from evalsuite.checks import seed_claim_block
from evalsuite.decide import CriterionOutcome, DecisionOutcome, decide
from evalsuite.outcomes import OutcomeTable, build_outcome_table
from evalsuite.power import power_artifact, power_ni_crossed
from evalsuite.power_sim import power_range
from evalsuite.primary import primary_estimate
from evalsuite.schema import (
    AnalysisResult,
    Check,
    CriterionResult,
    Decision,
    Exploratory,
    MissingCell,
    MissingData,
    PowerSummary,
    RunRef,
    SensitivityResult,
    VarianceComponents,
    VarianceSplit,
)  # fmt: skip
from evalsuite.variance import EffectEstimate, variance_components
from harness.rundir import LoadedRun, load_run
from protocols.deviations import covers, default_log_path, load_deviations
from protocols.freeze import check, load_frozen, utc_now
from protocols.load import ProtocolError
from protocols.provenance import package_versions
from protocols.schema import CriterionSpec, Deviation, DeviationKind, FrozenProtocol, Protocol

log = logging.getLogger(__name__)


def _ts(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def _require(devs: list[Deviation], kind: DeviationKind, run_id: str | None, what: str, frozen_path: str) -> None:
    if covers(devs, kind, run_id):
        return
    rid = f" --run-id {run_id}" if run_id else ""
    raise ProtocolError(
        f"{what}. The confirmatory analysis refuses this unless you record a deviation: tgsuite protocol deviation "
        f"--frozen {frozen_path} --kind {kind}{rid} --description '...' --justification '...'"
    )


def check_provenance(frozen: FrozenProtocol, runs: list[LoadedRun], devs: list[Deviation], *,
                     plan: str | Path | Protocol | None = None, frozen_path: str = "FROZEN") -> None:  # fmt: skip
    """Raise :class:`ProtocolError` for every provenance problem not covered by a recorded deviation."""
    if plan is not None:
        try:
            check(frozen, plan)
        except ProtocolError as exc:
            _require(devs, "plan_changed", None, str(exc), frozen_path)
    t_freeze = _ts(frozen.frozen_at)
    for r in runs:
        m = r.need_manifest()
        if m.protocol_hash != frozen.sha256:
            named = m.protocol_hash[:12] + "…" if m.protocol_hash else "no protocol hash"
            _require(devs, "protocol_hash_mismatch", m.run_id,
                     f"run {m.run_id} ({r.path}) names {named}, the frozen plan is {frozen.sha256[:12]}…", frozen_path)  # fmt: skip
        t_run = _ts(m.created_at)
        if t_freeze is None or t_run is None or t_run < t_freeze:
            _require(devs, "run_before_freeze", m.run_id,
                     f"run {m.run_id} was created at {m.created_at!r}, before (or not comparable with) the freeze at "
                     f"{frozen.frozen_at}", frozen_path)  # fmt: skip
        if m.task_set_sha256 != frozen.protocol.task_set.sha256:
            _require(devs, "task_set_changed", m.run_id,
                     f"run {m.run_id} used task set {m.task_set_sha256[:12]}…, the plan pinned "
                     f"{frozen.protocol.task_set.sha256[:12]}…", frozen_path)  # fmt: skip


def _estimand_episodes(table: OutcomeTable, proto: Protocol) -> pd.DataFrame:
    """The episodes the estimand is about: for the artifact estimand only the two artifact checkpoints' (a plan may
    train more seeds per arm; pooling them would give GEE another estimand than the primary's), else all."""
    ep = table.episodes
    if proto.estimand != "artifact":
        return ep
    st, sc = proto.arm("treatment").artifact_seed, proto.arm("baseline").artifact_seed
    return ep[((ep["role"] == "treatment") & (ep["train_seed"] == st)) | ((ep["role"] == "baseline") & (ep["train_seed"] == sc))]


def _sensitivities(table: OutcomeTable, c: CriterionSpec, proto: Protocol, frozen: FrozenProtocol,
                   primary: CriterionOutcome, idx: int, run_objs: list[LoadedRun]) -> list[SensitivityResult]:  # fmt: skip
    names = list(proto.sensitivity)
    if not names or not table.tasks:
        return []
    out: list[SensitivityResult] = []
    e_id, pv = c.endpoint, primary.verdict
    yt, yc, repo = table.cell_matrix(e_id, "treatment"), table.cell_matrix(e_id, "baseline"), table.repo_labels()
    method_level = proto.estimand == "method" and min(yt.shape[0], yc.shape[0]) >= 2 and np.unique(repo).size >= 2
    seedless = {"hierarchical_bootstrap", "per_seed_pairs", "conservative_df", "repo_weighted", "leave_one_repo_out"}
    for n in names:
        if n in seedless and not method_level:
            out.append(SensitivityResult(name=n, method=n, status="skipped",
                                         note="needs the method estimand with >= 2 seeds per arm and >= 2 repositories"))  # fmt: skip
    if method_level and "hierarchical_bootstrap" in names:
        rng = np.random.default_rng([proto.analysis_seed, idx])
        out.append(sensitivity.s1_bootstrap(yt, yc, repo, c, pv, n_resamples=proto.bootstrap_resamples, rng=rng,
                                            weighting=proto.weighting))  # fmt: skip
    ep = _estimand_episodes(table, proto)
    if "gee" in names:
        out.append(sensitivity.s2_gee(ep, e_id, c, pv))
    if "bayes_mixed" in names:
        out.append(sensitivity.s3_bayes(ep, e_id, c, pv))
    if method_level and "per_seed_pairs" in names:
        out.append(sensitivity.s4_seed_pairs(yt, yc, repo, c))
    if method_level:
        out += sensitivity.s5_variants(yt, yc, repo, c, pv, names, e_id)
    if "infra_as_failure" in names:
        out.append(_s6(table, c, proto, pv, run_objs))
    return sensitivity.mark_informative(out, estimand=proto.estimand, min_seeds=min(yt.shape[0], yc.shape[0]))


def _s6(table: OutcomeTable, c: CriterionSpec, proto: Protocol, pv: str, runs: list[LoadedRun]) -> SensitivityResult:
    other = "count_as_failure" if proto.missing_data.infra == "exclude" else "exclude"
    n_infra = table.infra_excluded + table.infra_counted
    if n_infra == 0:
        return SensitivityResult(name="infra_as_failure", method=f"infra rule '{other}'", status="skipped",
                                 note="no infra failures on final attempts: identical to the primary analysis")  # fmt: skip
    alt = build_outcome_table(proto, runs, infra=other)
    e = primary_estimate(alt, c, proto)
    res = sensitivity.from_estimate("infra_as_failure", e, c, pv)  # type: ignore[arg-type]
    return res.model_copy(update={"method": f"{e.method}; infra failures: {other} ({n_infra} episodes)"})


def _criterion_result(c: CriterionSpec, e: EffectEstimate, o: CriterionOutcome, holm: float | None, claimed: bool,
                      table: OutcomeTable, sens: list[SensitivityResult], proto: Protocol) -> CriterionResult:  # fmt: skip
    def fin(x: float) -> float | None:
        return float(x) if x is not None and math.isfinite(x) else None

    split = None
    if math.isfinite(e.var_total) and e.var_total > 0:
        split = VarianceSplit(
            var_total=e.var_total, var_training_seeds=e.var_training_seeds, var_task_given_ckpts=e.var_task_given_ckpts,
            se_total=math.sqrt(e.var_total), se_training_seeds=math.sqrt(e.var_training_seeds),
            se_task_given_ckpts=math.sqrt(e.var_task_given_ckpts), share_training_seeds=e.var_training_seeds / e.var_total,
            share_task=e.var_task_given_ckpts / e.var_total,
        )  # fmt: skip
    comps = []
    for role in ("treatment", "baseline"):
        y = table.cell_matrix(c.endpoint, role) if table.tasks else np.empty((0, 0))  # type: ignore[arg-type]
        if y.shape[0] >= 2 and y.shape[1] >= 2:
            vc = variance_components(y)
            comps.append(VarianceComponents(arm=table.arms[role], seed=vc.seed, task=vc.task, resid=vc.resid,
                                            icc_seed=fin(vc.icc_seed)))  # fmt: skip
    verdicts = [s.agrees_with_primary for s in sens if s.agrees_with_primary is not None and s.informative]
    return CriterionResult(
        endpoint=c.endpoint, kind=c.kind, estimand=proto.estimand, method=e.method, estimate=fin(e.estimate),
        se=fin(e.se), df=fin(e.df), ci_low=fin(e.ci_low), ci_high=fin(e.ci_high), alpha_one_sided=c.alpha_one_sided,
        lower_one_sided=fin(e.lower_one_sided), threshold=c.threshold, margin=c.margin, bar=c.bar, verdict=o.verdict,
        p_value=fin(o.p_value), holm_p=holm, claimed=claimed, variance=split, variance_components=comps,
        degenerate=e.degenerate, fallback_used=e.method if "fallback" in e.method else None,
        n_seeds_treatment=e.n_seeds[0], n_seeds_baseline=e.n_seeds[1], n_tasks=e.n_tasks, n_repos=e.n_repos,
        k_episodes=table.k, sensitivity=sens, sensitivity_agree=all(verdicts) if verdicts else None,
        notes=[*e.notes, o.reason],
    )  # fmt: skip


def _missing(table: OutcomeTable, proto: Protocol) -> MissingData:
    cov, per_arm = table.coverage, table.per_arm_coverage
    rule = (f"infra failures on the final attempt (after up to {proto.missing_data.max_retries} retries): "
            f"{proto.missing_data.infra}; missing cells: {proto.missing_data.missing_cell}; coverage per arm, counted "
            "after incomplete tasks are dropped")  # fmt: skip
    return MissingData(
        rule=rule, expected_cells=table.expected_episodes, observed_cells=table.n_scored_all_tasks,
        analysed_episodes=table.observed(), dropped_tasks=table.dropped_tasks, coverage=cov,
        coverage_threshold=proto.coverage_threshold, coverage_ok=cov >= proto.coverage_threshold,
        infra_excluded=table.infra_excluded, infra_counted_as_failure=table.infra_counted,
        invalid_instances_excluded=len(table.invalid_instances), superseded_attempts=table.superseded,
        missing=[MissingCell(arm=a, seed=s, instance_id=t, reason=r) for a, s, t, r in table.missing_cells],  # type: ignore[arg-type]
        per_arm_coverage=per_arm,
    )  # fmt: skip


def power_summaries(proto: Protocol) -> list[PowerSummary]:
    """Analytic power of each criterion under the plan's stated assumptions (both estimands)."""
    pa = proto.power
    if pa is None:
        return []
    d = proto.design
    npr = pa.tasks_per_repo or d.n_tasks / d.n_repositories
    out = []
    for c in proto.ordered_criteria():
        delta1 = pa.expected_differences.get(c.endpoint, pa.true_difference)
        dual = c.threshold if c.kind == "dual" else None
        if proto.estimand == "artifact":
            r = power_artifact(margin=-c.bar, true_difference=delta1, n_tasks=d.n_tasks, tasks_per_repo=npr, tau=pa.tau,
                               icc_repo=pa.icc_repo, sigma_e2=pa.sigma_e2 / d.episodes_per_task,
                               alpha=c.alpha_one_sided, min_estimate=dual)  # fmt: skip
            out.append(PowerSummary(endpoint=c.endpoint, kind=c.kind, power=r.power, se=r.se, df=r.df, seeds_per_arm=1,
                                    n_tasks=d.n_tasks, method="analytic, noncentral t on G - 1 df (paired tasks, "
                                    "one checkpoint per arm)"))  # fmt: skip
            continue
        r = power_ni_crossed(
            margin=-c.bar, true_difference=delta1, seeds_treatment=d.seeds_per_arm, seeds_baseline=d.seeds_per_arm,
            n_tasks=d.n_tasks, tasks_per_repo=npr, sigma_seed=pa.sigma_seed, tau=pa.tau, icc_repo=pa.icc_repo,
            sigma_e2=pa.sigma_e2 / d.episodes_per_task, alpha=c.alpha_one_sided, min_estimate=dual,
        )  # fmt: skip
        low, high, rng_s, note = power_range(proto, c)
        out.append(PowerSummary(endpoint=c.endpoint, kind=c.kind, power=r.power, se=r.se, df=r.df,
                                seeds_per_arm=d.seeds_per_arm, n_tasks=d.n_tasks, power_low=low, power_high=high,
                                sigma_seed_range=rng_s, sigma_seed_note=note))  # fmt: skip
    return out


def _warnings(record: FrozenProtocol, runs: list[LoadedRun], table: OutcomeTable,
              results: list[CriterionResult]) -> list[str]:  # fmt: skip
    """Non-fatal provenance and consistency notes, shown in the report."""
    proto = record.protocol
    warns = list(table.warnings)
    graders = {e.grader_version for e in proto.endpoints if e.grader_version}
    for run in runs:
        m = run.need_manifest()
        if graders and m.grader_version not in graders:
            warns.append(f"run {m.run_id} was graded with {m.grader_version}, the plan names {sorted(graders)}")
        if not m.isolated:
            warns.append(f"run {m.run_id} used a non-isolated sandbox ({m.sandbox}); agent code ran unconfined")
    if record.git.dirty:
        warns.append(f"the plan was frozen from a dirty checkout (git {record.git.commit}); the record alone is binding")
    for r in results:
        if r.sensitivity_agree is False:
            off = [s.name for s in r.sensitivity if s.agrees_with_primary is False and s.informative]
            warns.append(f"{r.endpoint}: sensitivity analyses {off} disagree with the primary verdict ({r.verdict})")
    return warns


def task_list_reason(proto: Protocol, runs: list[LoadedRun], devs: list[Deviation]) -> str | None:
    """Why the runs' instance list is not the one the plan pinned at freeze (design.n_tasks of the pinned task set),
    or None; a recorded ``data_exclusion`` deviation says why and lifts it."""
    n = len({i for r in runs for i in r.need_manifest().instance_ids})
    if n == proto.design.n_tasks or covers(devs, "data_exclusion"):
        return None
    return (f"the runs list {n} instances, the plan pinned n_tasks = {proto.design.n_tasks} of task set "
            f"{proto.task_set.sha256[:12]}…; tasks removed from (or added to) a manifest after freezing are not the "
            "preregistered comparison: evaluate every instance, or record why with `tgsuite protocol deviation "
            "--kind data_exclusion`")  # fmt: skip


def _verdict(dec: DecisionOutcome, proto: Protocol, missing: MissingData, table: OutcomeTable,
             runs: list[LoadedRun], assay: list[Check], prereg: list[Check],
             devs: list[Deviation]) -> tuple[str, list[str], list[str]]:  # fmt: skip
    """Final verdict, reasons and claims: coverage, an instance list other than the pinned one, failed
    preregistration checks and a failed positive control make it INCONCLUSIVE; the worst case for missing cells and
    too few seeds keep a SHIP from standing."""
    verdict, reasons, claims = dec.verdict, list(dec.reasons), list(dec.claims)
    hard = [r for r in [task_list_reason(proto, runs, devs)] if r]
    if not missing.coverage_ok:
        per_arm = ", ".join(f"{a} {v:.3f}" for a, v in sorted(missing.per_arm_coverage.items()))
        hard.append(f"coverage {missing.coverage:.3f} is below the preregistered {proto.coverage_threshold:.3f} "
                    f"(per arm, after incomplete tasks are dropped: {per_arm})")  # fmt: skip
    hard += [f"preregistration check '{p.name}' failed: {p.detail}" for p in prereg if p.status == "fail"]
    soft = [a.detail for a in assay if a.status == "fail" and a.name.startswith("positive_control")]
    if verdict == "SHIP" and table.missing_cells:
        lost = assurance.worst_case(proto, runs, proto.ordered_criteria())
        if lost:
            soft.append("the missing cells could flip the verdict: with every missing cell counted against the "
                        f"treatment, {'; '.join(lost)} no longer pass")  # fmt: skip
    seeds = seed_claim_block(proto)
    if hard or (soft and verdict == "SHIP") or (seeds and verdict == "SHIP"):
        verdict = "INCONCLUSIVE"
    reasons = hard + (soft if verdict != "NO_SHIP" else []) + ([seeds] if seeds else []) + reasons
    if verdict == "INCONCLUSIVE" or seeds:
        claims = []
    return verdict, reasons, claims


def _assay(ests: list[EffectEstimate], criteria: list[CriterionSpec], proto: Protocol,
           runs: list[LoadedRun]) -> list[Check]:  # fmt: skip
    out = []
    for c, e in zip(criteria, ests, strict=True):
        blocked = [n for n in e.notes if "not evidence" in n or "assay sensitivity" in n]
        if blocked:
            out.append(Check(name=f"evidence:{c.endpoint}", status="fail", detail=blocked[0]))
        elif c.kind == "noninferiority":
            a = proto.assay_sensitivity
            out.append(Check(name=f"evidence:{c.endpoint}", status="pass",
                             detail=f"outcomes vary and the baseline rate is within the preregistered "
                             f"[{a.min_rate(c.margin):.3f}, {a.max_baseline_rate:.3f}]"))  # fmt: skip
    return out + assurance.positive_control_checks(proto, runs)


def analyze(
    frozen: FrozenProtocol | str | Path,
    run_dirs: list[str | Path],
    *,
    plan: str | Path | Protocol | None = None,
    deviations: list[Deviation] | None = None,
    deviations_path: str | Path | None = None,
    exploratory: Exploratory | None = None,
    now: str | None = None,
    public_key: str | None = None,
) -> AnalysisResult:
    """Run the preregistered analysis. ``frozen`` is a record or its path; deviations are read from
    ``deviations_path`` (default: next to the frozen record) plus ``deviations``. ``public_key`` (hex Ed25519) pins
    the key the record's signature must verify with."""
    frozen_path = str(frozen) if not isinstance(frozen, FrozenProtocol) else None
    record = frozen if isinstance(frozen, FrozenProtocol) else load_frozen(frozen)
    devs = list(deviations or [])
    if deviations_path is not None and not Path(deviations_path).is_file():
        where = f" (the default, next to the record: {default_log_path(frozen)})" if frozen_path else ""
        raise ProtocolError(f"{deviations_path}: deviation log not found, so no recorded deviation would be read or "
                            f"reported; fix: pass the log `tgsuite protocol deviation` wrote{where}, or leave "
                            "--deviations out")
    dpath = deviations_path or (default_log_path(frozen) if not isinstance(frozen, FrozenProtocol) else None)
    if dpath is not None:
        devs = load_deviations(dpath, protocol_hash=record.sha256) + devs
    proto = record.protocol
    runs = [load_run(r) for r in run_dirs]
    check_provenance(record, runs, devs, plan=plan, frozen_path=frozen_path or "FROZEN.json")
    integrity.checkpoint_identity(proto, runs)
    integrity.attempt_history(runs)
    integrity.attempt_log(runs)
    integrity.one_evaluation_per_cell(proto, runs)
    table = build_outcome_table(proto, runs)
    criteria = proto.ordered_criteria()
    ests = [primary_estimate(table, c, proto) for c in criteria]
    dec = decide(ests, criteria, claims=proto.decision.claims)
    missing = _missing(table, proto)
    assay = _assay(ests, criteria, proto, runs)
    prereg = assurance.prereg_checks(frozen_path, runs, record, public_key=public_key, devs=devs)
    verdict, reasons, claims = _verdict(dec, proto, missing, table, runs, assay, prereg, devs)
    results = []
    for i, (c, e, o) in enumerate(zip(criteria, ests, dec.per_criterion, strict=True)):
        sens = _sensitivities(table, c, proto, record, o, i, runs)
        results.append(_criterion_result(c, e, o, dec.holm_p[i], c.endpoint in claims, table, sens, proto))
    secondary_ids = [e.id for e in proto.endpoints if e.role == "secondary"]
    warns = _warnings(record, runs, table, results) + [f"preregistration check '{p.name}': {p.detail}"
                                                       for p in prereg if p.status == "not_available"]  # fmt: skip
    return AnalysisResult(
        plan_name=proto.name, plan_version=proto.version, protocol_hash=record.sha256, frozen_at=record.frozen_at,
        estimand=proto.estimand, created_at=now or utc_now(), analysis_seed=proto.analysis_seed, arms=table.arms,
        decision=Decision(verdict=verdict, reasons=reasons, claims_procedure=proto.decision.claims, claims=claims),  # type: ignore[arg-type]
        criteria=results, arm_summaries=describe.arm_summaries(table),
        secondary=describe.secondary(table, secondary_ids) if table.tasks else [],
        breakdowns=describe.breakdowns(table), missing_data=missing, deviations=devs,
        runs=[RunRef(run_id=r.need_manifest().run_id, path=str(r.path), created_at=r.need_manifest().created_at,
                     protocol_hash=r.need_manifest().protocol_hash, task_set_sha256=r.need_manifest().task_set_sha256,
                     git_commit=r.need_manifest().git_commit, n_episodes=len(r.results)) for r in runs],
        run_ids=[r.need_manifest().run_id for r in runs], power=power_summaries(proto),
        exploratory=exploratory or Exploratory(), software=package_versions(), warnings=warns, assay_checks=assay,
        prereg_checks=prereg, consort=assurance.consort_items(proto, results, missing, assay),
    )  # fmt: skip
