"""The stages of ``tgsuite reproduce`` as public functions: each takes typed inputs and returns its typed outputs
(``tgsuite.pipeline.records``), which ``tgsuite.pipeline.stage_runner.StageRunner`` records (``outputs.paths`` lists the
files whose existence makes a finished stage fresh).

The orchestrator (``tgsuite.pipeline.reproduce``) and the exploratory studies (``tgsuite.pipeline.studies``,
``tiers``, ``probes``) both call these; neither calls back into the other. Covered: images, task sets, validation,
SFT, protocol freeze, RL training, evaluation, analysis, report. Not covered: deciding WHEN a stage runs (the
``StageRunner`` and its input hashes do that).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from protocols.provenance import utc_now
from tgsuite.pipeline.presets import Preset, RLOverrides
from tgsuite.pipeline.records import (
    AnalyzeOutputs,
    EvalOutputs,
    FreezeOutputs,
    ImagesOutputs,
    ManifestFiles,
    Paths,
    ReportOutputs,
    SftOutputs,
    TaskSetOutputs,
    TrainOutputs,
    ValidateOutputs,
)
from tgsuite.pipeline.stage_runner import atomic_write_json

if TYPE_CHECKING:
    from evalsuite.schema import Exploratory
    from repro.config import TrainConfig
    from repro.sampler import SamplerPolicy

log = logging.getLogger(__name__)

PLANS_DIR = Path(__file__).resolve().parents[2] / "protocols" / "plans"


def pipeline_paths(out: Path) -> Paths:
    """The folders and files of a reproduction in ``out`` (``Paths.under``)."""
    return Paths.under(out)


def stage_images(preset: Preset) -> ImagesOutputs:
    if preset.eval.sandbox != "docker":
        return ImagesOutputs(image=None)
    from harness.images import connect, ensure_base_image, image_digest

    client = connect()
    tag = ensure_base_image(client)
    return ImagesOutputs(image=tag, digest=image_digest(client, tag))


def stage_tasks(out: Path, split: str, repos: int, per_repo: int, seed: int) -> TaskSetOutputs:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    summary = make_mini(out, split=split, repos=repos, tasks_per_repo=per_repo, seed=seed,  # type: ignore[arg-type]
                        overwrite=True)
    ts = load_task_set(out)
    return TaskSetOutputs.model_validate({"paths": {"tasks": str(out / "tasks.jsonl")}, "sha256": ts.sha256,
                                          "name": ts.name, "n": summary.tasks})


def stage_heldout(paths: Paths, preset: Preset) -> TaskSetOutputs:
    """The preset's held-out set: the stratified primary set (``Preset.heldout``, against the training set in
    ``paths.train_tasks``) and its generalization tier; without a design, the unstratified generator."""
    if preset.heldout is None:
        return stage_tasks(paths.heldout_tasks, "heldout", preset.heldout_repos, preset.heldout_tasks_per_repo,
                           preset.task_seed)
    from tgsuite.pipeline.heldout import train_signatures_of, write_heldout

    sigs = train_signatures_of(paths.train_tasks, repos=preset.train_repos,
                               tasks_per_repo=preset.train_tasks_per_repo, seed=preset.task_seed)
    return write_heldout(preset.heldout, sigs, paths.heldout_tasks, paths.generalization_tasks)


def stage_validate(task_dir: Path, preset: Preset, sha256: str) -> ValidateOutputs:
    from harness.validate import load_validation, validate_task_set

    report = load_validation(task_dir)
    if (report is None or report.task_set_sha256 != sha256 or report.runs != preset.validate_runs
            or report.sandbox != preset.eval.sandbox):
        report = validate_task_set(task_dir, runs=preset.validate_runs, sandbox=preset.eval.sandbox,
                                   workers=preset.workers, progress=True)
    else:
        log.info("reusing %s/validation.json (same task set, runs and sandbox)", task_dir)
    if report.rejected:
        reasons = "; ".join(f"{r.instance_id}: {r.reason}" for r in report.rejected[:5])
        raise RuntimeError(f"{len(report.rejected)} held-out instance(s) failed validation ({reasons}). Every "
                           f"generated held-out instance must validate; see {task_dir}/validation.json")
    return ValidateOutputs.model_validate({"paths": {"validation": str(task_dir / "validation.json")},
                                           "n_valid": len(report.valid_ids())})


def stage_sft(paths: Paths, preset: Preset) -> SftOutputs:
    from repro.sft import SFTConfig, run_sft

    cfg = SFTConfig(train_tasks=str(paths.train_tasks), heldout_tasks=None, seed=preset.task_seed,
                    workers=preset.workers, **preset.sft)
    report = run_sft(cfg, paths.sft)
    return SftOutputs.model_validate({"paths": {"model": report.model_dir}, "report": report.model_dump(mode="json")})


def stage_sft_start(preset: Preset) -> SftOutputs:
    """The shipped SFT coder ``preset.sft_start`` as the SFT stage's record, after checking every file against its
    manifest (``repro.sft_ship.verify_sft``): RL starts from it and no SFT is trained."""
    from repro.pretrain.ship import resolve_init
    from repro.sft_ship import verify_sft

    assert preset.sft_start is not None
    path = resolve_init(preset.sft_start)
    manifest = verify_sft(path)
    report = {"model_dir": str(path), "shipped": preset.sft_start, "recipe_sha256": manifest.recipe_sha256,
              "n_trajectories": manifest.n_trajectories, "train_tokens": manifest.train_tokens,
              "steps": manifest.steps, "wall_s": manifest.wall_s, "heldout": manifest.heldout}
    return SftOutputs.model_validate({"paths": {"model": str(path)}, "report": report})


def stage_freeze(paths: Paths, preset: Preset, heldout: TaskSetOutputs) -> FreezeOutputs:
    from protocols.freeze import freeze_plan, with_task_set
    from protocols.load import load_plan

    proto = with_task_set(load_plan(PLANS_DIR / preset.plan), name=heldout.name, sha256=heldout.sha256)
    rec = freeze_plan(proto, out=paths.frozen, overwrite=True)
    return FreezeOutputs.model_validate({"paths": {"frozen": str(paths.frozen)}, "sha256": rec.sha256,
                                         "frozen_at": rec.frozen_at})


def _rl_config(run_dir: Path, paths: Paths, preset: Preset, arm: str, seed: int,
               extra: RLOverrides | None = None) -> TrainConfig:
    """The arm's TrainConfig from the SFT model on the train tasks under the preset's RL settings (plus ``extra``);
    ``run_dir`` is emptied: the stage re-runs because its inputs changed or it never finished, so it starts clean."""
    from repro.config import load_config

    cfg = load_config(arm=arm, overrides={**preset.rl, **(extra or {}), "run.seed": seed,
                                          "model.init": str(paths.sft_model),
                                          "tasks.path": str(paths.train_tasks)})
    if run_dir.exists():
        shutil.rmtree(run_dir)
    return cfg


def stage_train(run_dir: Path, paths: Paths, preset: Preset, arm: str, seed: int,
                protocol_hash: str | None = None) -> TrainOutputs:
    from repro.train import train_rl

    cfg = _rl_config(run_dir, paths, preset, arm, seed)
    info = train_rl(cfg, run_dir, argv=["tgsuite", "reproduce", "--preset", preset.name], protocol_hash=protocol_hash)
    return TrainOutputs.model_validate({"paths": {"checkpoint": info.path}, "checkpoint": info.model_dump(mode="json")})


def stage_loop(run_dir: Path, paths: Paths, preset: Preset, arm: str, seed: int,
               protocol_hash: str | None = None, loop: RLOverrides | None = None) -> TrainOutputs:
    """The production recipe's loop from the SFT model (``repro.distill.train_loop``): self-distillation on its own
    best trajectories with soft labels, RL with ``arm`` under the preset's RL settings, re-distillation; ``loop``
    holds the ``distill.*`` overrides. ``protocol_hash`` is accepted for the stage signature; the loop's
    checkpoints do not record it."""
    from repro.distill import train_loop

    cfg = _rl_config(run_dir, paths, preset, arm, seed, loop)
    info = train_loop(cfg, run_dir, argv=["tgsuite", "reproduce", "--preset", preset.name])
    return TrainOutputs.model_validate({"paths": {"checkpoint": info.path}, "checkpoint": info.model_dump(mode="json")})


def eval_policy(model_dir: str, preset: Preset) -> SamplerPolicy:
    """A sampling policy over the checkpoint, its engine batching the concurrent episodes' turns; close
    ``policy.engine`` when done."""
    import torch
    from transformers import AutoModelForCausalLM

    from repro.batching import BatchingEngine
    from repro.sampler import KVSampler, SamplerPolicy
    from repro.tokenizer import load_tokenizer

    # float32 whatever the files hold (the shipped coder is bf16): evaluation samples as RL rollouts do
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = load_tokenizer(model_dir)
    engine = BatchingEngine(KVSampler(model, prefix_cache=2 * preset.eval.concurrency),
                            max_batch=preset.eval.concurrency)
    spec = f"hf:{model_dir}"  # episodes record it as their policy, as the manifest records the arm's spec
    pol = SamplerPolicy(engine, tok, name=spec, max_new_tokens=preset.eval.max_new_tokens,
                        temperature=preset.eval.temperature)
    pol.spec = spec  # type: ignore[attr-defined]
    return pol


def stage_eval(run_dir: Path, heldout: Path, arms: dict[str, str], preset: Preset, protocol_hash: str | None,
               excluded: dict[str, list[str]], feedback: str | None = None,
               protocol_record: Path | None = None) -> EvalOutputs:
    """Evaluate checkpoints ``arms`` (runner arm -> model dir) on the held-out set; ``feedback`` is a
    ``harness.feedback_spec.parse_feedback`` spec given to every arm (None = no hints). ``protocol_record``: the
    frozen record the run is registered under (the main evaluation; exploratory ones record the hash only)."""
    from harness.feedback_spec import parse_feedback
    from harness.interfaces import EpisodeLimits
    from harness.metrics import metrics_for
    from harness.run_control import sandbox_run_id
    from harness.runner import run_eval
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set
    from tgsuite.pipeline.stage_runner import fresh_or_resumed

    fresh_or_resumed(run_dir)  # resume an interrupted evaluation; never keep episodes of other checkpoints
    ts = load_task_set(heldout)
    policies = {name: eval_policy(d, preset) for name, d in arms.items()}
    limits = EpisodeLimits(max_turns=preset.eval.max_turns, finish_notice_turns=preset.eval.finish_notice_turns,
                           format_retries=preset.eval.format_retries)
    with contextlib.ExitStack() as stack, TaskSandboxFactory(ts, kind=preset.eval.sandbox,
                                                             run_id=sandbox_run_id(run_dir)) as fac:
        for pol in policies.values():  # our sampling policies own a batching engine thread; stop it after
            close = getattr(getattr(pol, "engine", None), "close", None)
            if close is not None:
                stack.callback(close)
        fac.preflight()
        results = run_eval(ts, policies, list(range(preset.eval.episodes)), run_dir, sandbox_factory=fac,
                           workers=preset.eval.concurrency, order="arm", limits=limits, run_seed=preset.task_seed,
                           protocol_hash=protocol_hash, protocol_record=protocol_record, excluded_tests=excluded,
                           progress=True,
                           metrics_for=metrics_for(ts),
                           feedback={n: parse_feedback(feedback) for n in arms} if feedback else None,
                           argv=["tgsuite", "reproduce", "--preset", preset.name])
    scored = [r for r in results if r.scored]
    return EvalOutputs(paths=ManifestFiles(manifest=str(run_dir / "manifest.json")), finished_at=utc_now(),
                       n=len(results), scored=len(scored), resolved=sum(r.resolved for r in scored),
                       behaviour_ok=sum(r.behaviour_ok for r in scored))


def stage_analyze(paths: Paths, run_dirs: list[Path], exploratory: Exploratory | None = None) -> AnalyzeOutputs:
    from evalsuite.analyze import analyze
    from repro.checkpoint import file_sha256

    result = analyze(paths.frozen, [str(d) for d in run_dirs], exploratory=exploratory)
    atomic_write_json(paths.analysis, json.loads(result.model_dump_json()))
    return AnalyzeOutputs.model_validate({"paths": {"analysis": str(paths.analysis)},
                                          "decision": result.decision.verdict,
                                          "reasons": list(result.decision.reasons),
                                          "sha256": file_sha256(paths.analysis)})


def stage_report(paths: Paths, run_dirs: list[Path], training: dict[str, dict[str, str]]) -> ReportOutputs:
    from reports.build import build_report

    summary = build_report(paths.analysis, out_dir=paths.report, protocol=paths.frozen,
                           run_dirs=[str(d) for d in run_dirs], training_metrics=training)
    return ReportOutputs.model_validate({"paths": {"index": str(paths.report / "index.html")},
                                         "summary": json.loads(summary.model_dump_json())})


def excluded_tests(task_dir: Path) -> dict[str, list[str]]:
    from harness.episode_grading import excluded_tests_of

    return excluded_tests_of(task_dir)
