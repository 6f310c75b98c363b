"""The validation gate an instance passes before it enters an eval set (HARNESS.md §7.1).

For each instance: grade the gold patch ``runs`` times and the empty patch ``runs`` times, each in a fresh sandbox
with the real grader (``harness.grading.grade_patch``). Then, per test:

- FAIL_TO_PASS: kept when it passes on gold every time and fails (failed / error / skipped / missing) on empty every
  time. One that passes on empty every time, or fails on gold every time, is a dataset bug: the instance is
  REJECTED with that reason. One that flips within gold or within empty runs is flaky: EXCLUDED.
- PASS_TO_PASS: kept when it passes (or is skipped) in all 2×runs runs. One that fails on gold every time means the
  gold patch breaks it: REJECTED. Anything else is EXCLUDED (flaky, or failing before the fix).
- An instance with no FAIL_TO_PASS test left, a gold run whose grade is invalid (no JUnit report, timeout, hidden
  test patch does not apply), or a sandbox that keeps failing (after ``infra_retries``) is REJECTED with the reason.

The report is written to ``<task dir>/validation.json`` (``ValidationReport``). ``tgsuite eval`` reads it: rejected
instances are not run and excluded tests are neither run nor counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.grading import GRADER_VERSION, grade_patch
from harness.infra import atomic_write_text, classify_exception
from harness.sandbox import SandboxKind
from harness.sandbox_providers import SandboxFactory
from harness.schema import Grade, TaskInstance, TaskSet, TestStatus
from protocols.provenance import utc_now

log = logging.getLogger(__name__)

VALIDATION_FILE = "validation.json"
_OK_P2P = ("passed", "skipped")


class InstanceValidation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    instance_id: str
    valid: bool
    reason: str = ""
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    excluded_flaky: list[str] = Field(default_factory=list)
    gold: list[dict[str, TestStatus]] = Field(default_factory=list)
    empty: list[dict[str, TestStatus]] = Field(default_factory=list)
    gold_exit_codes: list[int | None] = Field(default_factory=list)
    empty_exit_codes: list[int | None] = Field(default_factory=list)
    image_digest: str | None = None


class ValidationReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = 1
    task_set_name: str
    task_set_sha256: str
    created_at: str
    runs: int
    sandbox: Literal[SandboxKind, "custom"]  # custom: written for a factory without a kind (older versions)
    isolated: bool
    grader_version: str = GRADER_VERSION
    instances: list[InstanceValidation]

    @property
    def rejected(self) -> list[InstanceValidation]:
        return [i for i in self.instances if not i.valid]

    def excluded_tests(self) -> dict[str, list[str]]:
        return {i.instance_id: list(i.excluded_flaky) for i in self.instances if i.excluded_flaky}

    def valid_ids(self) -> set[str]:
        return {i.instance_id for i in self.instances if i.valid}


# ------------------------------------------------------------------------------------------------ deciding (pure)


def decide_instance(instance: TaskInstance, gold: Sequence[Grade], empty: Sequence[Grade]) -> InstanceValidation:
    """Pure: the gate's decision from ``runs`` gold grades and ``runs`` empty-patch grades (rules above)."""
    base = dict(instance_id=instance.instance_id, gold=[{**g.f2p, **g.p2p} for g in gold],
                empty=[{**g.f2p, **g.p2p} for g in empty], gold_exit_codes=[g.exit_code for g in gold],
                empty_exit_codes=[g.exit_code for g in empty])
    bad_gold = [g for g in gold if not g.valid]
    if bad_gold:
        return InstanceValidation(valid=False, reason=f"gold run does not grade: {bad_gold[0].reason}", **base)
    reasons: list[str] = []
    keep_f2p, keep_p2p, flaky = [], [], []
    for t in instance.FAIL_TO_PASS:
        g_pass = [g.f2p.get(t) == "passed" for g in gold]
        e_pass = [g.f2p.get(t) == "passed" for g in empty]
        if all(g_pass) and not any(e_pass):
            keep_f2p.append(t)
        elif not any(g_pass):
            reasons.append(f"FAIL_TO_PASS {t} fails on gold in all {len(gold)} runs")
        elif all(e_pass):
            reasons.append(f"FAIL_TO_PASS {t} passes without the fix in all {len(empty)} runs")
        else:
            flaky.append(t)
    for t in instance.PASS_TO_PASS:
        g_ok = [g.p2p.get(t) in _OK_P2P for g in gold]
        e_ok = [g.p2p.get(t) in _OK_P2P for g in empty]
        if all(g_ok) and all(e_ok):
            keep_p2p.append(t)
        elif not any(g_ok):
            reasons.append(f"PASS_TO_PASS {t} fails on gold in all {len(gold)} runs")
        else:
            flaky.append(t)
    if not keep_f2p and not reasons:
        reasons.append("no FAIL_TO_PASS test is stable (all flaky)")
    return InstanceValidation(valid=not reasons, reason="; ".join(reasons), fail_to_pass=keep_f2p,
                              pass_to_pass=keep_p2p, excluded_flaky=flaky, **base)


# ------------------------------------------------------------------------------------------------ running


class _ValidationInfra(RuntimeError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _grade_runs(instance: TaskInstance, patch: str, runs: int, factory: SandboxFactory, *, timeout_s: float,
                infra_retries: int, label: str) -> list[Grade]:
    grades: list[Grade] = []
    for k in range(runs):
        for attempt in range(infra_retries + 1):
            try:
                sb, _ = factory.open(instance, role="control", attempt=attempt)
                with sb:
                    grades.append(grade_patch(instance, patch, sb, timeout_s=timeout_s))
                break
            except Exception as exc:  # noqa: BLE001 - any harness/engine failure here is infrastructure
                log.warning("%s %s run %d attempt %d: infra: %s", instance.instance_id, label, k, attempt, exc)
                if attempt == infra_retries:
                    raise _ValidationInfra(classify_exception(exc, phase="grade").infra_kind or "INFRA",
                                           f"{type(exc).__name__}: {exc}") from exc
    return grades


def validate_instance(instance: TaskInstance, factory: SandboxFactory, *, runs: int = 3, timeout_s: float = 900.0,
                      infra_retries: int = 2, image_digest: str | None = None) -> InstanceValidation:
    """Run the gate on one instance with sandboxes from ``factory`` (a ``runner_episode.SandboxFactory``)."""
    try:
        gold = _grade_runs(instance, instance.patch, runs, factory, timeout_s=timeout_s,
                           infra_retries=infra_retries, label="gold")
        empty = _grade_runs(instance, "", runs, factory, timeout_s=timeout_s, infra_retries=infra_retries,
                            label="empty")
    except _ValidationInfra as exc:
        return InstanceValidation(instance_id=instance.instance_id, valid=False,
                                  reason=f"could not be validated: infrastructure error {exc.kind}: {exc}",
                                  image_digest=image_digest)
    return decide_instance(instance, gold, empty).model_copy(update={"image_digest": image_digest})


def validate_task_set(
    task_dir: str | Path,
    *,
    runs: int = 3,
    sandbox: SandboxKind = "docker",
    workers: int = 1,
    instance_ids: Sequence[str] | None = None,
    out: str | Path | None = None,
    sandbox_factory: SandboxFactory | None = None,
    grade_timeout_s: float = 900.0,
    progress: bool = False,
    task_set: TaskSet | None = None,
) -> ValidationReport:
    """Validate every instance of the task set in ``task_dir`` (or those in ``instance_ids``) and write the
    report to ``out`` (default ``<task_dir>/validation.json``). Returns the report; rejected instances are in
    ``report.rejected`` with their reasons. ``sandbox_factory`` overrides ``sandbox`` (tests, custom images).
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    from harness.tasks import load_task_set

    ts = task_set or load_task_set(task_dir)
    insts = ts.instances
    if instance_ids is not None:
        unknown = set(instance_ids) - {i.instance_id for i in insts}
        if unknown:
            raise ValueError(f"{task_dir}: unknown instance ids {sorted(unknown)}; fix: check --instance")
        insts = [i for i in insts if i.instance_id in set(instance_ids)]
    factory, owned = sandbox_factory, None
    if factory is None:
        from harness.run_control import sandbox_run_id
        from harness.runner_sandbox import TaskSandboxFactory

        # unique per process (as eval's): a concurrent validation of a same-named folder never removes ours
        factory = owned = TaskSandboxFactory(ts, kind=sandbox, run_id=f"validate-{sandbox_run_id(ts.path)}")
        owned.preflight()  # task-set faults (snapshots, sizes) are named here, before any grading
    try:
        digests = factory.image_digests()
        results = _run_all(insts, factory, runs, workers, grade_timeout_s, digests, progress)
    finally:
        if owned is not None:
            owned.close()
    report = ValidationReport(
        task_set_name=ts.name, task_set_sha256=ts.sha256, created_at=utc_now(),
        runs=runs, sandbox=factory.kind, isolated=factory.isolated, instances=results,
    )
    atomic_write_text(Path(out) if out else Path(task_dir) / VALIDATION_FILE, report.model_dump_json(indent=1))
    for r in report.rejected:
        log.warning("rejected %s: %s", r.instance_id, r.reason)
    return report


def _run_all(insts: list[TaskInstance], factory: SandboxFactory, runs: int, workers: int, timeout_s: float,
             digests: dict[str, str], progress: bool) -> list[InstanceValidation]:
    """Validate on ``workers`` threads. SIGINT/SIGTERM (``harness.run_control.stop_on_signals``): queued instances
    are cancelled, the factory's running sandboxes ended (``interrupt()``) and ``RunInterrupted`` re-raised; no
    report is written (the gate is all or nothing)."""
    from tqdm import tqdm

    from harness.run_control import RunInterrupted, stop_on_signals

    stop = threading.Event()

    def one(inst: TaskInstance) -> InstanceValidation:
        return validate_instance(inst, factory, runs=runs, timeout_s=timeout_s, image_digest=digests.get(inst.image))

    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="validate")
    try:
        with stop_on_signals(stop):
            futures = [pool.submit(one, inst) for inst in insts]
            return [f.result() for f in tqdm(futures, total=len(insts), desc="validate", unit="inst",
                                             disable=not progress)]
    except RunInterrupted:
        pool.shutdown(wait=False, cancel_futures=True)
        factory.interrupt()
        raise
    finally:
        pool.shutdown(wait=not stop.is_set(), cancel_futures=stop.is_set())


def load_validation(task_dir: str | Path) -> ValidationReport | None:
    """The task set's ``validation.json`` if there is one (raises ValueError naming the file if it is broken)."""
    p = Path(task_dir) / VALIDATION_FILE
    if not p.is_file():
        return None
    try:
        return ValidationReport.model_validate_json(p.read_text())
    except ValueError as exc:
        raise ValueError(f"{p}: not a validation report ({exc}); fix: re-run `tgsuite tasks validate`") from exc
