"""The ``behaviour_tiers`` study of ``tgsuite reproduce --studies behaviour_tiers`` (issue #7, item 3).

Three behaviour tiers, each a checker of ``harness.behaviour.CHECKERS``:

1. format — ``tool_args@v1``: every ``edit_file`` call carries a one-line ``reason`` (machine-checkable);
2. style — ``markdown@v1``: the Markdown rule of the main study;
3. tension — ``ask_first@v1``: ask the user (``ask_user``) before the first file change; it costs a turn the task
   does not need.

Stages (all resumable, all under ``<out>/train/studies/tiers/`` and ``<out>/eval/studies/``):

- ``tiers_sft``: an SFT base trained like the main one (``tgsuite.pipeline.stages.stage_sft`` with the preset's ``sft``
  settings) but whose hinted expert episodes carry the reminder of one of the three tiers
  (``hint_checkers``; ``TierSizes.sft_hint_share`` of the episodes are hinted, split evenly over the tiers), so the
  base can comply when reminded and rarely does unprompted.
- ``tiers_train_<arm>_<tier>_s<seed>``: for each tier, arms ``grpo`` and ``tg`` (``tgsuite.pipeline.stages.stage_train``,
  the preset's RL settings plus ``reward.checker = <tier>``: the format reward, TG's failing-turn gating and its
  hints all target the tier) from that base, × the study's seeds.
- ``tiers_tasks``: the held-out instances of the UNSEEN tier only (``template_tier == "unseen_templates"``, from the
  generalization tier of a stratified held-out design when the run has one, ``unseen_source``:
  templates and names never used in training), written as their own task set with the three tier checkers added
  to each instance's ``behaviour``, so every episode is judged by all three.
- ``tiers_eval``: the base and every tier checkpoint on that set, without hints (``tgsuite.pipeline.stages.stage_eval``).

Analysis (descriptive, exploratory; built by ``evalsuite.study_tables.tier_frame`` / ``tiers_result``): per tier and arm (``base``, ``grpo``, ``tg``; training seeds pooled) the
compliance rate (episodes whose tier checker passes / scored episodes), the same over episodes with at least one
applicable turn, and the resolved rate, each with a Wilson CI (``evalsuite.describe.rate_ci``). The base row of a
tier is the base's episodes judged by that tier's checker. Results: ``Exploratory.behaviour_tiers``. Nothing here is
simulated: every number comes from these runs.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from evalsuite.study_tables import tier_frame, tiers_result
from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.records import EvalOutputs, Paths, SftOutputs, TrainOutputs, UnseenTasksOutputs
from tgsuite.pipeline.sizes import TIERS, TierSizes
from tgsuite.pipeline.stage_runner import StageRunner, atomic_write_json, canonical_hash
from tgsuite.pipeline.study_context import StudyContext, StudyModel, model_key, study_arms

if TYPE_CHECKING:
    from evalsuite.schema import BehaviourTiersResult

log = logging.getLogger(__name__)

LEVELS = {"tool_args@v1": "format", "markdown@v1": "style", "ask_first@v1": "tension"}
UNSEEN = "unseen_templates"


def tier_sizes(preset: Preset) -> TierSizes:
    """The preset's behaviour-tier sizes (``Preset.tier_sizes``)."""
    if preset.tier_sizes is None:
        raise ValueError(f"no behaviour-tier sizes for preset {preset.name!r}; give the Preset tier_sizes "
                         "(tgsuite.pipeline.sizes.TierSizes)")
    return preset.tier_sizes


def slug(tier: str) -> str:
    """``ask_first@v1`` -> ``ask_first_v1`` (for stage names, directories and runner arm names)."""
    return tier.replace("@", "_")


# ----------------------------------------------------------------------------------------------------------------
# The unseen-tier task set
# ----------------------------------------------------------------------------------------------------------------


def unseen_source(paths: Paths) -> Path:
    """Where the unseen-template repositories are: the generalization tier of a stratified held-out design
    (``tgsuite.pipeline.heldout``) when the run has one, else the held-out set (the unstratified generator puts
    every second repository in that tier)."""
    gen = paths.generalization_tasks
    return gen if (gen / "tasks.jsonl").is_file() else paths.heldout_tasks


def write_unseen_tasks(heldout: Path, out: Path, tiers: tuple[str, ...]) -> UnseenTasksOutputs:
    """Copy the held-out instances with ``template_tier == "unseen_templates"`` (records and snapshots) to ``out``,
    with ``tiers`` added to their ``behaviour`` checkers; returns the stage outputs (path, sha256, name, instance ids)."""
    from harness.tasks import TASKS_FILE, load_task_set, snapshot_path

    ts = load_task_set(heldout)
    chosen = [i for i in ts.instances if i.template_tier == UNSEEN]
    if not chosen:
        raise ValueError(f"{heldout}: no held-out instance has template_tier {UNSEEN!r} (the generator puts every "
                         "second held-out repository there); generate at least 2 held-out repositories")
    if out.exists():
        shutil.rmtree(out)
    (out / "snapshots").mkdir(parents=True)
    lines = [i.model_copy(update={"behaviour": list(dict.fromkeys([*i.behaviour, *tiers]))}).model_dump_json()
             for i in chosen]
    (out / TASKS_FILE).write_text("\n".join(lines) + "\n")
    for inst in chosen:
        src = snapshot_path(Path(ts.path), inst.instance_id)
        assert src is not None  # load_task_set required every snapshot
        dest = out / "snapshots" / src.name
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True)
        else:
            shutil.copy2(src, dest)
    sub = load_task_set(out)
    return UnseenTasksOutputs.model_validate({"paths": {"tasks": str(out / TASKS_FILE)}, "sha256": sub.sha256,
                                              "name": sub.name, "instance_ids": [i.instance_id for i in sub.instances],
                                              "repos": sorted({i.repo for i in chosen})})


# ----------------------------------------------------------------------------------------------------------------
# Stages
# ----------------------------------------------------------------------------------------------------------------


def _train_tasks_sha(ctx: StudyContext) -> str:
    from harness.tasks import load_task_set

    return load_task_set(ctx.paths.train_tasks).sha256


def _sft(runner: StageRunner, ctx: StudyContext, sizes: TierSizes, root: Path) -> SftOutputs:
    # the base sees reminders of ALL three tiers, whichever tiers get RL runs: one base, comparable across tiers
    preset = ctx.preset.with_sft(hint_checkers=list(TIERS), hint_share=sizes.sft_hint_share)
    sft = preset.sft
    paths = ctx.paths.model_copy(update={"sft": root / "sft"})
    inputs = {"tasks": _train_tasks_sha(ctx), "sft": sft, "seed": ctx.preset.task_seed}
    return runner.run("tiers_sft", inputs, lambda: ctx.stages.sft(paths, preset), SftOutputs)


def _train(runner: StageRunner, ctx: StudyContext, sizes: TierSizes, root: Path,
           sft: SftOutputs) -> tuple[dict[str, StudyModel], dict[str, str]]:
    """Every (tier, arm, seed) RL run from the tier base; returns the models and each one's trained tier."""
    models: dict[str, StudyModel] = {}
    trained: dict[str, str] = {}
    paths = ctx.paths.model_copy(update={"sft": root / "sft", "sft_model": root / "sft" / "model"})  # RL starts there
    for tier in sizes.tiers:
        preset = ctx.preset.with_rl({"reward.checker": tier})
        for arm in sizes.arms:
            for seed in sizes.seeds:
                run_dir = root / f"{arm}_{slug(tier)}" / f"s{seed}"
                inputs = {"sft": sft.paths.model, "sft_inputs": canonical_hash(sft.report),
                          "rl": preset.rl, "arm": arm, "seed": seed, "protocol": ctx.protocol_sha256}
                rec = runner.run(f"tiers_train_{arm}_{slug(tier)}_s{seed}", inputs,
                                 lambda a=arm, s=seed, d=run_dir, p=preset: ctx.stages.train(d, paths, p, a, s,
                                                                                             ctx.protocol_sha256),
                                 TrainOutputs)
                m = StudyModel(f"{arm}_{slug(tier)}_s{seed}", arm, seed, rec.paths.checkpoint)
                models[m.runner_arm] = m
                trained[m.runner_arm] = tier
    return models, trained


def eval_models(runner: StageRunner, ctx: StudyContext, tasks: UnseenTasksOutputs,
                models: dict[str, StudyModel]) -> Path:
    arms = {m.runner_arm: m.path for m in models.values()}
    inputs = {"models": {k: model_key(v) for k, v in sorted(arms.items())}, "tasks": tasks.sha256,
              "protocol": ctx.protocol_sha256, "eval": ctx.preset.eval.stage_inputs()}
    run_dir = ctx.paths.eval / "studies" / f"tiers_eval-{canonical_hash(inputs)[:12]}"
    task_dir = Path(tasks.paths.tasks).parent
    runner.run("tiers_eval", inputs, lambda: ctx.stages.evaluate(run_dir, task_dir, arms, ctx.preset,
                                                                 ctx.protocol_sha256, ctx.excluded, None),
               EvalOutputs)
    return run_dir


# ----------------------------------------------------------------------------------------------------------------
# The study (the analysis tables: evalsuite.study_tables.tier_frame / tiers_result)
# ----------------------------------------------------------------------------------------------------------------


def run_behaviour_tiers(runner: StageRunner, ctx: StudyContext, sizes: TierSizes | None = None
                        ) -> BehaviourTiersResult:
    """Train, evaluate and analyse the behaviour-tier study (module docstring); every step is a resumable stage.
    Also writes ``<out>/studies/behaviour_tiers.json`` (models, run directory, task set)."""
    sizes = sizes or tier_sizes(ctx.preset)
    unknown = [t for t in sizes.tiers if t not in TIERS]
    if unknown:
        raise ValueError(f"TierSizes.tiers: {unknown} are not tiers of this study; use a subset of {list(TIERS)}")
    root = ctx.paths.train / "studies" / "tiers"
    sft = _sft(runner, ctx, sizes, root)
    rl_models, rl_tiers = _train(runner, ctx, sizes, root, sft)
    models = {"base": StudyModel("base", "base", -1, sft.paths.model), **rl_models}
    trained: dict[str, str | None] = {"base": None, **rl_tiers}
    task_dir = ctx.paths.heldout_tasks.parent / "heldout_unseen_tiers"
    source = unseen_source(ctx.paths)
    tasks = runner.run("tiers_tasks", {"heldout": ctx.heldout_sha256, "tiers": list(TIERS), "code": "tiers_tasks@1",
                                       **({} if source == ctx.paths.heldout_tasks else {"source": source.name})},
                       lambda: write_unseen_tasks(source, task_dir, TIERS), UnseenTasksOutputs)
    run_dir = eval_models(runner, ctx, tasks, models)
    frame = tier_frame(run_dir, study_arms(models), trained, TIERS)
    res = tiers_result(frame, tiers=sizes.tiers, arms=sizes.arms, levels=LEVELS, unseen=UNSEEN,
                       task_set=tasks.name, n_instances=len(tasks.instance_ids))
    atomic_write_json(ctx.paths.eval.parent / "studies" / "behaviour_tiers.json",
                      {"sizes": sizes.model_dump(mode="json"), "models": {k: vars(m) for k, m in sorted(models.items())},
                       "run_dir": str(run_dir), "tasks": tasks, "result": res.model_dump(mode="json")})
    return res
