"""Training throughput on this CPU: today's SFT path against the packed bf16-mixed path, in the same run.

    python benchmarks/train_throughput_bench.py [--threads 2] [--steps 4] [--shape mini]

What is timed (each a full optimizer step: forward, backward, AdamW), on synthetic documents shaped like mini expert
episodes (lengths drawn around 2.4k tokens, ~11 % assistant targets; ``--doc-tokens`` to change):

- ``baseline``: ``repro.sft.sft_losses`` one sequence per forward, float32, with the context loss on (the mini
  preset's SFT path before packing: ``context_weight = 1``); also without the context loss;
- ``2bec4a7 layout``: the same baseline on the mini model's head layout when issue #20 was filed (8 query / 4 KV
  heads of 32 dimensions; since then 4 / 2 heads of 64) — the SFT path of that commit, timed in this run;
- ``packed-fp32``: ``repro.packing``, documents packed into forwards of at most ``--budget`` tokens, float32;
- ``packed-bf16``: the same under the ``bf16-mixed`` policy (``repro.precision``: fp32 master weights and AdamW
  state, bf16 autocast);
- ``packed-bf16-alldocs``: packed-bf16 with a loss on every token (the pretraining case).

Then the attention kernel alone, forward + backward of one causal document of ``--doc-tokens`` tokens with the mini
model's heads: PyTorch's flash kernel in bf16 and in fp32, and the math path in bf16 (ms, best of 3); and, from the
bf16 flash time, two ceilings and their ratios to the baseline: the tokens/s of a step that did nothing but the model's
attention, and of one that also ran the model's matmuls at the measured bf16 peak (everything else free); no path that
keeps PyTorch's CPU attention kernel can pass them.

Prints tokens/s (all tokens that went through the model, padding excluded), the ratio to the baseline and to the
2bec4a7 layout, and the
fraction of the bf16 matmul peak: the model FLOPs (6·N·tokens plus attention) per second against a large bf16
matmul measured in the same run (``torch.mm`` 2048², the best of 5). Peak RSS at the end.
"""

from __future__ import annotations

import argparse
import random
import resource
import time

import torch

from repro.models import ModelShape, build_model, count_params
from repro.packing import pack, packed_nll
from repro.precision import autocast
from repro.sft import sft_losses


def matmul_peak(threads: int, dtype: torch.dtype = torch.bfloat16, n: int = 2048) -> float:
    """GFLOP/s of an n×n matmul (best of 5)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def synthetic_docs(rng: random.Random, vocab: int, n: int, mean_len: int, act_share: float) -> list:
    docs = []
    for _ in range(n):
        length = max(64, int(rng.gauss(mean_len, mean_len * 0.3)))
        ids = [rng.randrange(10, vocab) for _ in range(length)]
        act = [1 if rng.random() < act_share else 0 for _ in range(length)]
        docs.append((ids, act))
    return docs


def dense_flops_per_token(model: torch.nn.Module) -> float:
    """Forward + backward FLOPs of the model's matmuls per token: 6 per parameter."""
    return 6 * count_params(model)


def model_flops(model: torch.nn.Module, shape: ModelShape, tokens: int, seq: int) -> float:
    attn = 12 * shape.num_hidden_layers * shape.num_attention_heads * shape.head_dim * seq * tokens / 2
    return dense_flops_per_token(model) * tokens + attn


def issue_time_model(shape: str, vocab: int) -> torch.nn.Module:
    """The mini model with 2bec4a7's head layout (8 query / 4 KV heads × 32), same width, depth and MLP."""
    from transformers import Qwen3ForCausalLM

    from repro.models import make_config

    cfg = make_config(shape, vocab)
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 8, 4, 32
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen3ForCausalLM(cfg)


def attention_ms(shape: ModelShape, tokens: int, dtype: torch.dtype, *, math: bool = False) -> float:
    """Forward + backward of causal sdpa on one document ([1, heads, tokens, head_dim]), in ms (best of 3)."""
    import torch.nn.functional as F

    q, k, v = (torch.randn(1, shape.num_attention_heads, tokens, shape.head_dim, dtype=dtype, requires_grad=True)
               for _ in range(3))
    grad = torch.randn_like(q)
    best = float("inf")
    for i in range(4):
        t = time.perf_counter()
        if math:
            out = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, None, 0.0, True)[0]
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
        if i:  # the first call warms up
            best = min(best, (time.perf_counter() - t) * 1000)
    return best


def ceiling_tps(doc_tokens: int, layers: int, attn_ms: float, matmul_flops_per_token: float = 0.0,
                peak_gflops: float = float("inf")) -> float:
    """Tokens/s of a step that costs only ``layers`` attention forward + backward passes of ``attn_ms`` each per
    ``doc_tokens``-token document, plus (if given) ``matmul_flops_per_token`` at ``peak_gflops``. Norms, RoPE,
    activations, residual adds, casts and the optimizer count as free, so no path that keeps this attention kernel
    and these matmuls can pass it."""
    if attn_ms <= 0 or layers < 1 or doc_tokens < 1 or peak_gflops <= 0:
        raise ValueError(f"ceiling of {doc_tokens} tokens, {layers} layers x {attn_ms} ms, peak {peak_gflops}: "
                         "every one must be positive")
    per_token_s = layers * attn_ms / 1000 / doc_tokens + matmul_flops_per_token / (peak_gflops * 1e9)
    return 1 / per_token_s


def time_baseline(model, docs, steps: int, *, context: bool) -> tuple[float, int]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tok, t0 = 0, None
    for i in range(steps + 1):
        if i == 1:
            t0, tok = time.perf_counter(), 0
        ids, act = docs[i % len(docs)]
        nll, n, cnll, cn = sft_losses(model, ids, act, context=context)
        (nll / max(1, n) + cnll / max(1, cn)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tok += len(ids)
    return tok / (time.perf_counter() - t0), tok


def time_packed(model, docs, steps: int, *, budget: int, precision: str) -> tuple[float, int]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches, cur, room = [], [], budget
    for d in docs:
        if len(d[0]) > room and cur:
            batches.append(pack(cur))
            cur, room = [], budget
        cur.append(d)
        room -= len(d[0])
    tok, t0 = 0, None
    for i in range(steps + 1):
        if i == 1:
            t0, tok = time.perf_counter(), 0
        b = batches[i % len(batches)]
        with autocast(precision):
            nll, n = packed_nll(model, b)
        (nll / max(1, n)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tok += b.n_tokens
    return tok / (time.perf_counter() - t0), tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--shape", default="mini")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--doc-tokens", type=int, default=2400)
    ap.add_argument("--budget", type=int, default=8192, help="tokens per packed forward")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from repro.models import PRESETS

    shape = PRESETS[args.shape]
    rng = random.Random(0)
    docs = synthetic_docs(rng, args.vocab, 24, args.doc_tokens, 0.11)
    all_docs = [(ids, [1] * len(ids)) for ids, _ in docs]
    peak = matmul_peak(args.threads)
    print(f"bf16 matmul peak: {peak:.0f} GFLOP/s ({args.threads} threads); fp32: "
          f"{matmul_peak(args.threads, torch.float32):.0f} GFLOP/s")
    rows = []
    base_tps, _ = time_baseline(build_model(args.shape, args.vocab, seed=0).train(), docs, args.steps, context=True)
    rows.append(("baseline: mini SFT (fp32, 1 seq, +context)", base_tps, docs))
    old_tps, _ = time_baseline(issue_time_model(args.shape, args.vocab).train(), docs, args.steps, context=True)
    rows.append(("same, 2bec4a7 layout (8x32 heads)", old_tps, docs))
    tps, _ = time_baseline(build_model(args.shape, args.vocab, seed=0).train(), docs, args.steps, context=False)
    rows.append(("sft_losses fp32 1 seq, assistant only", tps, docs))
    for name, prec, dd in (("packed-fp32", "fp32", docs), ("packed-bf16", "bf16-mixed", docs),
                           ("packed-bf16-alldocs", "bf16-mixed", all_docs)):
        m = build_model(args.shape, args.vocab, seed=0).train()
        tps, _ = time_packed(m, dd, args.steps, budget=args.budget, precision=prec)
        rows.append((name, tps, dd))
    m = build_model(args.shape, args.vocab, seed=0)
    print(f"model {args.shape}: {count_params(m) / 1e6:.2f}M parameters; packed batches of <= {args.budget} tokens")
    for name, tps, _ in rows:
        frac = model_flops(m, shape, 1, args.doc_tokens) * tps / 1e9 / peak
        print(f"{name:44s} {tps:8.0f} tok/s  x{tps / base_tps:5.2f}  x{tps / old_tps:5.2f} vs 2bec4a7 layout  "
              f"{frac:6.1%} of bf16 matmul peak")
    attn = {}
    for label, dt, math in (("flash, bf16", torch.bfloat16, False), ("flash, fp32", torch.float32, False),
                            ("math, bf16", torch.bfloat16, True)):
        attn[label] = attention_ms(shape, args.doc_tokens, dt, math=math)
        print(f"attention alone ({args.doc_tokens} tokens, {shape.num_attention_heads} heads x {shape.head_dim}, "
              f"fwd+bwd) {label:12s} {attn[label]:7.1f} ms")
    layers, a_ms = shape.num_hidden_layers, attn["flash, bf16"]
    only_attn = ceiling_tps(args.doc_tokens, layers, a_ms)
    dense = dense_flops_per_token(m)
    with_mm = ceiling_tps(args.doc_tokens, layers, a_ms, dense, peak)
    print(f"ceiling, bf16 attention alone ({layers} layers x {a_ms:.1f} ms per {args.doc_tokens}-token document, "
          f"everything else free): {only_attn:.0f} tok/s = x{only_attn / base_tps:.2f} the baseline")
    print(f"ceiling, bf16 attention + the model's matmuls ({dense / 1e6:.1f}M FLOPs per token) at the "
          f"{peak:.0f} GFLOP/s peak, everything else free: {with_mm:.0f} tok/s = x{with_mm / base_tps:.2f} the baseline")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
