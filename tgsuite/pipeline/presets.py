"""Presets of ``tgsuite reproduce``: the sizes of every stage, as one frozen, hashable object.

``smoke`` exercises every stage end to end in a few minutes (the test suite runs it); it is not powered to decide
anything and its plan says so. ``mini`` is the reproduction: arms ``grpo`` and ``tg`` with 3 training seeds each,
8 held-out repositories × 5 tasks, evaluated in Docker, analysed under the preregistered ``mini`` plan.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Preset(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    plan: str = Field(description="protocol plan file name under protocols/plans/")
    task_seed: int = 0
    train_repos: int
    train_tasks_per_repo: int
    heldout_repos: int
    heldout_tasks_per_repo: int
    validate_runs: int = Field(3, ge=1, description="gold x k and empty x k runs per held-out instance")
    sft: dict[str, Any] = Field(default_factory=dict, description="repro.sft.SFTConfig overrides")
    arms: tuple[str, ...] = ("grpo", "tg")
    seeds: tuple[int, ...] = (0, 1, 2)
    rl: dict[str, Any] = Field(default_factory=dict, description="dotted TrainConfig overrides for every arm")
    eval_sandbox: Literal["docker", "local"] = "docker"
    eval_episodes: int = Field(1, ge=1, description="episodes per (checkpoint, task)")
    eval_max_turns: int = 8
    eval_max_new_tokens: int = 192
    eval_temperature: float = 1.0
    workers: int = 2
    eval_concurrency: int = Field(8, ge=1, description="episodes evaluated at once; their turns are sampled as one "
                                  "batch (repro.batching)")


SMOKE = Preset(
    name="smoke",
    plan="smoke.toml",
    train_repos=4,
    train_tasks_per_repo=6,
    heldout_repos=4,
    heldout_tasks_per_repo=3,
    validate_runs=3,
    sft={"preset": "nano", "vocab_size": 1024, "episodes": 16, "epochs": 1, "think": False, "max_len": 4096,
         "batch_tokens": 4096},
    seeds=(0, 1),
    rl={"run.steps": 2, "rollout.groups": 1, "rollout.group_size": 2, "rollout.max_turns": 3,
        "rollout.max_new_tokens": 48, "rollout.max_context_tokens": 4096, "optim.lr": 1e-4, "run.progress": False},
    eval_max_turns=3,
    eval_max_new_tokens=48,
)

MINI = Preset(
    name="mini",
    plan="mini.toml",
    train_repos=40,
    train_tasks_per_repo=10,
    heldout_repos=8,
    heldout_tasks_per_repo=5,
    validate_runs=2,
    # 128 expert episodes (~2.3k tokens each, ~12 % of them assistant tokens); the auxiliary next-token loss on the
    # observations (context_weight) is the only "pretraining" this from-scratch model gets
    sft={"preset": "mini", "vocab_size": 4096, "episodes": 128, "epochs": 3, "think": False, "context_weight": 1.0,
         "lr": 2e-3, "batch_tokens": 512, "warmup_steps": 10},
    seeds=(0, 1, 2),
    # sized to the 45-minute budget on 2 CPU cores: ~20 s per step (1 group of 4 rollouts, prefix-cached sampling)
    rl={"run.steps": 6, "rollout.groups": 1, "rollout.group_size": 4, "rollout.max_turns": 8,
        "rollout.max_new_tokens": 128, "rollout.max_context_tokens": 4096, "rollout.observation_max_tokens": 1024,
        "optim.lr": 1e-4, "run.progress": False},
    eval_max_turns=8,
    eval_max_new_tokens=128,
)


PRESETS: dict[str, Preset] = {p.name: p for p in (SMOKE, MINI)}
