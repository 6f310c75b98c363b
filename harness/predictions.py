"""Grade predictions made by any agent or harness (``tgsuite grade``), in SWE-bench's predictions format.

A predictions file is JSON Lines of ``{"instance_id", "model_name_or_path", "model_patch"}``, or the other forms
SWE-bench's ``get_predictions_from_file`` accepts: one JSON list of them, or one JSON object mapping instance ids to
them (SWE-agent's ``preds.json``). Each patch is graded by the same procedure as
``tgsuite eval`` grades an agent's patch (``harness.runner_episode.run_patch_attempt``: a fresh grading sandbox,
``harness.grading.grade_patch``, the gold control run for invalid grades, infrastructure errors retried and never
scored). The run directory has eval's layout (``manifest.json``, ``episodes/<id>/<arm>/s0/a<k>/``,
``results.jsonl``) so ``tgsuite analyze`` and ``tgsuite report`` read it, plus SWE-bench's run report
(``<model>.<run folder name>.json``, ``harness.schema.SwebenchReport``).

Covered: one model per file (the arm is a slug of ``model_name_or_path``), resume (finished predictions are kept;
a run folder that graded another patch for a predicted instance is refused, never reported with the old grade),
SWE-bench's report semantics (a patch that does not apply is an *error* there, as in SWE-bench; in
``results.jsonl`` it stays the model's failure ``patch_apply_failed``). Not covered: behaviour requirements (no
conversation exists, so ``behaviour_ok`` is False and ``behaviour`` is empty: only the coding endpoint of
``analyze`` is meaningful on such a run).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from harness.infra import ControlCache, ErrorRateGuard, RetryPolicy, atomic_write_text
from harness.interfaces import EpisodeLimits
from harness.json_records import decode_utf8, json_list_or_lines
from harness.run_control import RunInterrupted, check_out_dir, run_id_for
from harness.rundir import RESULT_FILE, attempt_indices, episode_dir
from harness.runner import ARM_NAME, execute_jobs, plan_work, rebuild_results, run_lock
from harness.runner_episode import EpisodeContext, SandboxFactory, run_patch_attempt
from harness.runner_manifest import build_manifest, check_resume_compatible, write_manifest
from harness.schema import EpisodeResult, Prediction, SwebenchReport, TaskSet

log = logging.getLogger(__name__)

KNOWN_FIELDS = frozenset({"instance_id", "model_name_or_path", "model_patch"})


def _parse_records(path: Path) -> list[tuple[str, object]]:
    text = decode_utf8(path, path.read_bytes(), "predictions file")
    whole = _one_json_object(text)
    if whole is not None:
        return _object_records(f"{path}:{text[:text.index('{')].count(chr(10)) + 1}", path, whole)
    return json_list_or_lines(path, text, "prediction")


def _one_json_object(text: str) -> dict | None:
    """The file's content when it is one JSON object (possibly over several lines), else None (JSON Lines)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _object_records(where: str, path: Path, obj: dict) -> list[tuple[str, object]]:
    """One JSON object (starting at ``where``): a single prediction, or SWE-agent's ``{instance_id: prediction}``
    (``preds.json``), which SWE-bench's ``get_predictions_from_file`` reads as its values."""
    if "instance_id" in obj or not obj or not all(isinstance(v, dict) for v in obj.values()):
        return [(where, obj)]
    return [(f"{path}[{key!r}]", value) for key, value in obj.items()]


def load_predictions(path: str | Path) -> list[Prediction]:
    """Read a predictions file; fields other than SWE-bench's three are kept in ``Prediction.extra``.

    Raises ``ValueError`` naming the file, line and field for: bad JSON, a missing or empty ``instance_id`` /
    ``model_name_or_path``, a non-string patch, an instance predicted twice, several models in one file.
    """
    path = Path(path)
    preds: list[Prediction] = []
    for where, obj in _parse_records(path):
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: a prediction must be a JSON object, got {type(obj).__name__}")
        known = {k: v for k, v in obj.items() if k in KNOWN_FIELDS}
        try:
            preds.append(Prediction(**known, extra={k: v for k, v in obj.items() if k not in KNOWN_FIELDS}))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"{where}: field {field!r}: {err['msg']}; fix: SWE-bench's format is "
                             '{"instance_id": ..., "model_name_or_path": ..., "model_patch": "<diff>"}') from None
    if not preds:
        raise ValueError(f"{path}: no predictions; fix: one JSON object per line")
    seen: set[str] = set()
    for p in preds:
        if p.instance_id in seen:
            raise ValueError(f"{path}: instance {p.instance_id!r} is predicted twice; fix: keep one line per instance")
        seen.add(p.instance_id)
    models = sorted({p.model_name_or_path for p in preds})
    if len(models) > 1:
        raise ValueError(f"{path}: {len(models)} models ({', '.join(models[:3])}); fix: one predictions file per "
                         "model_name_or_path, each graded into its own --out")
    return preds


def arm_name(model_name_or_path: str) -> str:
    """A directory-safe arm name for a model (SWE-bench writes ``/`` as ``__``; other odd characters → ``-``)."""
    slug = re.sub(r"[^A-Za-z0-9_.@-]", "-", model_name_or_path.replace("/", "__")).strip("-.") or "model"
    return slug if slug[0].isalnum() else f"m{slug}"


def check_against_tasks(preds: Sequence[Prediction], task_set: TaskSet, source: str) -> None:
    """Every predicted instance must exist in the task set (SWE-bench refuses unknown ids too)."""
    unknown = sorted({p.instance_id for p in preds} - {i.instance_id for i in task_set.instances})
    if unknown:
        raise ValueError(f"{source}: {len(unknown)} predicted instance(s) not in task set {task_set.name} "
                         f"(first: {unknown[0]!r}); fix: grade against the task set the predictions were made for")


def regraded_with_other_patches(out_dir: str | Path, arm: str, patches: Mapping[str, str]) -> list[str]:
    """Instances of ``patches`` with a finished attempt in ``out_dir`` (arm ``arm``) that graded another patch:
    a resume would report that grade for this prediction."""
    changed = []
    for iid, patch in sorted(patches.items()):
        ep = episode_dir(Path(out_dir), iid, arm, 0)
        for k in attempt_indices(ep):
            stored = ep / f"a{k}" / "patch.diff"
            if (ep / f"a{k}" / RESULT_FILE).is_file() and stored.is_file():
                with open(stored, encoding="utf-8", errors="replace", newline="") as fh:
                    if fh.read() != patch:
                        changed.append(iid)
                        break
    return changed


def grade_predictions(task_set: TaskSet, preds: Sequence[Prediction], out_dir: str | Path, *,
                      sandbox_factory: SandboxFactory, workers: int = 1, retry: RetryPolicy | None = None,
                      excluded_tests: dict[str, list[str]] | None = None, grade_timeout_s: float = 900.0,
                      argv: Sequence[str] = (), arm: str | None = None,
                      model_name_or_path: str | None = None) -> list[EpisodeResult]:
    """Grade (or resume grading) every prediction into ``out_dir``; returns the results of the predicted
    instances (the latest attempt of each). ``task_set`` may hold more instances than were predicted. ``arm``
    names the results' arm (default: ``arm_name`` of the model); ``analyze`` reads ``<plan arm>@s<seed>``.
    ``model_name_or_path`` (default: the predictions') is needed when ``preds`` is empty (every predicted instance
    rejected by validation): the run directory is still made, so the same command resumes it."""
    out, retry = Path(out_dir), retry or RetryPolicy()
    check_against_tasks(preds, task_set, "predictions")
    model = model_name_or_path or (preds[0].model_name_or_path if preds else None)
    if model is None:
        raise ValueError("grade_predictions: no predictions and no model_name_or_path")
    arm = arm or arm_name(model)
    if not ARM_NAME.match(arm):
        raise ValueError(f"arm name {arm!r} must match {ARM_NAME.pattern}; fix: e.g. --arm tg@s0")
    check_out_dir(out, "grade", task_set.path)
    patches = {p.instance_id: p.model_patch or "" for p in preds}
    instances = [i for i in task_set.instances if i.instance_id in patches]
    specs = {arm: f"predictions:{model}"}
    with run_lock(out):
        run_id = run_id_for(out)  # unique, kept on resume (as eval's): two --out folders of one name never mix
        check_resume_compatible(out, task_set, specs)
        changed = regraded_with_other_patches(out, arm, patches)
        if changed:
            raise ValueError(f"--out {out}: {len(changed)} instance(s) were graded here with another patch than this "
                             f"predictions file's (first: {changed[0]!r}); a resume would report the old grades. "
                             "fix: grade these predictions into a new --out")
        write_manifest(out, build_manifest(run_id=run_id, task_set=task_set, arm_specs=specs, seeds=[0],
                                           factory=sandbox_factory, limits=EpisodeLimits(), protocol_hash=None,
                                           argv=list(argv), policies={}))
        ctx = EpisodeContext(run_id=run_id, out_dir=out, factory=sandbox_factory,
                             limits=EpisodeLimits(), controls=ControlCache(out / "controls"),
                             grade_timeout_s=grade_timeout_s, excluded_tests=dict(excluded_tests or {}))
        plan = plan_work(out, instances, [arm], [0], retry=retry)
        log.info("grade %s: %d predictions to grade, %d already graded", arm, len(plan.todo), len(plan.done))
        try:  # eval's executor: retries, the infra-error guard, SIGINT/SIGTERM (queued cancelled, sandboxes ended)
            execute_jobs(plan.todo, lambda job: run_patch_attempt(job, patches[job.instance.instance_id], ctx),
                         sandbox_factory.interrupt, ctx, retry, max(1, workers),
                         ErrorRateGuard(), False, None)
        except RunInterrupted:
            rebuild_results(out, instances, [arm], [0])
            raise
        return rebuild_results(out, instances, [arm], [0])


def swebench_report(task_set: TaskSet, preds: Sequence[Prediction], results: Sequence[EpisodeResult]) -> SwebenchReport:
    """SWE-bench's run report from our results, with SWE-bench's category rules (module docstring)."""
    by_id = {r.instance_id: r for r in results}
    submitted = sorted(p.instance_id for p in preds)
    empty = sorted(p.instance_id for p in preds if not (p.model_patch or ""))
    resolved, unresolved, error = [], [], []
    for iid in submitted:
        if iid in empty:
            continue
        r = by_id.get(iid)
        # a whitespace-only patch is not SWE-bench's empty patch: its `git apply` / `patch` fail, an error there
        if r is None or not r.scored or r.status in ("patch_apply_failed", "empty_patch"):
            error.append(iid)
        elif r.resolved:
            resolved.append(iid)
        else:
            unresolved.append(iid)
    reasons = {iid: reason for iid in error if (reason := _failure_reason(by_id.get(iid)))}
    ambiguous = sorted(iid for iid in reasons if reasons[iid] == "ambiguous")
    infra = sorted(set(reasons) - set(ambiguous))
    incomplete = sorted({i.instance_id for i in task_set.instances} - set(submitted))
    completed = sorted(resolved + unresolved)
    return SwebenchReport(
        total_instances=len(task_set.instances), submitted_instances=len(submitted),
        completed_instances=len(completed), resolved_instances=len(resolved),
        unresolved_instances=len(unresolved), infra_failure_instances=len(infra),
        ambiguous_failure_instances=len(ambiguous), empty_patch_instances=len(empty), error_instances=len(error),
        completed_ids=completed, incomplete_ids=incomplete, empty_patch_ids=empty, submitted_ids=submitted,
        resolved_ids=resolved, unresolved_ids=unresolved, infra_failure_ids=infra, ambiguous_failure_ids=ambiguous,
        failure_reasons=dict(sorted(reasons.items())), error_ids=error,
    )


def _failure_reason(r: EpisodeResult | None) -> str | None:
    """Why an error is not the patch's (SWE-bench's ``failure_reasons``), None when it is (it did not apply)."""
    if r is None:
        return "not_graded"  # rejected by validation.json: the instance itself is broken
    if r.failure_class == "infra":
        return f"infra_error: {r.infra_kind}" if r.infra_kind else "infra_error"
    if r.failure_class in ("invalid_instance", "ambiguous"):
        return r.failure_class
    return None


def write_swebench_report(out_dir: str | Path, model_name_or_path: str, report: SwebenchReport) -> Path:
    """Write ``<model with / as __>.<out_dir's name>.json`` (SWE-bench's ``<model>.<run_id>.json``, the folder's
    name as the run id) into ``out_dir``; returns its path."""
    out = Path(out_dir)
    path = out / f"{model_name_or_path.replace('/', '__')}.{out.resolve().name}.json"
    atomic_write_text(path, json.dumps(report.model_dump(mode="json"), indent=4) + "\n")
    return path


__all__ = ["arm_name", "grade_predictions", "load_predictions", "swebench_report", "write_swebench_report"]
