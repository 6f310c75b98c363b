"""Checkpoints of an FSDP run: ``torch.distributed.checkpoint`` (DCP) shards beside the usual HF layout.

``checkpoints/step_<n>/`` of a multi-rank run holds everything a single-process checkpoint holds for readers
(``model.safetensors`` in the HF layout, written by rank 0 from the all-gathered weights, so evaluation and
``model.init`` read it as before; the tokenizer; ``checkpoint.json``) plus ``dcp/``: the sharded model, the
``ema`` / ``fixed`` teacher copy and the AdamW state, saved by every rank with ``dcp.save`` from
``get_state_dict(root, optimizer)``. ``trainer_state.pt`` (rank 0) keeps the LR scheduler, step, task-stream cursor
and counters, and per rank the torch / Python RNG states (``rng_ranks``) and compute ledgers (``compute_ranks``);
``compute`` is their sum (tokens, FLOPs; wall time: the slowest rank). It has no ``optimizer`` entry: the optimizer is
in ``dcp/``.

Resume (``--resume`` under torchrun with the same world size): the weights, teacher and optimizer are loaded from
``dcp/`` with ``dcp.load`` + ``set_state_dict``, each rank restores its own RNG state and ledger; the rest is as for
single-process runs (tests/repro/test_train_fsdp.py: 2 steps + resume + 1 equals 3 straight steps). A single-process
checkpoint cannot be resumed under FSDP, nor the reverse (a clear error says so).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from repro import checkpoint as ck
from repro.compute import merge_ledgers
from repro.config import ConfigError

if TYPE_CHECKING:
    from repro.runtime import Runtime

DCP_DIR = "dcp"


class GatheredModel(nn.Module):
    """Rank 0's stand-in for the unsharded model when there is no sampling copy (``rollout.engine = "vllm_http"``):
    ``save_pretrained`` writes ``lm``'s config with the gathered ``state`` (``repro.distributed.gather_full_state``)."""

    def __init__(self, lm: nn.Module, state: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.held = (lm,)  # a tuple: not registered as a submodule (nothing here owns its parameters)
        self.state = state

    def save_pretrained(self, directory: Path, *, safe_serialization: bool = True) -> None:
        self.held[0].save_pretrained(directory, state_dict=self.state, safe_serialization=safe_serialization)


def save(ctx: Runtime, out: Path, step: int, *, root: nn.Module, opt: torch.optim.Optimizer,
         full_model: nn.Module, tokenizer: ck.Tokenizer, state: dict[str, Any], ledger: dict[str, Any],
         config_sha256: str, arm: str, seed: int, keep: int) -> ck.CheckpointInfo:
    """Write ``checkpoints/step_<step>/`` (module docstring) from every rank; ``full_model`` holds the unsharded
    current weights (rank 0 saves it in the HF layout): the sampling copy, or a :class:`GatheredModel`
    (``repro.distributed.DistContext.save_checkpoint`` chooses). Returns the checkpoint's info on every rank."""
    staging = Path(out) / "checkpoints" / f".dcp_step_{step}"
    if ctx.main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
    ctx.barrier()
    model_sd, optim_sd = get_state_dict(root, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(staging))
    rngs = ctx.gather(ck.rng_state({}))
    ledgers = ctx.gather(ledger)
    if ctx.main:
        merged = merge_ledgers(ledgers)
        trainer_state = {**state, "rng": rngs[0], "rng_ranks": rngs, "compute": merged, "compute_ranks": ledgers,
                         "world": ctx.world}
        ck.save_checkpoint(out, step, model=full_model, tokenizer=tokenizer, trainer_state=trainer_state,
                           config_sha256=config_sha256, arm=arm, seed=seed, compute=merged, keep=keep,
                           write_extra=lambda tmp: shutil.move(str(staging), str(tmp / DCP_DIR)))
    ctx.barrier()
    return ck.read_info(Path(out) / "checkpoints" / f"step_{step}")


def load(ctx: Runtime, ckpt: Path, *, root: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Load ``ckpt/dcp`` into the sharded ``root`` and ``opt``; return the trainer state with this rank's RNG state
    in ``rng`` and its ledger in ``compute``."""
    path = Path(ckpt) / DCP_DIR
    if not path.is_dir():
        raise ConfigError(f"--resume: {ckpt} has no {DCP_DIR}/ folder: it was written by a single-process run; "
                          "resume it without torchrun and with cluster.fsdp = false")
    state = ck.load_trainer_state(ckpt)
    if state.get("world") != ctx.world:
        raise ConfigError(f"--resume: {ckpt} was written by {state.get('world')} ranks but this run has {ctx.world}; "
                          f"launch with torchrun --nproc-per-node {state.get('world')}")
    model_sd, optim_sd = get_state_dict(root, opt)
    sd = {"model": model_sd, "optim": optim_sd}
    dcp.load(sd, checkpoint_id=str(path))
    set_state_dict(root, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    return {**state, "rng": state["rng_ranks"][ctx.rank], "compute": state["compute_ranks"][ctx.rank]}
