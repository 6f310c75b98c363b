"""How big the exploratory studies of a preset are: ``StudySizes`` (``tgsuite.pipeline.studies``) and ``TierSizes``
(the behaviour-tier study, ``tgsuite.pipeline.tiers``). A preset carries its own (``Preset.study_sizes``,
``Preset.tier_sizes``); nothing looks them up by the preset's name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# the behaviour tiers: format, style, tension (tgsuite.pipeline.tiers)
TIERS: tuple[str, ...] = ("tool_args@v1", "markdown@v1", "ask_first@v1")

NOISY_MIXES: dict[str, dict[str, float]] = {
    "half_irrelevant": {"correct": 0.5, "irrelevant": 0.5},
    "quarter_wrong": {"correct": 0.75, "wrong": 0.25},
}


class StudySizes(BaseModel):
    """How big each study is for one preset (``Preset.study_sizes``)."""

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
        from evalsuite.study_tables import HINT_QUALITY, mix_score

        for name, mix in v.items():
            if set(mix) - set(HINT_QUALITY) or abs(sum(mix.values()) - 1.0) > 1e-6 or min(mix.values()) < 0:
                raise ValueError(f"noisy_mixes[{name!r}] = {mix}: use kinds correct/irrelevant/wrong with "
                                 "probabilities >= 0 summing to 1, e.g. {'correct': 0.75, 'wrong': 0.25}")
            if mix_score(mix) <= 0:
                raise ValueError(f"noisy_mixes[{name!r}] is all correct: that is the main tg arm; drop it")
        return v


class TierSizes(BaseModel):
    """How big the behaviour-tier study is for one preset (``Preset.tier_sizes``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seeds: tuple[int, ...]
    arms: tuple[str, ...] = ("grpo", "tg")
    tiers: tuple[str, ...] = TIERS
    sft_hint_share: float = 0.6  # hinted share of the tier base's expert episodes (the main base: 0.3, Markdown)
