"""The run manifest (``manifest.json``, ``harness.schema.RunManifest``): what produced a run directory.

Records git commit and dirtiness of the checkout, versions of the packages that shape results, the task set's
name/hash/instance ids, image digests, arm policy specs (with checkpoint hashes when a policy exposes
``checkpoint_sha256``), seeds, sandbox kind and isolation, limits, grader version, behaviour checkers, the frozen
protocol's sha256 when one is given, and host facts. On resume the manifest is rewritten with the union of arms,
seeds and instances, keeping ``created_at`` (a resume with ``--instance``/``--limit`` never drops instances the run
evaluated: the analysis reads the manifest as the cells the run owns); a different task set, a different policy
behind an arm name, other weights behind an arm (its checkpoint hash), other episode limits, other hints
(``feedback``), other generation settings (``ArmSpec.generation``, when both manifests record them) behind an arm,
or another run seed (``run_seed``, when both record it) are refused.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.grading import GRADER_VERSION
from harness.infra import atomic_write_text
from harness.interfaces import EpisodeLimits, FeedbackProvider, Policy
from harness.rundir import MANIFEST_FILE, episode_dirs, read_manifest
from harness.sandbox_providers import SandboxFactory
from harness.schema import ArmSpec, RunManifest, TaskSet
from protocols.provenance import git_state, package_versions, utc_now

log = logging.getLogger(__name__)


def check_resume_compatible(out_dir: Path, task_set: TaskSet, arm_specs: dict[str, str]) -> None:
    """Refuse to mix runs: same task set hash, and an existing arm name must keep its policy spec."""
    old = read_manifest(out_dir)
    if old is None:
        return
    if old.task_set_sha256 != task_set.sha256:
        raise ValueError(f"{Path(out_dir) / MANIFEST_FILE}: this run used task set {old.task_set_name} "
                         f"(sha256 {old.task_set_sha256[:12]}), not {task_set.name} ({task_set.sha256[:12]}); "
                         "fix: choose a new --out directory")
    for arm in old.arms:
        if arm.name in arm_specs and arm_specs[arm.name] != arm.policy:
            raise ValueError(f"{Path(out_dir) / MANIFEST_FILE}: arm {arm.name!r} was {arm.policy!r}, now "
                             f"{arm_specs[arm.name]!r}; fix: give the new policy another arm name or a new --out")


def describe_feedback(feedback: FeedbackProvider | Mapping[str, FeedbackProvider | None] | None,
                      arms: list[str]) -> dict[str, str]:
    """``{arm: the provider's repr}`` for the arms that get hints (``feedback``: one provider for every arm, or
    ``{arm: provider}`` as ``run_eval`` takes it). The shipped providers are frozen dataclasses, whose repr names
    every setting (kind, placement, checkers, mixture weights); any other provider is named by its class."""
    if feedback is None:
        return {}
    per_arm = dict(feedback) if isinstance(feedback, Mapping) else {a: feedback for a in arms}
    return {a: repr(fb) if dataclasses.is_dataclass(fb) else f"{type(fb).__module__}.{type(fb).__qualname__}"
            for a, fb in sorted(per_arm.items()) if fb is not None and a in arms}


def build_manifest(*, run_id: str, task_set: TaskSet, arm_specs: dict[str, str], seeds: list[int],
                   factory: SandboxFactory, limits: EpisodeLimits, protocol_hash: str | None, argv: list[str],
                   policies: Mapping[str, Policy], feedback: dict[str, str] | None = None,
                   run_seed: int | None = None) -> RunManifest:
    """A manifest for this invocation, merged with the one already in the run directory (if any)."""
    arms = [ArmSpec(name=n, policy=s, checkpoint_sha256=getattr(_inner(policies.get(n)), "checkpoint_sha256", None),
                    train_seed=getattr(_inner(policies.get(n)), "train_seed", None),
                    generation=generation_of(policies.get(n))) for n, s in arm_specs.items()]
    commit, dirty = git_state()
    checkers = sorted({c for i in task_set.instances for c in i.behaviour})
    return RunManifest(
        run_id=run_id, created_at=utc_now(), argv=argv, git_commit=commit,
        git_dirty=dirty, packages=package_versions(), task_set_name=task_set.name, task_set_sha256=task_set.sha256,
        instance_ids=[i.instance_id for i in task_set.instances], image_digests=factory.image_digests(), arms=arms,
        seeds=seeds, sandbox=factory.kind, isolated=factory.isolated,
        disk_limit=factory.disk_limit(),
        limits={k: float(v) for k, v in dataclasses.asdict(limits).items()}, grader_version=GRADER_VERSION,
        behaviour_checkers=checkers, feedback=dict(feedback or {}), protocol_hash=protocol_hash,
        host={"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.executable}, run_seed=run_seed,
        attempt_log=True,
    )


def _inner(policy: Policy | None) -> object:
    """The policy a wrapper (e.g. a hint or timing wrapper with ``.inner``) delegates to; the policy itself else."""
    return getattr(policy, "inner", policy)


def generation_of(policy: Policy | None) -> dict[str, Any]:
    """The policy's ``generation_settings()`` (what it sends / samples with), {} when it has none."""
    settings = getattr(_inner(policy), "generation_settings", None)
    return dict(settings()) if callable(settings) else {}


def _same_generation(path: Path, old: RunManifest, new: RunManifest) -> None:
    """Refuse a resume whose arm would sample with other settings than its finished episodes (both recorded)."""
    before = {a.name: a.generation for a in old.arms}
    for arm in new.arms:
        was = before.get(arm.name) or {}
        if not was or not arm.generation:
            continue
        changed = [f"{k} {was.get(k)!r} -> {arm.generation.get(k)!r}" for k in sorted(set(was) | set(arm.generation))
                   if was.get(k) != arm.generation.get(k)]
        if changed:
            raise ValueError(f"{path}: arm {arm.name!r} ran with other generation settings ({', '.join(changed)}); "
                             "its finished episodes would be mixed with these. fix: resume with the settings it ran "
                             "with (--temperature / --top-p / --max-tokens as recorded in manifest.json, arms[]."
                             "generation), or use a new --out")


def _same_checkpoints_and_limits(path: Path, old: RunManifest, new: RunManifest) -> None:
    """Refuse a resume whose finished episodes would come from other weights or under other limits: an arm whose
    checkpoint hash changed (same name and spec, e.g. a model directory trained again), a changed episode limit
    (a limit the older manifest does not record is taken at its default), or other hints behind an arm (a manifest
    without ``feedback`` ran without hints)."""
    before = {a.name: a.checkpoint_sha256 for a in old.arms}
    for arm in new.arms:
        was = before.get(arm.name)
        if was and arm.checkpoint_sha256 and was != arm.checkpoint_sha256:
            raise ValueError(f"{path}: arm {arm.name!r} was evaluated with checkpoint {was[:12]}, now "
                             f"{arm.checkpoint_sha256[:12]} (the weights changed); fix: use a new --out, or delete "
                             "the run directory")
    if old.limits:
        defaults = {f.name: float(f.default) for f in dataclasses.fields(EpisodeLimits)}
        changed = [f"{k} {old.limits.get(k, defaults.get(k))!r} -> {v!r}" for k, v in new.limits.items()
                   if old.limits.get(k, defaults.get(k)) != v]
        if changed:
            raise ValueError(f"{path}: this run's episodes ran under other limits ({', '.join(changed)}); fix: the "
                             "same limits (--max-turns, --finish-notice, --format-retries, --wall-s), or a new --out")
    for arm in sorted({a.name for a in new.arms} & {a.name for a in old.arms}):  # no field: ran without hints
        was, now = old.feedback.get(arm), new.feedback.get(arm)
        if was != now:
            raise ValueError(f"{path}: arm {arm!r} ran with feedback {was or 'none'}, now {now or 'none'}; fix: the "
                             "same --feedback, or a new --out")


def _same_run_seed(path: Path, old: RunManifest, new: RunManifest) -> None:
    """Refuse a resume with another run seed (both recorded): its episodes would draw other episode seeds than the
    finished ones, and arms added now would no longer be paired with the others on the same (instance, seed)."""
    if old.run_seed is not None and new.run_seed is not None and old.run_seed != new.run_seed:
        raise ValueError(f"{path}: this run's episodes were seeded with --run-seed {old.run_seed}, now "
                         f"{new.run_seed}; fix: resume with --run-seed {old.run_seed}, or use a new --out")


def write_manifest(out_dir: Path, new: RunManifest) -> RunManifest:
    """Write ``new`` merged with an existing manifest (union of arms, seeds and instances, first ``created_at``
    kept; ``attempt_log`` as the run began: its earlier attempts were logged or not)."""
    old = read_manifest(out_dir)
    if old is not None:
        arms = {a.name: a for a in old.arms} | {a.name: a for a in new.arms}
        seeds = sorted(set(old.seeds) | set(new.seeds))
        if old.protocol_hash and new.protocol_hash and old.protocol_hash != new.protocol_hash:
            raise ValueError(f"{Path(out_dir) / MANIFEST_FILE}: run was started under protocol "
                             f"{old.protocol_hash[:12]}, now {new.protocol_hash[:12]}; fix: use a new --out")
        _same_checkpoints_and_limits(Path(out_dir) / MANIFEST_FILE, old, new)
        _same_generation(Path(out_dir) / MANIFEST_FILE, old, new)
        _same_run_seed(Path(out_dir) / MANIFEST_FILE, old, new)
        ids = list(dict.fromkeys([*old.instance_ids, *new.instance_ids]))  # union, the old order first
        new = new.model_copy(update={"created_at": old.created_at, "arms": list(arms.values()), "seeds": seeds,
                                     "instance_ids": ids, "protocol_hash": new.protocol_hash or old.protocol_hash,
                                     "run_seed": old.run_seed if new.run_seed is None else new.run_seed,
                                     "attempt_log": old.attempt_log,  # a run begun without the log stays so
                                     "registration": new.registration or old.registration})
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out_dir) / MANIFEST_FILE, json.dumps(new.model_dump(mode="json"), indent=1))
    return new


def register_under_plan(out_dir: Path, manifest: RunManifest, record: str | Path) -> RunManifest:
    """Register the run under the frozen record at ``record`` before any episode (``protocols.run_registry``) and
    keep the registration's commit in the manifest. A run that already holds episodes but was never registered (it
    began before runs were registered) stays unregistered: registering it now would not show it was the only one.
    Raises ``ValueError`` naming the fix when the record cannot take the registration."""
    from protocols.load import ProtocolError
    from protocols.run_registry import register_run

    if manifest.registration is None and any(episode_dirs(out_dir)):
        log.warning("run %s holds episodes but was never registered under its plan (it began before runs were "
                    "registered); it stays unregistered, and its analysis reports it so", manifest.run_id)
        return manifest
    try:
        commit = register_run(record, manifest.model_dump(mode="json"), out_dir)
    except ProtocolError as exc:
        raise ValueError(str(exc)) from None
    if commit == manifest.registration:
        return manifest
    return write_manifest(out_dir, manifest.model_copy(update={"registration": commit}))
