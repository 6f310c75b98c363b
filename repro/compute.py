"""Compute accounting: wall time per phase, token counts, FLOPs estimates, peak memory, and the dry-run plan.

Phases of an RL step (``rollout`` = sampling tokens, ``environment`` = tool execution and grading, ``teacher`` =
the no-grad hint-conditioned forward, ``trainer`` = student forward/backward + optimizer). FLOPs are the usual
dense-transformer estimate (2·N per token forward, 6·N forward+backward, N = active non-embedding parameters plus
the lm_head), not a profiler measurement; attention's quadratic term is left out and said so in the manifest.

``plan`` is pure arithmetic for ``tgsuite train rl --dry-run``: parameter counts, bytes per GPU for full fine-tuning
with fp32 master weights, gradients and AdamW moments (16 B/param, sharded), plus 4 B/param for the frozen teacher
copy of the ``ema`` / ``fixed`` teachers (``repro.teacher``; no gradient, no optimizer state, same FLOPs: still one
teacher forward), KV cache per token, FLOPs per step; :func:`activation_plan` (what the trainer's backward keeps per
micro-batch, with and without activation checkpointing) and :func:`engine_plan` (the rollout engine's weights and
KV cache for the configured concurrency, on inference GPUs or colocated on the trainer's). SCALE.md §4 states the
formulas and what they leave out.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from repro.config import TrainConfig

PHASES = ("rollout", "environment", "teacher", "trainer", "checkpoint")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def peak_cuda_bytes() -> int | None:
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.max_memory_allocated())
    except Exception:  # pragma: no cover - torch missing or broken driver
        return None
    return None


@dataclass
class ComputeLedger:
    """Accumulates wall seconds, tokens and FLOPs per phase. Thread-safe (the async producer writes to it)."""

    wall_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    flops: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, wall_s=time.perf_counter() - t0)

    def add(self, name: str, *, wall_s: float = 0.0, tokens: int = 0, flops: float = 0.0) -> None:
        if name not in self.wall_s:
            raise KeyError(f"unknown compute phase {name!r}; use one of {PHASES}")
        with self._lock:
            self.wall_s[name] += wall_s
            self.tokens[name] += tokens
            self.flops[name] += flops

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "wall_s": dict(self.wall_s),
                "tokens": dict(self.tokens),
                "flops": dict(self.flops),
                "flops_total": float(sum(self.flops.values())),
                "peak_rss_bytes": peak_rss_bytes(),
                "peak_cuda_bytes": peak_cuda_bytes(),
                "flops_note": "estimate: 2·N per forward token, 6·N per trained token; attention term excluded",
            }

    def load(self, state: dict[str, Any]) -> None:
        with self._lock:
            for key in ("wall_s", "tokens", "flops"):
                getattr(self, key).update(state.get(key, {}))


def device_clock(device: torch.device | str) -> float:
    """``time.perf_counter()`` after the device's queued work has finished (``torch.cuda.synchronize`` on a CUDA
    device; nothing to wait for on the CPU). CUDA kernels run asynchronously, so a phase timed without it (the
    teacher forward inside the trainer step) measures only the kernel launches."""
    if getattr(device, "type", device) == "cuda":
        import torch

        torch.cuda.synchronize(device)
    return time.perf_counter()


def count_params(model: torch.nn.Module) -> dict[str, int]:
    """Total parameters, and the ones that enter the matmul FLOPs (everything but the input embedding)."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)  # the adapters' alone under LoRA
    emb = model.get_input_embeddings().weight.numel() if hasattr(model, "get_input_embeddings") else 0
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    # with tied embeddings the lm_head matmul still costs V·H per token
    flop_params = total - emb + (emb if tied else 0)
    return {"total": int(total), "flop_params": int(flop_params), "trainable": int(trainable)}


def merge_ledgers(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """One compute snapshot for several processes' :meth:`ComputeLedger.snapshot`: tokens and FLOPs summed, wall
    seconds and peak memory of the slowest / largest (one snapshot: itself)."""
    out = dict(snapshots[0])
    out["tokens"] = {k: sum(s["tokens"][k] for s in snapshots) for k in snapshots[0]["tokens"]}
    out["flops"] = {k: sum(s["flops"][k] for s in snapshots) for k in snapshots[0]["flops"]}
    out["wall_s"] = {k: max(s["wall_s"][k] for s in snapshots) for k in snapshots[0]["wall_s"]}
    out["flops_total"] = float(sum(out["flops"].values()))
    out["peak_rss_bytes"] = max(s["peak_rss_bytes"] for s in snapshots)
    return out


def forward_flops(flop_params: int, tokens: int) -> float:
    return 2.0 * flop_params * tokens


def train_flops(flop_params: int, tokens: int) -> float:
    return 6.0 * flop_params * tokens


# ----------------------------------------------------------------------------------------------------------------
# Dry-run plan (pure arithmetic)
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """Enough of a Qwen3 / Qwen3-MoE config to count parameters and KV bytes."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int = 0  # dense FFN width (0 for MoE)
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    tie_embeddings: bool = False


def plan(
    shape: ModelShape,
    *,
    trainer_gpus: int,
    trajectories_per_step: int,
    tokens_per_trajectory: int,
    failing_fraction: float = 0.5,
    steps: int = 1,
    kv_dtype_bytes: int = 2,
    teacher_copy_bytes_per_param: float = 0.0,
    lora_params: int = 0,
) -> dict[str, float]:
    """Memory and compute plan for full fine-tuning (see the module docstring). All outputs are estimates.

    ``teacher_copy_bytes_per_param``: 0 for the live teacher, 4 for an fp32 ema/fixed teacher copy (sharded like
    the weights); it adds memory only, the FLOPs do not depend on it. ``lora_params`` (:func:`lora_param_count`):
    > 0 plans LoRA training instead — the frozen base in fp32 (4 B/param, no gradient, no optimizer state: what the
    trainer holds, ``repro.lora``) plus 16 B per adapter parameter; the FLOPs stay the full-fine-tuning estimate (an
    upper bound: the base's weight gradients are not computed)."""
    h, hd = shape.hidden, shape.head_dim
    attn = h * shape.heads * hd + 2 * h * shape.kv_heads * hd + shape.heads * hd * h
    if shape.experts:
        ffn_total = shape.experts * 3 * h * shape.moe_intermediate
        ffn_active = shape.experts_per_token * 3 * h * shape.moe_intermediate
        router = h * shape.experts
    else:
        ffn_total = ffn_active = 3 * h * shape.intermediate
        router = 0
    per_layer = attn + ffn_total + router
    embed = shape.vocab * h
    head = 0 if shape.tie_embeddings else shape.vocab * h
    total = shape.layers * per_layer + embed + head
    active_flop = shape.layers * (attn + ffn_active + router) + shape.vocab * h
    tokens = trajectories_per_step * tokens_per_trajectory
    step_flops = 6.0 * active_flop * tokens + 2.0 * active_flop * tokens * failing_fraction
    return {
        "params_total": float(total),
        "params_per_layer": float(per_layer),
        "params_active_flop": float(active_flop),
        "params_trainable": float(lora_params or total),
        "train_state_bytes_per_gpu": (16.0 * total if not lora_params else 4.0 * total + 16.0 * lora_params)
        / trainer_gpus,
        "teacher_copy_bytes_per_gpu": teacher_copy_bytes_per_param * total / trainer_gpus,
        "bf16_weights_bytes": 2.0 * total,
        "kv_bytes_per_token": float(shape.layers * 2 * shape.kv_heads * hd * kv_dtype_bytes),
        "tokens_per_step": float(tokens),
        "flops_per_step": step_flops,
        "flops_total": step_flops * steps,
    }


def lora_param_count(shape: ModelShape, r: int, targets: Sequence[str]) -> int:
    """Adapter parameters of ``[model.lora]``: r·(d_in + d_out) per adapted projection per layer (embeddings, norms,
    router and lm_head get none). MoE shapes take attention targets only (their experts are fused parameters)."""
    h, q, kv, ffn = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, ffn), "up_proj": (h, ffn), "down_proj": (ffn, h)}
    unknown = sorted(set(targets) - set(dims))
    mlp = sorted(set(targets) & {"gate_proj", "up_proj", "down_proj"})
    if shape.experts and mlp:
        raise ValueError(f"lora.target_modules {mlp}: an MoE model's experts are fused 3-D parameters in "
                         "transformers' Qwen3-MoE, not the nn.Linear layers repro.lora adapts; use attention "
                         "projections (q_proj, k_proj, v_proj, o_proj)")
    if unknown:
        raise ValueError(f"lora.target_modules: unknown projections {unknown}; use some of {sorted(dims)}")
    return shape.layers * sum(r * (dims[t][0] + dims[t][1]) for t in targets)


def plan_shape(cfg: TrainConfig) -> tuple[ModelShape, str]:
    """The model shape for the plan: ``[shape]`` when given, else the preset's (vocab 4,096 assumed)."""
    s = cfg.shape
    if s.layers:
        return (ModelShape(layers=s.layers, hidden=s.hidden, heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim,
                           vocab=s.vocab, intermediate=s.intermediate, experts=s.experts,
                           experts_per_token=s.experts_per_token, moe_intermediate=s.moe_intermediate,
                           tie_embeddings=s.tie_embeddings), "shape from the config's [shape] table")
    if cfg.model.preset in ("nano", "mini"):
        from repro.models import PRESETS

        p = PRESETS[cfg.model.preset]
        return (ModelShape(layers=p.num_hidden_layers, hidden=p.hidden_size, heads=p.num_attention_heads,
                           kv_heads=p.num_key_value_heads, head_dim=p.head_dim, vocab=4096,
                           intermediate=p.intermediate_size, tie_embeddings=p.tie_word_embeddings),
                f"preset {cfg.model.preset}, vocab 4,096 assumed")
    raise ValueError("model.preset = 'custom' needs a [shape] table for --dry-run (layers, hidden, heads, ...)")


def activation_elements_per_token_layer(shape: ModelShape) -> int:
    """Elements one decoder layer keeps for the backward pass per token (an estimate, SCALE.md §4): attention
    2·h (RMSNorm input and output) + 2·q + 2·kv (q and k before and after their norm and RoPE) + kv (v) + q (the
    attention output; flash / SDPA attention keeps no tokens² matrix); MLP 2·h + k·4·I (gate, SiLU(gate), up and
    their product for each of the k active experts; k = 1 for a dense MLP) + E router logits for a MoE layer.
    q = heads·head_dim, kv = kv_heads·head_dim. Framework temporaries and allocator slack are not counted."""
    q, kv, h = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.hidden
    attn = 2 * h + 2 * q + 2 * kv + kv + q
    if shape.experts:
        mlp = 2 * h + shape.experts_per_token * 4 * shape.moe_intermediate + shape.experts
    else:
        mlp = 2 * h + 4 * shape.intermediate
    return attn + mlp


def activation_plan(shape: ModelShape, *, micro_batch_tokens: int, chunk_rows: int,
                    dtype_bytes: int = 2) -> dict[str, float]:
    """Activation bytes of one micro-batch of ``micro_batch_tokens`` tokens (per trainer GPU: FSDP shards weights,
    not activations). Without checkpointing every layer keeps its tensors; with per-layer checkpointing only each
    layer's input (h per token) is kept and one layer's tensors exist again while it is recomputed. The loss adds
    one chunk of ``chunk_rows`` rows of fp32 student and teacher log-probs over the vocabulary
    (``repro.losses.chunked_kl_loss``; full [tokens, vocab] logits never exist)."""
    per_layer = activation_elements_per_token_layer(shape) * dtype_bytes
    t = micro_batch_tokens
    loss_chunk = 2.0 * min(chunk_rows, t) * shape.vocab * 4
    return {
        "micro_batch_tokens": float(t),
        "activation_bytes_per_token_layer": float(per_layer),
        "activations_bytes": float(t * shape.layers * per_layer),
        "activations_checkpointed_bytes": float(t * shape.layers * shape.hidden * dtype_bytes + t * per_layer),
        "loss_chunk_bytes": loss_chunk,
    }


def engine_plan(*, weights_bytes: float, kv_bytes_per_token: float, gpus: int, tp: int, concurrency: int,
                tokens_per_sequence: int) -> dict[str, float]:
    """The rollout engine's memory per GPU: ``gpus // tp`` replicas of tensor-parallel size ``tp``, each holding
    the (bf16) weights split over its ``tp`` GPUs and the KV cache of its share (rounded up) of ``concurrency``
    sequences of ``tokens_per_sequence`` tokens, also split over ``tp`` (kv heads ≥ tp assumed)."""
    if tp < 1 or gpus < tp:
        raise ValueError(f"engine_plan: {gpus} GPU(s) cannot hold a replica of tensor-parallel size {tp}; set "
                         "cluster.inference_tp ≤ the GPUs the engine runs on")
    replicas = gpus // tp
    seqs = -(-concurrency // replicas)
    kv = seqs * tokens_per_sequence * kv_bytes_per_token / tp
    return {
        "engine_replicas": float(replicas),
        "engine_sequences_per_replica": float(seqs),
        "engine_weights_bytes_per_gpu": weights_bytes / tp,
        "engine_kv_bytes_per_gpu": float(kv),
        "engine_bytes_per_gpu": weights_bytes / tp + kv,
    }
