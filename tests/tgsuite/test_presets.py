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
