"""What makes a verdict trustworthy beyond its interval (issue #15): the positive control, the worst case for missing
cells, the preregistration anchor, and the CONSORT-NI items the analysis covers.

- ``positive_control_checks``: the plan's known-worse checkpoint must FAIL every non-inferiority criterion against
  the baseline, analysed exactly like the treatment; a pass (or no data) means the evaluation cannot detect a loss.
- ``worst_case``: every missing cell scored against the treatment (a failure in the treatment arm, a success in
  the baseline arm); a SHIP that does not survive it is not a SHIP.
- ``prereg_checks``: ``protocols.anchor_verify.verify_anchor`` with the checkpoint times and two clocks per run (the
  manifest's ``created_at`` and its first episode's ``finished_at``), then ``protocols.run_registry``'s checks: every
  run registered under the plan that evaluated its cells is analysed, and none under another record came first.
- ``consort_items``: the CONSORT-NI items (Piaggio et al., JAMA 2012;308:2594–2604) this analysis reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evalsuite.checks import control_protocol
from evalsuite.decide import criterion_verdict
from evalsuite.integrity import checkpoint_info, planned_arms
from evalsuite.outcomes import EvalDataError, build_outcome_table
from evalsuite.primary import primary_estimate
from evalsuite.schema import Check, ConsortItem, CriterionResult, MissingData
from harness.rundir import LoadedRun
from harness.schema import RunManifest
from protocols.anchor_verify import verify_anchor
from protocols.deviations import covers
from protocols.run_registry import registry_checks
from protocols.schema import CriterionSpec, Deviation, FrozenProtocol, Protocol


def positive_control_checks(proto: Protocol, runs: list[LoadedRun]) -> list[Check]:
    """One check per non-inferiority criterion: the positive control must fail it (empty: no control planned)."""
    cp = control_protocol(proto)
    pc = proto.assay_sensitivity.positive_control
    if cp is None or pc is None:
        return []
    ni = [c for c in proto.ordered_criteria() if c.kind == "noninferiority"]
    try:
        table = build_outcome_table(cp, runs)
    except EvalDataError as exc:
        return [Check(name=f"positive_control:{c.endpoint}", status="fail",
                      detail=f"positive control {pc.arm!r} could not be analysed: {exc}") for c in ni]  # fmt: skip
    out = []
    for c in ni:
        o = criterion_verdict(primary_estimate(table, c, cp), c)
        if o.verdict == "fail":
            out.append(Check(name=f"positive_control:{c.endpoint}", status="pass",
                             detail=f"the known-worse {pc.arm!r} fails non-inferiority as it must ({o.reason})"))  # fmt: skip
        else:
            what = "passes non-inferiority" if o.verdict == "pass" else "could not be evaluated"
            out.append(Check(name=f"positive_control:{c.endpoint}", status="fail",
                             detail=f"the known-worse {pc.arm!r} {what} ({o.reason}): this evaluation cannot tell a "
                             "worse checkpoint from the baseline"))  # fmt: skip
    return out


def worst_case(proto: Protocol, runs: list[LoadedRun], criteria: list[CriterionSpec]) -> list[str]:
    """Criteria that fail (or cannot be evaluated) when every missing cell counts against the treatment."""
    table = build_outcome_table(proto, runs, missing_fill="worst_case")
    out = []
    for c in criteria:
        o = criterion_verdict(primary_estimate(table, c, proto), c)
        if o.verdict != "pass":
            out.append(f"{c.endpoint} ({o.reason})")
    return out


def _checkpoint_times(runs: list[LoadedRun]) -> dict[str, str]:
    """created_at of the checkpoints the runs evaluated (ArmSpec.policy 'hf:PATH' with PATH/checkpoint.json)."""
    out: dict[str, str] = {}
    for r in runs:
        for a in r.need_manifest().arms:
            info = checkpoint_info(a.policy)
            if info is not None:
                out[f"{a.name} ({info[0].parent.name})"] = str(info[1].get("created_at", "") or "unknown")
    return out


def _result_times(runs: list[LoadedRun]) -> dict[str, str]:
    """Every run's ``created_at`` and the earliest ``finished_at`` of its episodes: two clocks, so that moving the
    manifests' ``created_at`` after a re-freeze does not reorder results that were finished before it."""
    out = {r.need_manifest().run_id: r.need_manifest().created_at for r in runs}
    for r in runs:
        done = sorted(x.finished_at for x in r.results if x.finished_at)
        if done:
            out[f"{r.need_manifest().run_id} (first episode finished)"] = done[0]
    return out


def touches_plan(proto: Protocol) -> Callable[[dict[str, object]], bool]:
    """Whether a registered run's manifest (JSON) evaluated cells of ``proto``: the plan's task set, and an arm
    whose name (before ``@s<seed>``) is a plan arm or the positive control. Unreadable registrations count."""
    planned = planned_arms(proto)

    def touches(manifest: dict[str, object]) -> bool:
        try:
            m = RunManifest.model_validate(manifest)
        except ValueError:
            return True
        return m.task_set_sha256 == proto.task_set.sha256 and any(a.name.split("@")[0] in planned for a in m.arms)

    return touches


def prereg_checks(frozen_path: str | None, runs: list[LoadedRun], record: FrozenProtocol, *,
                  public_key: str | None = None, devs: Sequence[Deviation] = ()) -> list[Check]:
    """The anchor's checks, then the run registry's (``protocols.run_registry``) for ``record``'s plan."""
    checks = verify_anchor(frozen_path, checkpoint_times=_checkpoint_times(runs), result_times=_result_times(runs),
                           public_key=public_key)  # fmt: skip
    analysed = {r.need_manifest().run_id: r.need_manifest().registration is not None for r in runs}
    checks += registry_checks(frozen_path, record.sha256, analysed, touches_plan=touches_plan(record.protocol),
                              excused=lambda kind, rid: covers(list(devs), kind, rid))  # fmt: skip
    return [Check(name=c.name, status=c.status, detail=c.detail) for c in checks]


def _ni(proto: Protocol) -> list[CriterionSpec]:
    return [c for c in proto.criteria if c.kind == "noninferiority"]


def consort_items(proto: Protocol, results: list[CriterionResult], missing: MissingData,
                  assay: list[Check]) -> list[ConsortItem]:  # fmt: skip
    """The CONSORT-NI items this analysis covers, each with where it is answered (or why not)."""
    ni = _ni(proto)
    justified = [c.endpoint for c in ni if c.acceptable_loss.strip()]
    items = [
        ("3a", "non-inferiority design, with its rationale", bool(ni),
         f"{len(ni)} non-inferiority criterion(s): {', '.join(c.endpoint for c in ni) or 'none'}"),
        ("6a", "hypotheses stated with the margin", bool(ni),
         "; ".join(f"H0: Δ({c.endpoint}) <= -{c.margin}" for c in ni) or "no non-inferiority criterion"),
        ("7a", "margin justified as an acceptable loss", bool(ni) and len(justified) == len(ni),
         f"acceptable_loss stated for {justified or 'no criterion'}" + (
             "" if len(justified) == len(ni) else "; missing for the others: state why this loss is acceptable")),
        ("7a'", "sample size computed under the non-inferiority hypothesis", proto.power is not None,
         "[power] section with analytic power per criterion" if proto.power else "the plan has no [power] section"),
        ("12a", "one-sided alpha / two-sided CI against the margin", True,
         "; ".join(f"{r.endpoint}: one-sided α {r.alpha_one_sided}, L vs bar {r.bar:+.3f}" for r in results)),
        ("12a'", "intention-to-treat and per-protocol handling of missing data", True,
         f"{missing.rule}; per-arm coverage after dropping incomplete tasks; worst-case analysis of missing cells"),
        ("12b", "constancy / assay sensitivity of the baseline", bool(assay),
         "; ".join(f"{a.name}: {a.status}" for a in assay) or "no assay-sensitivity check applied"),
        ("17a", "effect estimate with CI, shown against the margin", True, "criteria table and forest plot"),
        ("22", "interpretation: non-inferiority, superiority or inconclusive", True, "the decision and its reasons"),
    ]  # fmt: skip
    return [ConsortItem(item=i, topic=t, covered=c, detail=d) for i, t, c, d in items]
