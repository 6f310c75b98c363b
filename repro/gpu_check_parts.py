"""The non-RL parts of ``python -m repro.gpu_check``, each a function ``(args, out, device) -> dict``.

- ``throughput``: optimizer steps (forward, backward, AdamW) of a ~0.5 B Qwen3-architecture model (the Qwen3-0.6B
  shape: 28 layers, hidden 1,024, 16 query / 8 KV heads of 128, MLP 3,072, vocabulary 151,936, tied embeddings;
  random init) on packed synthetic documents (``repro.packing``: attention inside each document, chunked
  log-probs) under ``bf16-mixed`` (``repro.precision``: fp32 master weights and AdamW state, bf16 autocast).
  Tokens/s over the timed steps (after one warm-up step, with ``torch.cuda.synchronize``) and MFU: model FLOPs
  (6·N per token, N = parameters without the input embedding but with the tied lm_head, plus causal attention
  6·L·heads·head_dim·len² per document) per second against the device's dense bf16 peak from its data sheet
  (:data:`PEAK_BF16`; None for an unknown device) and against a bf16 matmul measured in the same run.
- ``kl``: the chunked full-vocabulary KL (``repro.losses.chunked_kl_loss``) against the naive one
  (``kl_from_logits`` on materialised [N, V] logits) at V = 151,936 and N = 16,384 rows, hidden 2,048 (the paper
  model's), forward + backward under bf16 autocast with fp32 master weights: time (best of 3 after a warm-up) and
  peak memory above the inputs; the naive one may run out of memory, which is reported as its result. When both run,
  their losses are compared.
- ``lora``: one LoRA step (``repro.lora``, r = 16 on all seven projections) of the same 0.5 B model on one packed
  batch: time, peak memory, trainable parameters, and that the step moved the adapters and left the base alone.
- ``fsdp``: ``--steps`` RL steps of the ``mini`` model (arm tg) through ``repro.train.train_rl`` with
  ``cluster.fsdp = true`` on one rank (NCCL process group of size 1, FSDP2 shards, bf16 all-gathers, activation
  checkpointing, the ``dcp/`` checkpoint): step times, peak memory, the checkpoint's files.
"""

from __future__ import annotations

import os
import random
import socket
import time
from argparse import Namespace
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import Qwen3Config

    from repro.packing import Packed

# dense bf16 tensor-core peak (FLOP/s, no sparsity) from the vendors' data sheets, by a substring of the device name
PEAK_BF16 = (("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100 NVL", 835.0e12), ("H100", 989.4e12),
             ("GH200", 989.4e12), ("B200", 2250e12), ("A100", 312e12), ("L40S", 362.05e12), ("A10G", 70e12))


def spec_peak(name: str) -> float | None:
    for key, peak in PEAK_BF16:
        if key in name:
            return peak
    return None


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> int:
    """Reset the peak counter; returns the bytes allocated now (the baseline a peak is measured above)."""
    if device != "cuda":
        return 0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return int(torch.cuda.memory_allocated())


def peak_above(device: str, base: int) -> int | None:
    return int(torch.cuda.max_memory_allocated()) - base if device == "cuda" else None


def timed(fn: Callable[[], object], device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def matmul_peak(device: str, n: int = 8192) -> float:
    """FLOP/s of an n×n bf16 matmul on ``device`` (best of 5 after a warm-up)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    torch.mm(a, b)
    return max(2 * n ** 3 / timed(lambda: torch.mm(a, b), device) for _ in range(5))


def half_b_config(vocab: int = 151_936, layers: int = 28) -> Qwen3Config:
    """The Qwen3-0.6B shape (module docstring) as a ``Qwen3Config``; ``layers`` / ``vocab`` smaller for tests."""
    from transformers import Qwen3Config

    cfg = Qwen3Config(vocab_size=vocab, hidden_size=1024, num_hidden_layers=layers, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, intermediate_size=3072, max_position_embeddings=40960,
                      tie_word_embeddings=True, rms_norm_eps=1e-6, attention_bias=False, hidden_act="silu",
                      rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, use_sliding_window=False,
                      pad_token_id=0, eos_token_id=2, bos_token_id=None)
    cfg._attn_implementation = "sdpa"
    return cfg


def build_half_b(device: str, cfg: Qwen3Config) -> torch.nn.Module:
    from transformers import Qwen3ForCausalLM

    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(0)
        return Qwen3ForCausalLM(cfg).train()


def packed_batches(vocab: int, budget: int, doc_tokens: int, n_batches: int, device: str,
                   seed: int = 0) -> list[Packed]:
    """``n_batches`` packed batches of synthetic documents (lengths around ``doc_tokens``) of ≤ ``budget`` tokens,
    every token a target (the pretraining case; the RL trainer's masks change the loss, not the matmuls), on
    ``device``."""
    from dataclasses import replace

    from repro.packing import pack

    rng = random.Random(seed)
    out = []
    for _ in range(n_batches):
        docs, room = [], budget
        while room >= 64:
            n = min(room, max(64, int(rng.gauss(doc_tokens, doc_tokens * 0.3))))
            docs.append(([rng.randrange(10, vocab) for _ in range(n)], [1] * n))
            room -= n
        b = pack(docs)
        out.append(replace(b, input_ids=b.input_ids.to(device), position_ids=b.position_ids.to(device),
                           targets=b.targets.to(device), classes=b.classes.to(device)))
    return out


def attention_flops(batch: Packed, layers: int, heads: int, head_dim: int) -> float:
    cu = batch.cu_seqlens
    return float(sum(6 * layers * heads * head_dim * (e - s) ** 2 for s, e in zip(cu[:-1], cu[1:], strict=True)))


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: Packed, device: str) -> float:
    from repro.packing import packed_nll
    from repro.precision import autocast

    with autocast("bf16-mixed", device):
        nll, n = packed_nll(model, batch)
    (nll / max(1, n)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(nll.detach()) / max(1, n)


def run_throughput(args: Namespace, out: Path, device: str = "cuda") -> dict[str, Any]:
    """Part ``throughput`` (module docstring)."""
    from repro.compute import count_params

    cfg = half_b_config(args.vocab, args.layers)
    model = build_half_b(device, cfg)
    params = count_params(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batches = packed_batches(cfg.vocab_size, args.tokens, args.doc_tokens, args.train_steps + 1, device)
    base = reset_peak(device)
    train_step(model, opt, batches[0], device)  # warm-up (kernels, allocator, AdamW state)
    times = [timed(lambda b=b: train_step(model, opt, b, device), device) for b in batches[1:]]
    tokens = sum(b.n_tokens for b in batches[1:])
    flops = sum(6.0 * params["flop_params"] * b.n_tokens + attention_flops(b, cfg.num_hidden_layers,
                                                                           cfg.num_attention_heads, cfg.head_dim)
                for b in batches[1:])
    wall = sum(times)
    name = torch.cuda.get_device_name(0) if device == "cuda" else device
    peak, measured = spec_peak(name), matmul_peak(device) if device == "cuda" else None
    achieved = flops / wall
    return {"status": "ok", "params_total": params["total"], "flop_params": params["flop_params"],
            "tokens_per_step": tokens // len(times), "steps_timed": len(times), "step_s": times,
            "tokens_per_s": tokens / wall, "model_flops_per_s": achieved,
            "mfu": achieved / peak if peak else None, "spec_peak_bf16": peak,
            "matmul_peak_bf16_measured": measured, "frac_of_measured_matmul": achieved / measured if measured else None,
            "peak_bytes_above_start": peak_above(device, base) if device == "cuda" else None,
            "weights_state_bytes": 16 * params["total"]}


def run_kl(args: Namespace, out: Path, device: str = "cuda") -> dict[str, Any]:
    """Part ``kl`` (module docstring)."""
    from repro.losses import chunked_kl_loss, kl_from_logits
    from repro.precision import autocast

    n, v, d = args.kl_rows, args.kl_vocab, args.kl_hidden
    gen = torch.Generator(device=device).manual_seed(0)
    hs = (torch.randn(n, d, device=device, generator=gen) * 0.5).requires_grad_(True)
    ht = torch.randn(n, d, device=device, generator=gen) * 0.5
    w = (torch.randn(v, d, device=device, generator=gen) * 0.02).requires_grad_(True)
    tw = torch.full((n,), 1.0 / n, device=device)

    def chunked() -> float:
        with autocast("bf16-mixed", device):
            res = chunked_kl_loss(hs, ht, w, tw, kappa=float("inf"), chunk_size=args.kl_chunk)
        res.loss.backward()
        hs.grad, w.grad = None, None
        return float(res.loss.detach())

    def naive() -> float:
        with autocast("bf16-mixed", device):
            per = kl_from_logits(hs @ w.T, ht @ w.T)
        loss = (per * tw).sum()
        loss.backward()
        hs.grad, w.grad = None, None
        return float(loss.detach())

    result: dict[str, Any] = {"status": "ok", "rows": n, "vocab": v, "hidden": d, "chunk_rows": args.kl_chunk}
    for label, fn in (("chunked", chunked), ("naive", naive)):
        try:
            base = reset_peak(device)
            value = fn()
            peak = peak_above(device, base)
            best = min(timed(fn, device) for _ in range(3))
            result[label] = {"s": best, "peak_bytes": peak, "loss": value}
        except torch.OutOfMemoryError as exc:
            result[label] = {"out_of_memory": True, "error": str(exc).splitlines()[0]}
        finally:
            hs.grad, w.grad = None, None
            if device == "cuda":
                torch.cuda.empty_cache()
    c, nv = result["chunked"], result["naive"]
    if "loss" in c and "loss" in nv:
        result["loss_rel_diff"] = abs(c["loss"] - nv["loss"]) / max(abs(nv["loss"]), 1e-12)
        result["speed_ratio_naive_over_chunked"] = nv["s"] / c["s"]
        result["memory_ratio_naive_over_chunked"] = (nv["peak_bytes"] / c["peak_bytes"]
                                                     if c.get("peak_bytes") else None)
    if "loss" not in c:
        result["status"] = "failed"
        result["error"] = "the chunked KL did not run: " + c.get("error", "?")
    return result


def run_lora(args: Namespace, out: Path, device: str = "cuda") -> dict[str, Any]:
    """Part ``lora`` (module docstring)."""
    from repro.config import LoraCfg
    from repro.lora import prepare, trainable_parameters

    cfg = half_b_config(args.vocab, args.layers)
    model = prepare(build_half_b(device, cfg), LoraCfg(enabled=True, r=16), seed=0)
    params = trainable_parameters(model)
    before_base = model.model.layers[0].self_attn.q_proj.base_layer.weight.detach().clone()
    before_b = [p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n]
    opt = torch.optim.AdamW(params, lr=1e-3)
    batch = packed_batches(cfg.vocab_size, args.tokens, args.doc_tokens, 1, device, seed=1)[0]
    base = reset_peak(device)
    step_s = timed(lambda: train_step(model, opt, batch, device), device)
    after_b = [p.detach() for n, p in model.named_parameters() if "lora_B" in n]
    moved = sum(int(not torch.equal(a, b)) for a, b in zip(before_b, after_b, strict=True))
    base_same = torch.equal(before_base, model.model.layers[0].self_attn.q_proj.base_layer.weight.detach())
    ok = moved == len(after_b) and base_same
    return {"status": "ok" if ok else "failed",
            **({} if ok else {"error": f"{moved}/{len(after_b)} lora_B moved, base unchanged: {base_same}"}),
            "trainable_params": sum(p.numel() for p in params), "tokens": batch.n_tokens, "step_s": step_s,
            "tokens_per_s": batch.n_tokens / step_s, "peak_bytes_above_start": peak_above(device, base),
            "adapters_moved": moved, "adapters": len(after_b), "base_unchanged": base_same}


@contextmanager
def single_rank_env() -> Iterator[None]:
    """The torchrun variables of a one-process group (a free loopback port), restored afterwards."""
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.get(k) for k in keys}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_fsdp(args: Namespace, out: Path, device: str = "cuda") -> dict[str, Any]:
    """Part ``fsdp`` (module docstring)."""
    from repro.gpu_check_rl import read_metrics, rl_config, rl_setup
    from repro.rl_setup import default_engine
    from repro.train import train_rl

    cfg = rl_config(args, "hf_sampler", device, ["cluster.fsdp=true", "cluster.trainer_gpus=1",
                                                 "model.activation_checkpointing=true"])
    base = reset_peak(device)
    t0 = time.perf_counter()
    with single_rank_env():
        info = train_rl(cfg, out / "fsdp", setup=rl_setup(cfg, args.preset, default_engine))
    metrics = read_metrics(out / "fsdp")
    dcp = Path(info.path) / "dcp"
    return {"status": "ok", "steps": args.steps, "precision": cfg.model.precision,
            "activation_checkpointing": True, "step_s": [m.get("time/step_s") for m in metrics],
            "loss": [m.get("loss/total") for m in metrics],
            "peak_bytes_above_start": peak_above(device, base),
            "dcp_files": sorted(p.name for p in dcp.iterdir()) if dcp.is_dir() else None,
            "wall_s": time.perf_counter() - t0}
