"""Multi-rank RL training under torchrun + FSDP2: the launch check, the sharding, and what ranks exchange.

``torchrun --nproc-per-node N -m tgsuite train rl --config CFG`` with ``cluster.fsdp = true`` and
``cluster.trainer_gpus = N`` runs :func:`repro.train.train_rl` in N processes, each with a :class:`DistContext`
(:func:`init`): the :class:`repro.runtime.Runtime` of a rank, so the loop is the single-process loop. Per step:

1. Rollouts: the step's ``rollout.groups`` groups are split into ``rollout.sampling_streams`` contiguous chunks
   (0 = one per rank), each sampled by its own ``run_groups`` call (its generator is seeded from its first item, as
   any ``run_groups`` batch); rank r samples its chunks with an unsharded copy of the current weights (all-gathered
   from the shards once per optimizer step, :meth:`DistContext.full_state`), and the scored groups are exchanged
   with ``all_gather_object`` so every rank holds the whole batch in chunk order.
2. Every rank builds the same :class:`repro.trainer_step.BatchPlan` (global token counts ``n_pg`` / ``n_kl``), takes
   a contiguous, balanced share of the trajectories (:func:`micro_batches`; a rank with fewer micro-batches runs
   zero-weight copies so that every rank makes the same FSDP calls), and backpropagates ``loss · world`` (FSDP's
   reduce-scatter averages over ranks; the product makes the gradient the single-process sum).
3. Clip, AdamW on the local shards, EMA teacher update on the shards, metrics reduced over ranks (rank 0 writes).

Sharding (:meth:`DistContext.shard`): every decoder layer of the student and of an ``ema`` / ``fixed`` teacher copy
is ``fully_shard``-ed, then the :class:`repro.trainer_step.LossRoot` (embeddings, final norm, lm_head). The model is
still on the CPU when it is sharded: ``fully_shard`` moves one layer at a time to the rank's device and keeps only
its shard there, so no rank ever holds the full model on its GPU (the trainer used to move the whole fp32 model
first: ≈ 122 GB at 30.5 B parameters). The CPU copies are built and sharded one rank at a time
(:func:`wait_turn` / :func:`end_turn`), so a node's host memory holds one full model at a time, not one per rank.
Mixed precision (:func:`mp_policy`): ``fp32`` keeps fp32 all-gathers; ``bf16-mixed`` uses
``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``: fp32 sharded master weights and AdamW state,
bf16 all-gathers and compute (the unsharded bf16 weights are freed after each layer's forward; bf16 autocast over
fp32 shards instead kept a bf16 cast of every weight alive until backward), gradients reduced in fp32. The root's
inputs (behaviour log-probs, advantages) are not cast. The numerics differ from one process by bf16 rounding of the
norms, embeddings and the residual stream (tests/repro/test_train_fsdp.py measures it). The live teacher is the
student itself, so its forward uses the same shards.

Activation checkpointing (``model.activation_checkpointing``, :func:`activation_checkpointing`, also in one
process): transformers' per-decoder-layer checkpointing (non-reentrant), so the backward keeps each layer's input
and recomputes the layer — what ``tgsuite train rl --dry-run`` counts when the key is true.

External vLLM servers (``rollout.engine = "vllm_http"``): no sampling copy; after every optimizer step (and at the
start) the ranks all-gather the weights one tensor at a time, rank 0 pushes them to the servers
(:func:`push_sharded`) and every rank then samples its chunks over HTTP. Checkpoints gather the same way.

Not covered: the colocated vLLM engine and the async producer (``rollout.engine = "vllm"`` and ``async.enabled``
are refused with ``cluster.fsdp``), ``run.log_grad_split`` (its
per-term ``autograd.grad`` bypasses FSDP's hooks; refused), and gradient accumulation without a reduce-scatter per
micro-batch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import torch
import torch.distributed as dist
from torch import nn

from repro import checkpoint as ck
from repro import dcp_checkpoint
from repro.async_producer import clone_for_producer
from repro.config import ConfigError, TrainConfig
from repro.runtime import LocalRuntime, Runtime, train_device
from repro.trainer_step import TrajBatch

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from repro.runtime import EngineFactory
    from repro.trainer_step import LossRoot

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """How this process was started: ``world`` processes (1 = not under torchrun), this one being ``rank``."""

    world: int
    rank: int
    local_rank: int


def read_launch(env: Mapping[str, str]) -> Launch:
    """The torchrun variables (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``) of ``env``; a plain process is world 1."""
    try:
        return Launch(int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0")))
    except ValueError as exc:
        raise ConfigError(f"WORLD_SIZE / RANK / LOCAL_RANK are not integers ({exc}); launch with torchrun") from exc


def check_launch(cfg: TrainConfig, launch: Launch) -> list[str]:
    """Raise :class:`ConfigError` when the config's ``cluster`` keys and the launch disagree; return warnings."""
    c, warnings = cfg.cluster, []
    cmd = f"torchrun --nproc-per-node {c.trainer_gpus} -m tgsuite train rl ..."
    if not c.fsdp:
        if launch.world > 1:
            raise ConfigError(f"launched with WORLD_SIZE={launch.world} but cluster.fsdp = false; set cluster.fsdp = "
                              f"true and cluster.trainer_gpus = {launch.world} to train on {launch.world} ranks")
        if c.trainer_gpus > 1:
            raise ConfigError(f"cluster.trainer_gpus = {c.trainer_gpus} but cluster.fsdp = false: this would train in "
                              "one process; set cluster.fsdp = true and launch with "
                              f"`{cmd}`, or set cluster.trainer_gpus = 1")
    else:
        if launch.world != c.trainer_gpus:
            raise ConfigError(f"cluster.fsdp = true with cluster.trainer_gpus = {c.trainer_gpus}, but this process is "
                              f"one of {launch.world} (WORLD_SIZE); launch with `{cmd}` or set cluster.trainer_gpus = "
                              f"{launch.world}")
        if cfg.rollout.engine not in ("hf_sampler", "vllm_http"):
            raise ConfigError(f"cluster.fsdp = true with rollout.engine = {cfg.rollout.engine!r}: under FSDP the "
                              "hf_sampler engine samples in each rank from an all-gathered copy and vllm_http from "
                              "external servers that rank 0 pushes the gathered weights to; a colocated vLLM is not "
                              "implemented: set rollout.engine = 'vllm_http' or 'hf_sampler', or cluster.fsdp = false")
        if cfg.model.lora.enabled:
            raise ConfigError("cluster.fsdp = true with model.lora.enabled = true: LoRA under FSDP is not implemented "
                              "or tested; set one of them to false")
        if cfg.async_.enabled:
            raise ConfigError("cluster.fsdp = true with async.enabled = true: the async producer is not implemented "
                              "under FSDP; set async.enabled = false")
        if cfg.run.log_grad_split:
            raise ConfigError("cluster.fsdp = true with run.log_grad_split = true: the per-term gradient split is not "
                              "implemented under FSDP; set run.log_grad_split = false")
    streams = cfg.rollout.sampling_streams or launch.world
    if cfg.rollout.groups % streams or streams % launch.world:
        raise ConfigError(f"rollout.sampling_streams = {streams} must divide rollout.groups = {cfg.rollout.groups} "
                          f"and be a multiple of the world size {launch.world}; choose e.g. "
                          f"rollout.sampling_streams = {launch.world}")
    if cfg.rollout.engine == "hf_sampler" and c.inference_gpus > 0:
        warnings.append(f"cluster.inference_gpus = {c.inference_gpus} is not used by rollout.engine = 'hf_sampler': "
                        f"rollouts are sampled inside the {launch.world} trainer process(es)")
    return warnings


def split_streams(items: Sequence[int], streams: int) -> list[list[int]]:
    """``items`` cut into ``streams`` contiguous, equal chunks (one ``run_groups`` call each)."""
    n = len(items) // streams
    return [list(items[i * n:(i + 1) * n]) for i in range(streams)]


def balanced_slices(n: int, world: int) -> list[slice]:
    """Contiguous slices of ``range(n)``, one per rank, sizes differing by at most one."""
    base, extra = divmod(n, world)
    out, start = [], 0
    for r in range(world):
        size = base + (r < extra)
        out.append(slice(start, start + size))
        start += size
    return out


def _zero_weight(t: TrajBatch) -> TrajBatch:
    return replace(t, m_pg=[0.0] * len(t.m_pg), m_kl=[0.0] * len(t.m_kl), views=[])


def micro_batches(trajs: Sequence[TrajBatch], size: int, rank: int,
                  world: int) -> tuple[list[list[TrajBatch]], int]:
    """This rank's micro-batches and how many of them (at the end) are fillers: its balanced share of ``trajs`` in
    chunks of ``size``, padded with zero-weight copies of a trajectory (no PG or KL tokens: they add exactly nothing)
    to the largest rank's count, so every rank runs the same number of FSDP forward/backward passes. No
    trajectories: no micro-batches on any rank."""
    if not trajs:
        return [], 0
    slices = balanced_slices(len(trajs), world)
    count = max(-(-(s.stop - s.start) // size) for s in slices)
    mine = list(trajs[slices[rank]])
    out = [mine[i:i + size] for i in range(0, len(mine), size)]
    filler = _zero_weight(trajs[0])
    n_fill = count - len(out)
    return out + [[filler] for _ in range(n_fill)], n_fill


class DistContext:
    """This process's place in the process group (made by :func:`init`; ``close`` ends the group when ``init``
    started it, ``owned``; a caller that initialised the group itself keeps it). A :class:`repro.runtime.Runtime`:
    the RL loop runs the same code on one process (:class:`repro.runtime.LocalRuntime`) and on many."""

    def __init__(self, launch: Launch, device: torch.device, owned: bool) -> None:
        self.rank, self.world, self.device, self.owned = launch.rank, launch.world, device, owned
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh(device.type, (self.world,))

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        dist.barrier()

    def wait_turn(self) -> None:
        wait_turn(self)

    def end_turn(self) -> None:
        end_turn(self)

    def place(self, model: nn.Module) -> nn.Module:
        return model  # on the CPU until shard moves it to this rank's device one layer's shard at a time

    def sampling_copy(self, model: nn.Module, engine: str) -> nn.Module | None:
        """``hf_sampler``: an unsharded copy on this rank's device; ``vllm_http`` samples on servers: no copy."""
        return clone_for_producer(model).to(self.device) if engine == "hf_sampler" else None

    def shard(self, root: LossRoot, precision: str) -> None:
        """``fully_shard`` the student's and the teacher copy's decoder layers, then the loss root (module doc);
        parameters still on the CPU are moved to this rank's device one layer at a time, as shards."""
        from torch.distributed.fsdp import fully_shard

        for lm in (root.lm, root.teacher_lm):
            if lm is None:
                continue
            layers = getattr(getattr(lm, "model", None), "layers", None)
            if layers is None:
                raise ConfigError(f"cluster.fsdp: {type(lm).__name__} has no model.layers to shard; FSDP supports "
                                  "decoder-only transformers models (e.g. Qwen3ForCausalLM)")
            for layer in layers:
                fully_shard(layer, mesh=self.mesh, mp_policy=mp_policy(precision))
        fully_shard(root, mesh=self.mesh, mp_policy=mp_policy(precision, cast_inputs=False))
        root.collective_teacher = True

    def publish(self, model: nn.Module, copy: nn.Module | None, engine_factory: EngineFactory, version: int) -> None:
        """The sampling copy gets the new weights (all-gathered); without one (``vllm_http``) rank 0 pushes them to
        the servers (:func:`push_sharded`)."""
        if copy is not None:
            copy.load_state_dict(self.full_state(model))
        else:
            push_sharded(self, model, engine_factory, version)

    def backward(self, loss: torch.Tensor) -> None:
        (loss * self.world).backward()  # FSDP averages gradients over ranks; the batch loss is their sum

    def full_state(self, lm: nn.Module) -> dict[str, torch.Tensor]:
        """The unsharded state dict of ``lm`` on every rank (one all-gather per sharded tensor, same order on all)."""
        out = {}
        for name, value in lm.state_dict().items():
            out[name] = value.full_tensor() if hasattr(value, "full_tensor") else value
        return out

    def gather(self, obj: T) -> list[T]:
        """``obj`` of every rank, in rank order."""
        got: list[Any] = [None] * self.world
        dist.all_gather_object(got, obj)
        return got

    def sum(self, *values: float) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def save_checkpoint(self, out: Path, step: int, *, root: LossRoot, opt: torch.optim.Optimizer,
                        copy: nn.Module | None, tokenizer: ck.Tokenizer, state: dict[str, Any],
                        ledger: dict[str, Any], config_sha256: str, arm: str, seed: int,
                        keep: int) -> ck.CheckpointInfo:
        """Sharded model / teacher / optimizer in ``dcp/`` (``repro.dcp_checkpoint``), rank 0 the HF layout from
        the sampling ``copy`` or, without one, from weights the ranks gather one tensor at a time."""
        full = copy if copy is not None else dcp_checkpoint.GatheredModel(root.lm, gather_full_state(self, root.lm))
        return dcp_checkpoint.save(self, out, step, root=root, opt=opt, full_model=full, tokenizer=tokenizer,
                                   state=state, ledger=ledger, config_sha256=config_sha256, arm=arm, seed=seed,
                                   keep=keep)

    def load_checkpoint(self, ckpt: Path, *, root: LossRoot, opt: torch.optim.Optimizer) -> dict[str, Any]:
        return dcp_checkpoint.load(self, ckpt, root=root, opt=opt)

    def manifest_host(self) -> dict[str, int]:
        return {"ranks": self.world}

    def manifest_notes(self) -> list[str]:
        return [f"FSDP2 over {self.world} ranks (repro.distributed); optimizer and teacher shards in checkpoints' "
                "dcp/"]

    def close(self, *, failed: bool = False) -> None:
        """End the group if ``owned``; after a failure without the barrier (the other ranks may never reach it;
        torchrun stops them when this process exits)."""
        if not dist.is_initialized():
            return
        if not failed:
            # without the barrier one rank can tear gloo down while another still finishes a collective (measured
            # in tests/repro/test_train_fsdp.py: 3 of 13 runs aborted)
            dist.barrier()
        if self.owned:
            dist.destroy_process_group()


def gather_full_state(ctx: Runtime, lm: nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """``lm``'s unsharded parameters (tied ones once) as CPU tensors (in ``dtype`` when given) on rank 0, ``{}`` on
    the others. Every rank takes part in each all-gather, one tensor at a time, so no GPU ever holds more than one
    full tensor beyond its shards (unlike :meth:`DistContext.full_state`, which keeps them all)."""
    out: dict[str, torch.Tensor] = {}
    for name, value in lm.named_parameters():
        full = value.full_tensor() if hasattr(value, "full_tensor") else value
        if ctx.main:
            out[name] = full.detach().to("cpu", dtype or full.dtype).contiguous()
        del full
    return out


class PushTarget(Protocol):
    """An engine factory that takes weights pushed from outside (:class:`repro.vllm_http.HttpRollouts`)."""

    external: bool

    @property
    def push_dtype(self) -> torch.dtype: ...

    def push(self, tensors: dict[str, torch.Tensor], version: int) -> None: ...


def push_sharded(ctx: Runtime, lm: nn.Module, factory: EngineFactory, version: int) -> None:
    """``rollout.engine = "vllm_http"`` under FSDP: rank 0 pushes the gathered weights of ``version`` to the servers
    (``factory.push``, :class:`repro.vllm_http.HttpRollouts`); every rank waits until they hold them."""
    if not hasattr(factory, "push"):
        raise ConfigError(f"cluster.fsdp with rollout.engine = 'vllm_http' needs the RLSetup's engine_factory to be "
                          f"repro.vllm_http.HttpRollouts, got {type(factory).__name__}")
    target = cast(PushTarget, factory)
    target.external = True  # the per-batch engines never push from this rank's shards themselves
    state = gather_full_state(ctx, lm, target.push_dtype)
    if ctx.main:
        target.push(state, version)
    ctx.barrier()


def mp_policy(precision: str, *, cast_inputs: bool = True) -> MixedPrecisionPolicy:
    """FSDP2's ``MixedPrecisionPolicy`` for ``model.precision`` (module docstring): fp32 reduction always; bf16
    all-gathers and compute for ``bf16-mixed``. ``cast_inputs=False`` for the loss root, whose floating inputs are
    the behaviour log-probs and advantages."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = torch.bfloat16 if precision == "bf16-mixed" else None
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32, cast_forward_inputs=cast_inputs)


def activation_checkpointing(lm: nn.Module, enabled: bool) -> None:
    """``model.activation_checkpointing``: transformers' per-decoder-layer checkpointing, non-reentrant (it works
    under FSDP2's hooks and with frozen LoRA bases); active in train mode only, so rollouts and the no-grad teacher
    forward are unchanged."""
    if not enabled:
        return
    kwargs = {"use_reentrant": False}
    if hasattr(lm, "activation_checkpointing_enable"):  # transformers ≥ 5.2x; the older name is deprecated there
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(lm, "gradient_checkpointing_enable"):
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise ConfigError(f"model.activation_checkpointing = true: {type(lm).__name__} has no "
                          "gradient_checkpointing_enable (a transformers PreTrainedModel is needed); set it to false")


def wait_turn(ctx: Runtime | None) -> None:
    """With :func:`end_turn`, runs the code between them on rank 0, then rank 1, …: rank r waits at r barriers here
    and passes the remaining ``world − r`` in ``end_turn`` (every rank calls ``world`` barriers). ``train_rl`` builds
    and shards the model between them, so one node holds one full CPU copy at a time. No-op without a process group.
    Code that raises between them never reaches ``end_turn`` (torchrun stops the other ranks)."""
    if ctx is not None:
        for _ in range(ctx.rank):
            ctx.barrier()


def end_turn(ctx: Runtime | None) -> None:
    """See :func:`wait_turn`."""
    if ctx is not None:
        for _ in range(ctx.rank, ctx.world):
            ctx.barrier()


def exit_process(code: int) -> None:
    """End a torchrun worker whose work is done and whose process group is closed: flush Python's streams, then
    ``os._exit`` without running C++ static destructors. On gloo a torch thread can still be joinable when they run
    and abort the process ("terminate called without an active exception", SIGABRT) after a run that finished and
    saved everything — measured once in ~25 two-rank runs on a loaded machine — and torchrun then reports the job
    failed."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def init(cfg: TrainConfig, env: Mapping[str, str] | None = None) -> Runtime:
    """Check the launch against ``cluster.*`` (:func:`check_launch`); with ``cluster.fsdp`` join the process group
    (NCCL on CUDA, gloo on CPU) and return this rank's :class:`DistContext`, else a
    :class:`repro.runtime.LocalRuntime` on ``model.device``."""
    launch = read_launch(os.environ if env is None else env)
    for w in check_launch(cfg, launch):
        logger.warning("%s", w)
    device = train_device(cfg.model.device)
    if not cfg.cluster.fsdp:
        return LocalRuntime(device)
    if device.type == "cuda":
        torch.cuda.set_device(launch.local_rank)
        device = torch.device("cuda", launch.local_rank)
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistContext(launch, device, owned)
