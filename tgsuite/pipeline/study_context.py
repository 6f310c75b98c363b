"""What every exploratory study of ``tgsuite reproduce`` is handed: the context of the main run, the study sizes,
the stage functions to call, and the shared evaluation step.

The studies (``tgsuite.pipeline.studies``, ``tiers``, ``probes``) import this module and
``tgsuite.pipeline.stage_runner``; they never import the orchestrator (``tgsuite.pipeline.reproduce``), and the stage
functions they run reach them through ``StudyContext.stages`` (``StudyStages``), so a test hands fakes in the same
way the orchestrator hands the real ``tgsuite.pipeline.stages`` functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tgsuite.pipeline import stages
from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.records import EvalOutputs, Paths, SftOutputs, SftReport, TrainOutputs
from tgsuite.pipeline.sizes import StudySizes
from tgsuite.pipeline.stage_runner import StageRunner, canonical_hash

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


def eval_models(runner: StageRunner, ctx: StudyContext, name: str, models: dict[str, StudyModel],
          feedback: str | None) -> Path:
    """Evaluate ``models`` on the held-out set as stage ``name``; returns the run directory.

    The directory is ``<out>/eval/studies/<name>-<input hash>``: an interrupted eval resumes in place, while new
    inputs (a retrained checkpoint at the same path, another model set) start a fresh run instead of mixing in
    episodes of the old weights (the runner identifies a policy by its path only)."""
    arms = {m.runner_arm: m.path for m in models.values()}
    inputs = {"models": {k: model_key(v) for k, v in sorted(arms.items())}, "tasks": ctx.heldout_sha256,
              "protocol": ctx.protocol_sha256, "eval": ctx.preset.eval.stage_inputs(),
              "feedback": feedback}
    run_dir = ctx.paths.eval / "studies" / f"{name}-{canonical_hash(inputs)[:12]}"
    runner.run(name, inputs, lambda: ctx.stages.evaluate(run_dir, ctx.paths.heldout_tasks, arms, ctx.preset,
                                                         ctx.protocol_sha256, ctx.excluded, feedback), EvalOutputs)
    return run_dir
