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


def test_packed_recompute_runs_in_another_thread() -> None:
    """On a GPU the autograd engine runs CUDA nodes' backward, and so the checkpointed layers' recompute, on its own
    device thread, not the thread that entered ``packed_attention``. The packed documents must travel with the call
    (not in thread-local state): here the backward runs in another thread, as it would on CUDA, and gives the same
    gradients as in the calling thread."""
    import threading

    from repro.packing import pack, packed_attention, packed_nll

    model = F.setup(seed=0).model.train()
    activation_checkpointing(model, True)
    gen = torch.Generator().manual_seed(0)
    batch = pack([(torch.randint(3, 50, (n,), generator=gen).tolist(), [1] * n) for n in (5, 9, 4)])

    def grads(in_thread: bool) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        errors: list[BaseException] = []

        def backward() -> None:
            try:
                nll.backward()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
                errors.append(exc)

        with packed_attention(model):  # forward and backward inside, as optimizer_step runs them
            nll, _ = packed_nll(model, batch)
            if in_thread:
                t = threading.Thread(target=backward)
                t.start()
                t.join()
            else:
                backward()
        if errors:
            raise errors[0]
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    same, other = grads(False), grads(True)
    assert len(same) == len(other) > 0
    for a, b in zip(same, other, strict=True):
        torch.testing.assert_close(a, b)
