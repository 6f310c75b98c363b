"""``model.activation_checkpointing`` (issue 40): per-decoder-layer recompute in the backward. The same RL steps
with and without it give the same losses and gradient norms (recompute is exact in fp32 on the CPU), and the model
really checkpoints (its layers run again in the backward)."""

from __future__ import annotations

from pathlib import Path

import _rl_fixtures as F
import pytest
import torch

from repro.config import ConfigError
from repro.distributed import activation_checkpointing
from repro.train import train_rl


def test_rl_steps_with_activation_checkpointing_equal_those_without(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    runs = {}
    for value in ("false", "true"):
        train_rl(F.config("tg", f"model.activation_checkpointing={value}"), tmp_path / value, setup=F.setup(seed=0))
        runs[value] = F.metrics(tmp_path / value)
    assert all(r["loss/kl"] is not None and r["loss/kl"] > 0 for r in runs["false"])  # the KL term is live
    for a, b in zip(runs["false"], runs["true"], strict=True):
        for key in ("loss/total", "loss/kl", "grad/norm", "reward/total"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key


def test_checkpointed_layers_run_again_in_the_backward() -> None:
    model = F.setup(seed=0).model.train()
    calls = []
    # a pre-hook: non-reentrant recompute stops as soon as the saved tensors are rebuilt, before post-hooks run
    model.model.layers[0].mlp.register_forward_pre_hook(lambda *a: calls.append(torch.is_grad_enabled()))
    ids = torch.randint(0, 50, (1, 8))
    model(input_ids=ids).logits.sum().backward()
    assert len(calls) == 1
    calls.clear()
    activation_checkpointing(model, True)
    model(input_ids=ids).logits.sum().backward()
    assert len(calls) == 2  # the forward, then the recompute inside the backward
    with pytest.raises(ConfigError, match="activation_checkpointing"):
        activation_checkpointing(torch.nn.Linear(2, 2), True)
