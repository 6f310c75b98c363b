"""``tgsuite.pipeline.stages.stage_loop`` for real: a nano model as the "SFT model", the mini world's train tasks in a
LocalSandbox, and the production loop (distill -> RL -> distill) through ``repro.distill.train_loop``."""

from __future__ import annotations

import json
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from safetensors.torch import load_file

from harness.minirepos import make_mini
from tgsuite.pipeline import stages
from tgsuite.pipeline.presets import SMOKE


@pytest.mark.slow
def test_stage_loop_distills_trains_and_redistills(tmp_path: Path) -> None:
    paths = stages.pipeline_paths(tmp_path / "out")
    make_mini(paths.train_tasks, split="train", repos=1, tasks_per_repo=2, seed=0)
    setup = F.setup()
    sft = paths.sft / "model"
    setup.model.save_pretrained(sft)
    setup.tokenizer.save_pretrained(sft)
    preset = SMOKE.with_rl({"run.steps": 1, "rollout.max_turns": 2, "rollout.max_new_tokens": 8,
                            "rollout.max_context_tokens": 2048})
    loop = {"distill.pool_tasks": 1, "distill.pool_rollouts": 2, "distill.steps": 1, "distill.batch": 2,
            "distill.min_reward": -10.0}
    run_dir = paths.train / "studies" / "loop" / "s0"
    out = stages.stage_loop(run_dir, paths, preset, "tg", 0, "p" * 64, loop=loop)
    ckpt = Path(out.paths.checkpoint)
    assert ckpt.parent.parent == run_dir / "final_distill"
    assert json.loads((run_dir / "loop.json").read_text())["final"] == str(ckpt)
    assert (run_dir / "round_0" / "distill").is_dir() and (run_dir / "round_0" / "rl" / "metrics.jsonl").is_file()
    rl_cfg = (run_dir / "round_0" / "rl" / "config.toml").read_text()
    assert 'arm = "tg"' in rl_cfg and "steps = 1" in rl_cfg  # the preset's RL settings, the loop's arm
    start, end = load_file(str(sft / "model.safetensors")), load_file(str(ckpt / "model.safetensors"))
    assert any(not torch.equal(start[k], end[k]) for k in start)  # it trained
