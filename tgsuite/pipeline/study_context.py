"""What every exploratory study of ``tgsuite reproduce`` is handed: the context of the main run, the study sizes,
the stage functions to call, and the shared evaluation step.

The studies (``tgsuite.pipeline.studies``, ``tiers``, ``probes``) import this module and
``tgsuite.pipeline.stage_runner``; they never import the orchestrator (``tgsuite.pipeline.reproduce``), and the stage
functions they run reach them through ``StudyContext.stages`` (``StudyStages``), so a test hands fakes in the same
way the orchestrator hands the real ``tgsuite.pipeline.stages`` functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.study_tables import ArmEpisodes, whole_run
from tgsuite.pipeline import stages
from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.records import EvalOutputs, Paths, SftOutputs, SftReport, TrainOutputs
from tgsuite.pipeline.sizes import StudySizes
from tgsuite.pipeline.stage_runner import StageRunner, atomic_write_json, canonical_hash

SftStage = Callable[[Paths, Preset], SftOutputs]
TrainStage = Callable[..., TrainOutputs]  # (run_dir, paths, preset, arm, seed, protocol_hash) -> outputs
EvalStage = Callable[..., EvalOutputs]  # (run_dir, heldout, arms, preset, protocol_hash, excluded, feedback)


@dataclass(frozen=True)
class StudyStages:
    """The stage functions a study runs (defaults: ``tgsuite.pipeline.stages``, looked up when the record is made)."""

    sft: SftStage
    train: TrainStage
    evaluate: EvalStage
    loop: TrainStage  # the production recipe's distill -> RL -> distill (stages.stage_loop), same signature as train


def default_stages() -> StudyStages:
    """The real stages of ``tgsuite.pipeline.stages``."""
    return StudyStages(sft=stages.stage_sft, train=stages.stage_train, evaluate=stages.stage_eval, loop=stages.stage_loop)


@dataclass(frozen=True)
class StudyContext:
    """What ``tgsuite.pipeline.reproduce.reproduce`` has computed by the end of its main eval stage."""

    preset: Preset
    paths: Paths  # tgsuite.pipeline.stages.pipeline_paths(out), sft_model set by the SFT stage
    protocol_sha256: str  # the protocol stage's sha256
    heldout_sha256: str  # the held-out task set's sha256
    sft_report: SftReport  # the SFT stage's report
    ckpts: dict[str, str]  # "base" and "<arm>@s<seed>" -> checkpoint directory
    excluded: dict[str, list[str]]  # tgsuite.pipeline.stages.excluded_tests(heldout)
    # checkpoint directory -> its unhinted episodes in the main evaluation (the same task set, plan and evaluation
    # settings as a study's plain evaluation), which the studies read instead of evaluating the model again
    main_episodes: Mapping[str, ArmEpisodes] = field(default_factory=dict)
    sizes: StudySizes | None = None  # default: the preset's (Preset.study_sizes)
    stages: StudyStages = field(default_factory=default_stages)

    def study_sizes(self) -> StudySizes:
        sizes = self.sizes if self.sizes is not None else self.preset.study_sizes
        if sizes is None:
            raise ValueError(f"no study sizes for preset {self.preset.name!r}; give the Preset study_sizes "
                             "(tgsuite.pipeline.sizes.StudySizes)")
        return sizes


@dataclass(frozen=True)
class StudyModel:
    """One evaluated model of the studies: runner arm name, study label, training seed (-1: base), directory."""

    runner_arm: str
    label: str
    seed: int
    path: str


def study_arms(models: dict[str, StudyModel]) -> dict[str, tuple[str, int]]:
    """The models as ``evalsuite.study_tables.StudyArms``: runner arm -> (study label, training seed)."""
    return {k: (m.label, m.seed) for k, m in models.items()}


def model_key(path: str) -> str:
    """The checkpoint's weights hash when it has a checkpoint.json (retrained → re-evaluated), else its path."""
    from repro.checkpoint import read_info

    try:
        return read_info(Path(path)).sha256
    except (FileNotFoundError, ValueError):
        return path


INDEX = "study_models.json"  # in a finished study eval's run directory: per-model key -> the model's arm there


def _settings(ctx: StudyContext, feedback: str | None) -> dict[str, object]:
    """What a study evaluation's episodes depend on besides the weights: task set, plan, evaluation settings, hint."""
    return {"tasks": ctx.heldout_sha256, "protocol": ctx.protocol_sha256, "eval": ctx.preset.eval.stage_inputs(),
            "feedback": feedback}


def evaluated(ctx: StudyContext, name: str, models: dict[str, StudyModel], keys: dict[str, str],
              feedback: str | None) -> dict[str, ArmEpisodes]:
    """The ``models`` whose episodes already exist: unhinted, the main evaluation's
    (``StudyContext.main_episodes``); else those of a finished earlier run of stage ``name`` whose ``INDEX`` holds
    the model's key (``keys``: runner arm -> hash of weights and ``_settings``), the first by directory name when
    several have them, so the choice never depends on the order of runs."""
    found: dict[str, ArmEpisodes] = {}
    if feedback is None:
        found = {k: ctx.main_episodes[m.path] for k, m in models.items() if m.path in ctx.main_episodes}
    index: dict[str, ArmEpisodes] = {}
    for path in sorted((ctx.paths.eval / "studies").glob(f"{name}-*/{INDEX}"), reverse=True):
        try:
            entries = json.loads(path.read_text())["models"].items()
        except (ValueError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}: not a study evaluation index (field 'models': {{model key: arm}}; {exc}); fix: "
                             "delete this file; the next run writes it again (evaluating its models again if needed)") from None
        index.update({key: ArmEpisodes(path.parent, arm) for key, arm in entries})
    found.update({k: index[key] for k, key in keys.items() if k not in found and key in index})
    return found


def eval_models(runner: StageRunner, ctx: StudyContext, name: str, models: dict[str, StudyModel],
                feedback: str | None) -> dict[str, ArmEpisodes]:
    """Evaluate on the held-out set (as stage ``name``) the ``models`` whose episodes do not exist yet
    (``evaluated``); returns where every model's episodes are (runner arm -> ``ArmEpisodes``).

    A new evaluation runs in ``<out>/eval/studies/<name>-<input hash>``: an interrupted eval resumes in place, while
    new inputs (a retrained checkpoint at the same path, another model set) start a fresh run instead of mixing in
    episodes of the old weights (the runner identifies a policy by its path only). When it finishes, its ``INDEX``
    records each model's key, so a later study that needs the same model under the same settings reads these
    episodes instead of evaluating it again."""
    settings = _settings(ctx, feedback)
    weights = {k: model_key(m.path) for k, m in models.items()}
    keys = {k: canonical_hash({**settings, "model": w}) for k, w in weights.items()}
    found = evaluated(ctx, name, models, keys, feedback)
    todo = {k: m for k, m in models.items() if k not in found}
    if not todo:
        return found
    arms = {m.runner_arm: m.path for m in todo.values()}
    inputs = {"models": {k: weights[k] for k in sorted(todo)}, **settings}
    run_dir = ctx.paths.eval / "studies" / f"{name}-{canonical_hash(inputs)[:12]}"
    runner.run(name, inputs, lambda: ctx.stages.evaluate(run_dir, ctx.paths.heldout_tasks, arms, ctx.preset,
                                                         ctx.protocol_sha256, ctx.excluded, feedback), EvalOutputs)
    atomic_write_json(run_dir / INDEX, {"models": {keys[k]: m.runner_arm for k, m in sorted(todo.items())}})
    return {**found, **whole_run(run_dir, todo)}
