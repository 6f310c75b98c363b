"""tgsuite.pipeline.presets: one typed Preset whose SFT, RL and evaluation settings are validated when it is made,
and whose RL overrides reach repro.config as values (no --set strings), giving the same TrainConfig."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from repro.config import load_config
from tgsuite.pipeline.presets import MINI, PRESETS, SMOKE, EvalSettings, Preset


def test_typos_fail_when_the_preset_is_made() -> None:
    base = SMOKE.model_dump()
    with pytest.raises(ValidationError, match="epochz"):
        Preset.model_validate({**base, "sft": {"epochz": 1}})
    with pytest.raises(ValidationError, match="rollout.group_sise"):
        Preset.model_validate({**base, "rl": {"rollout.group_sise": 2}})
    with pytest.raises(ValidationError, match="set by the pipeline"):
        Preset.model_validate({**base, "sft": {"workers": 3}})
    with pytest.raises(ValidationError, match="max_turns"):
        EvalSettings(max_turns=0)
    with pytest.raises(ValidationError, match="sandbox"):
        Preset.model_validate({**base, "eval": {"sandbox": "vm"}})
    with pytest.raises(ValidationError):
        SMOKE.with_rl({"optim.lr": "fast"})


def test_overrides_give_the_same_config_as_set_strings() -> None:
    for preset in PRESETS.values():
        extra = {"run.seed": 1, "model.init": "/tmp/x y/model", "tasks.path": "/tmp/tasks"}
        typed = load_config(arm="tg", overrides={**preset.rl, **extra})
        sets = [f"{k}={json.dumps(v)}" for k, v in {**preset.rl, **extra}.items()]
        assert typed.sha256() == load_config(arm="tg", sets=sets).sha256()


def test_eval_stage_inputs_keep_the_flat_keys() -> None:
    assert SMOKE.eval.stage_inputs() == {"eval_sandbox": "docker", "eval_episodes": 1, "eval_max_turns": 3,
                                         "eval_max_new_tokens": 48, "eval_temperature": 1.0, "eval_concurrency": 8}
    assert MINI.eval.stage_inputs()["eval_finish_notice_turns"] == 2
    assert "eval_format_retries" not in MINI.eval.model_copy(update={"format_retries": 0}).stage_inputs()  # only when on
    assert MINI.eval.stage_inputs()["eval_format_retries"] == 3
    tier = MINI.with_sft(hint_share=0.6)
    assert tier.sft["hint_share"] == 0.6 and MINI.sft.get("hint_share") is None and tier.eval == MINI.eval


def test_the_mini_plan_names_what_the_mini_preset_runs() -> None:
    """The preregistered plan's grader, checkers and decoding are what the preset really uses (plan v1 named
    grade@v1 and 10 turns x 160 tokens long after the preset had moved on)."""
    import tempfile
    from pathlib import Path

    from harness.grading import GRADER_VERSION
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set
    from protocols.load import bundled_plans, load_plan
    from repro.config import RewardCfg

    plan = load_plan(bundled_plans()[MINI.plan.removesuffix(".toml")])
    assert {e.grader_version for e in plan.endpoints if e.grader_version} == {GRADER_VERSION}
    ev = MINI.eval
    decoding = plan.design.decoding
    for said in (f"temperature {ev.temperature}", f"at most {ev.max_turns} turns", f"{ev.max_new_tokens} new tokens",
                 f"{ev.finish_notice_turns} turns before the limit", f"up to {ev.format_retries} times"):
        assert said in decoding, (said, decoding)
    assert MINI.rl.get("reward.checker", RewardCfg().checker) == "markdown@v3"
    behaviour = next(e for e in plan.endpoints if e.id == "behaviour_ok").definition
    with tempfile.TemporaryDirectory() as tmp:
        make_mini(Path(tmp), split="heldout", repos=1, tasks_per_repo=1, seed=0)
        (inst,) = load_task_set(Path(tmp)).instances
    assert all(c in behaviour for c in inst.behaviour), (inst.behaviour, behaviour)


def test_study_and_tier_sizes_live_on_the_preset() -> None:
    """Sizes are the preset's own (no lookup by name): a renamed copy keeps them, and they survive re-validation."""
    for preset in PRESETS.values():
        assert preset.study_sizes is not None and preset.tier_sizes is not None
        assert set(preset.study_sizes.seeds) <= set(preset.seeds) and set(preset.tier_sizes.seeds) <= set(preset.seeds)
        renamed = Preset.model_validate({**preset.model_dump(), "name": "renamed"})
        assert (renamed.study_sizes, renamed.tier_sizes) == (preset.study_sizes, preset.tier_sizes)
        assert preset.with_rl({"optim.lr": 1e-5}).study_sizes == preset.study_sizes
