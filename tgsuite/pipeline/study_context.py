"""What every exploratory study of ``tgsuite reproduce`` is handed: the context of the main run, the study sizes,
the stage functions to call, and the shared evaluation step.

The studies (``tgsuite.pipeline.studies``, ``tiers``, ``probes``) import this module and
``tgsuite.pipeline.stages``; they never import the orchestrator (``tgsuite.pipeline.reproduce``), and the stage
functions they run reach them through ``StudyContext.stages`` (``StudyStages``), so a test hands fakes in the same
way the orchestrator hands the real ``tgsuite.pipeline.steps`` functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalsuite.study_tables import HINT_QUALITY, mix_score
from tgsuite.pipeline import steps
from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.stages import StageRunner, canonical_hash

SftStage = Callable[[dict[str, Path], Preset], dict[str, Any]]
TrainStage = Callable[..., dict[str, Any]]  # (run_dir, paths, preset, arm, seed, protocol_hash) -> outputs
EvalStage = Callable[..., dict[str, Any]]  # (run_dir, heldout, arms, preset, protocol_hash, excluded, feedback)


@dataclass(frozen=True)
class StudyStages:
    """The stage functions a study runs (defaults: ``tgsuite.pipeline.steps``, looked up when the record is made)."""

    sft: SftStage
    train: TrainStage
    evaluate: EvalStage
    loop: TrainStage  # the production recipe's distill -> RL -> distill (steps.stage_loop), same signature as train


def default_stages() -> StudyStages:
    """The real stages of ``tgsuite.pipeline.steps``."""
    return StudyStages(sft=steps.stage_sft, train=steps.stage_train, evaluate=steps.stage_eval, loop=steps.stage_loop)


class StudySizes(BaseModel):
    """How big each study is for one preset (``STUDY_SIZES``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seeds: tuple[int, ...] = Field(description="training seeds of every study run; each must be a main-arm seed")
    noisy_mixes: dict[str, dict[str, float]] = Field(description="name -> training hint mix (kind -> probability)")
    can_do_labels: tuple[str, ...] = Field(default=("base", "grpo", "tg"),
                                           description="'base' and/or main arms (can-do and hint-probe models)")
    corrective: str = Field(default="correct@before_finish", description="harness.feedback_spec.parse_feedback spec")
    ablations: tuple[str, ...] = Field(description="arm presets of repro/configs/arms.toml")
    tuning_trials: int = Field(default=1, ge=1, description="hyperparameter trials per arm (none are tuned here)")
    loop_arm: str = Field(default="tg", description="the RL arm inside the production loop; a main arm, whose main "
                          "runs are the 'RL alone' it is compared with")
    loop: dict[str, Any] = Field(default_factory=dict, description="dotted distill.* overrides of the production "
                                 "loop (repro.config.DistillCfg), on top of the preset's RL settings")

    @field_validator("loop")
    @classmethod
    def _loop(cls, v: dict[str, Any]) -> dict[str, Any]:
        from repro.config import load_config

        bad = sorted(k for k in v if not k.startswith("distill."))
        if bad:
            raise ValueError(f"loop: {bad} are not distill.* keys; the loop's RL uses the preset's rl settings")
        load_config(arm="tg", overrides=v)  # unknown keys / bad values raise a ConfigError naming them
        return v

    @field_validator("noisy_mixes")
    @classmethod
    def _mixes(cls, v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for name, mix in v.items():
            if set(mix) - set(HINT_QUALITY) or abs(sum(mix.values()) - 1.0) > 1e-6 or min(mix.values()) < 0:
                raise ValueError(f"noisy_mixes[{name!r}] = {mix}: use kinds correct/irrelevant/wrong with "
                                 "probabilities >= 0 summing to 1, e.g. {'correct': 0.75, 'wrong': 0.25}")
            if mix_score(mix) <= 0:
                raise ValueError(f"noisy_mixes[{name!r}] is all correct: that is the main tg arm; drop it")
        return v


NOISY_MIXES: dict[str, dict[str, float]] = {
    "half_irrelevant": {"correct": 0.5, "irrelevant": 0.5},
    "quarter_wrong": {"correct": 0.75, "wrong": 0.25},
}
STUDY_SIZES: dict[str, StudySizes] = {
    # smoke: every study path once, one seed, one ablation; decides nothing
    "smoke": StudySizes(seeds=(0,), noisy_mixes=NOISY_MIXES, can_do_labels=("base", "tg"),
                        ablations=("tg_no_fmt_reward",),
                        loop={"distill.pool_tasks": 2, "distill.pool_rollouts": 2, "distill.steps": 1,
                              "distill.batch": 2}),
    # mini: the real study, on all three training seeds
    "mini": StudySizes(seeds=(0, 1, 2), noisy_mixes=NOISY_MIXES, can_do_labels=("base", "grpo", "tg"),
                       ablations=("tg_all_turns", "tg_no_fmt_reward", "tg_no_think_kl", "tg_lambda_0.01",
                                  "tg_lambda_0.03", "tg_lambda_0.1", "tg_lambda_1.0", "tg_lambda_3.0"),
                       loop={"distill.pool_tasks": 8, "distill.pool_rollouts": 4, "distill.steps": 8,
                             "distill.batch": 4}),
}


@dataclass(frozen=True)
class StudyContext:
    """What ``tgsuite.pipeline.reproduce.reproduce`` has computed by the end of its main eval stage."""

    preset: Preset
    paths: dict[str, Path]  # tgsuite.pipeline.steps.pipeline_paths(out)
    protocol_sha256: str  # frozen["sha256"]
    heldout_sha256: str  # held_ts["sha256"]
    sft_report: dict[str, Any]  # sft["report"]
    ckpts: dict[str, str]  # "base" and "<arm>@s<seed>" -> checkpoint directory
    excluded: dict[str, list[str]]  # tgsuite.pipeline.steps.excluded_tests(heldout)
    sizes: StudySizes | None = None  # default STUDY_SIZES[preset.name]
    stages: StudyStages = field(default_factory=default_stages)

    def study_sizes(self) -> StudySizes:
        if self.sizes is not None:
            return self.sizes
        if self.preset.name not in STUDY_SIZES:
            raise ValueError(f"no study sizes for preset {self.preset.name!r}; add it to "
                             f"tgsuite.pipeline.study_context.STUDY_SIZES (known: {', '.join(STUDY_SIZES)})")
        return STUDY_SIZES[self.preset.name]


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
    run_dir = ctx.paths["eval"] / "studies" / f"{name}-{canonical_hash(inputs)[:12]}"
    runner.run(name, inputs, lambda: ctx.stages.evaluate(run_dir, ctx.paths["heldout_tasks"], arms, ctx.preset,
                                                 ctx.protocol_sha256, ctx.excluded, feedback))
    return run_dir
