"""``tgsuite reproduce``: the mini reproduction end to end, as resumable stages.

images → train and held-out task sets → validate the held-out set in Docker → tokenizer + SFT base →
freeze the protocol (before any RL arm trains; its hash goes into every later manifest) → RL arms × seeds →
evaluate the base and every checkpoint on the held-out repositories → analyze → HTML report with the verdict.

Each stage is skipped on re-run when its inputs are unchanged (``tgsuite.pipeline.stage_runner``); times per stage are printed and
recorded in ``<out>/pipeline.json``. Every number in the report comes from the runs made here: nothing is simulated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsuite.schema import Exploratory
from evalsuite.study_tables import ArmEpisodes
from repro.pretrain.ship import init_fingerprint
from tgsuite.pipeline.generalization import evaluate_generalization
from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.records import (
    AnalyzeOutputs,
    EvalOutputs,
    FreezeOutputs,
    ImagesOutputs,
    Paths,
    ReportOutputs,
    SftOutputs,
    TaskSetOutputs,
    TrainOutputs,
    ValidateOutputs,
)
from tgsuite.pipeline.stage_runner import StageRunner, atomic_write_json, canonical_hash
from tgsuite.pipeline.stages import (
    PLANS_DIR,
    excluded_tests,
    pipeline_paths,
    stage_analyze,
    stage_eval,
    stage_freeze,
    stage_heldout,
    stage_images,
    stage_report,
    stage_sft,
    stage_sft_start,
    stage_tasks,
    stage_train,
    stage_validate,
)
from tgsuite.pipeline.studies import StudyContext, run_studies

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """Outputs of the stages before RL: the two task sets, the SFT base and the frozen protocol."""

    train_ts: TaskSetOutputs
    held_ts: TaskSetOutputs
    sft: SftOutputs
    frozen: FreezeOutputs
    paths: Paths  # with sft_model: the SFT stage's model


@dataclass(frozen=True)
class Trained:
    """The checkpoints of the main arms: runner arm -> directory, their stage records, training run dirs."""

    ckpts: dict[str, str]
    records: dict[str, SftOutputs | TrainOutputs]  # "base": the SFT stage's record
    training: dict[str, dict[str, str]]


def prepare(runner: StageRunner, paths: Paths, preset: Preset) -> Prepared:
    """images → task sets → validation → SFT base → protocol freeze."""
    p = preset.model_dump(mode="json")
    img = runner.run("images", {"sandbox": preset.eval.sandbox}, lambda: stage_images(preset), ImagesOutputs)
    train_ts = runner.run("tasks_train", {k: p[k] for k in ("task_seed", "train_repos", "train_tasks_per_repo")},
                          lambda: stage_tasks(paths.train_tasks, "train", preset.train_repos,
                                              preset.train_tasks_per_repo, preset.task_seed), TaskSetOutputs)
    held_inputs = {k: p[k] for k in ("task_seed", "heldout_repos", "heldout_tasks_per_repo")}
    if preset.heldout is not None:  # stratified against the training set: its hash is an input
        held_inputs = {"train": train_ts.sha256, "design": p["heldout"], "code": "primary@v1"}
    held_ts = runner.run("tasks_heldout", held_inputs, lambda: stage_heldout(paths, preset), TaskSetOutputs)
    runner.run("validate", {"tasks": held_ts.sha256, "runs": preset.validate_runs, "image": img.digest,
                            "sandbox": preset.eval.sandbox},
               lambda: stage_validate(paths.heldout_tasks, preset, held_ts.sha256), ValidateOutputs)
    if held_ts.generalization is not None:
        gen_sha = held_ts.generalization.sha256
        runner.run("validate_generalization", {"tasks": gen_sha, "runs": preset.validate_runs,
                                               "image": img.digest, "sandbox": preset.eval.sandbox},
                   lambda: stage_validate(paths.generalization_tasks, preset, gen_sha), ValidateOutputs)
    if preset.sft_start is not None:  # RL starts from a shipped SFT coder; nothing is trained here
        sft = runner.run("sft", {"start": preset.sft_start, **init_fingerprint(preset.sft_start)},
                         lambda: stage_sft_start(preset), SftOutputs)
    else:
        sft = runner.run("sft", {"tasks": train_ts.sha256, "sft": p["sft"], "seed": preset.task_seed,
                                 **init_fingerprint(preset.sft.get("init"))},
                         lambda: stage_sft(paths, preset), SftOutputs)
    paths = paths.model_copy(update={"sft_model": Path(sft.paths.model)})
    plan_sha = canonical_hash((PLANS_DIR / preset.plan).read_text())
    frozen = runner.run("protocol", {"plan": plan_sha, "tasks": held_ts.sha256},
                        lambda: stage_freeze(paths, preset, held_ts), FreezeOutputs)
    return Prepared(train_ts=train_ts, held_ts=held_ts, sft=sft, frozen=frozen, paths=paths)


def train_arms(runner: StageRunner, preset: Preset, prep: Prepared) -> Trained:
    """Every main arm × seed from the SFT base (the base itself is checkpoint ``base``)."""
    sft, protocol, paths = prep.sft, prep.frozen.sha256, prep.paths
    ckpts: dict[str, str] = {"base": sft.paths.model}
    records: dict[str, SftOutputs | TrainOutputs] = {"base": sft}
    training: dict[str, dict[str, str]] = {}
    rl = preset.model_dump(mode="json")["rl"]
    for arm in preset.arms:
        for seed in preset.seeds:
            run_dir = paths.train / arm / f"s{seed}"
            rec = runner.run(f"train_{arm}_s{seed}",
                             {"sft": sft.report.model_dir, "sft_inputs": canonical_hash(sft.report),
                              "rl": rl, "arm": arm, "seed": seed, "protocol": protocol},
                             lambda a=arm, s=seed, d=run_dir: stage_train(d, paths, preset, a, s, protocol),
                             TrainOutputs)
            ckpts[f"{arm}@s{seed}"] = rec.paths.checkpoint
            records[f"{arm}@s{seed}"] = rec
            training.setdefault(arm, {})[str(seed)] = str(run_dir)
    return Trained(ckpts=ckpts, records=records, training=training)


def evaluate_main(runner: StageRunner, preset: Preset, prep: Prepared, trained: Trained,
                  excluded: dict[str, list[str]]) -> tuple[EvalOutputs, EvalOutputs]:
    """The base (``eval/base``) and the arms (``eval/arms``) on the held-out set; returns both stage outputs."""
    protocol, ckpts, paths = prep.frozen.sha256, trained.ckpts, prep.paths
    eval_inputs = {"ckpts": {k: canonical_hash(v) for k, v in sorted(trained.records.items())},
                   "tasks": prep.held_ts.sha256, "protocol": protocol,
                   "eval": preset.eval.stage_inputs()}
    ev_base = runner.run("eval_base", {**eval_inputs, "which": "base"},
                         lambda: stage_eval(paths.eval / "base", paths.heldout_tasks, {"base": ckpts["base"]},
                                            preset, protocol, excluded, protocol_record=paths.frozen), EvalOutputs)
    ev_arms = runner.run("eval_arms", {**eval_inputs, "which": "arms"},
                         lambda: stage_eval(paths.eval / "arms", paths.heldout_tasks,
                                            {k: v for k, v in ckpts.items() if k != "base"}, preset, protocol,
                                            excluded, protocol_record=paths.frozen), EvalOutputs)
    return ev_base, ev_arms


def reproduce(preset: Preset, out_dir: str | Path, *, force: frozenset[str] = frozenset(),
              studies: frozenset[str] = frozenset(), echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the whole reproduction into ``out_dir``; returns the pipeline record.

    ``studies`` selects the exploratory studies of ``tgsuite.pipeline.studies`` (noisy feedback, can-do vs does-do,
    equal compute, ablations, hint probes, behaviour tiers); they run after the main evaluation and are reported,
    never part of the decision."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runner = StageRunner(out, force=force, echo=echo)
    prep = prepare(runner, pipeline_paths(out), preset)
    paths = prep.paths
    trained = train_arms(runner, preset, prep)
    excluded = excluded_tests(paths.heldout_tasks)
    ev_base, ev_arms = evaluate_main(runner, preset, prep, trained, excluded)
    base_dir, arms_dir = paths.eval / "base", paths.eval / "arms"
    general = evaluate_generalization(runner, paths, preset, prep.held_ts, trained.ckpts, trained.records,
                                      prep.frozen.sha256)
    exploratory = Exploratory(label_rates=general) if general else None
    if studies:
        main_episodes = {path: ArmEpisodes(base_dir if key == "base" else arms_dir, key)
                         for key, path in trained.ckpts.items()}  # eval_base and eval_arms name arms by ckpts' keys
        ctx = StudyContext(preset=preset, paths=paths, protocol_sha256=prep.frozen.sha256,
                           heldout_sha256=prep.held_ts.sha256, sft_report=prep.sft.report, ckpts=trained.ckpts,
                           excluded=excluded, main_episodes=main_episodes)
        ex = run_studies(runner, ctx, set(studies))
        exploratory = ex.model_copy(update={"label_rates": [*general, *ex.label_rates]})
    ex_hash = canonical_hash(exploratory.model_dump(mode="json")) if exploratory is not None else None
    analysis = runner.run("analyze", {"eval": canonical_hash(ev_arms), "protocol": prep.frozen.sha256,
                                      "code": "analyze@3", "exploratory": ex_hash},
                          lambda: stage_analyze(paths, [arms_dir], exploratory), AnalyzeOutputs)
    runner.run("report", {"analysis": canonical_hash(analysis), "eval": canonical_hash([ev_arms, ev_base]),
                          "training": canonical_hash(trained.records), "code": "report@4"},
               lambda: stage_report(paths, [arms_dir, base_dir], trained.training), ReportOutputs)
    record = {"preset": preset.model_dump(mode="json"), "out": str(out), "decision": analysis.decision,
              "studies": sorted(studies), "stages": runner.timings(),
              "report": str(paths.report / "index.html"), "protocol_sha256": prep.frozen.sha256}
    atomic_write_json(out / "pipeline.json", record)
    return record
