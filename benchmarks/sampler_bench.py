"""Benchmark (a): rollout tokens/s of ``repro.sampler.KVSampler`` (fp32 and bf16) against ``model.generate``.

The batch is shaped like a GRPO rollout step: ``--groups`` prompts, each repeated ``--rollouts`` times (a group
shares its prompt), prompt lengths spread over ``--prompt-len`` ± 40 %, ``--new`` sampled tokens per row at
temperature 1, top_p 1 (``top_k=0`` for HF so both sample the same full-softmax distribution). With random weights
no row stops early (both run the full length), so the row-compaction advantage of our sampler is NOT exercised;
pass ``--checkpoint DIR`` (a trained model, e.g. the SFT output) and ``--stop`` to include stopping.

Both engines run interleaved ``--repeats`` times; medians and the ratio (ours / HF, tokens/s) are printed with the
peak RSS of the process. Example:

    .venv/bin/python benchmarks/sampler_bench.py --preset mini --groups 4 --rollouts 8 --prompt-len 768 --new 128
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import torch


def _batch(a: argparse.Namespace, v: int) -> tuple[list[int], list[list[int]], torch.Tensor, torch.Tensor]:
    """GRPO-shaped batch: groups of identical prompts; also the left-padded tensors for HF generate."""
    g = torch.Generator().manual_seed(0)
    lens = [max(8, int(a.prompt_len * (0.6 + 0.8 * i / max(1, a.groups - 1)))) for i in range(a.groups)]
    prompts = [p for n in lens for p in [torch.randint(3, v, (n,), generator=g).tolist()] * a.rollouts]
    p_max = max(lens)
    ids = torch.zeros(len(prompts), p_max, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, p_max - len(p):] = torch.tensor(p)
        att[i, p_max - len(p):] = 1
    return lens, prompts, ids, att


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mini", choices=["nano", "mini"])
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--checkpoint", default=None, help="HF model directory to load instead of random weights")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=768)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--stop", type=int, default=None, help="stop token id (e.g. <|im_end|> = 2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from repro.models import build_model
    from repro.sampler import KVSampler, TokenRequest

    if a.checkpoint:
        from transformers import Qwen3ForCausalLM

        model = Qwen3ForCausalLM.from_pretrained(a.checkpoint).eval()
    else:
        model = build_model(a.preset, a.vocab, seed=0)
    lens, prompts, ids, att = _batch(a, model.config.vocab_size)
    p_max = max(lens)
    stop = (a.stop,) if a.stop is not None else ()
    reqs = [TokenRequest(p, a.new, stop_ids=stop) for p in prompts]
    sampler = KVSampler(model, max_batch=len(reqs))
    sampler_bf16 = KVSampler(model, max_batch=len(reqs), dtype=torch.bfloat16)

    def ours() -> int:
        res = sampler.generate(reqs, generator=torch.Generator().manual_seed(1))
        return sum(len(r.ids) for r in res)

    def ours_bf16() -> int:
        res = sampler_bf16.generate(reqs, generator=torch.Generator().manual_seed(1))
        return sum(len(r.ids) for r in res)

    def hf() -> int:
        torch.manual_seed(1)
        out = model.generate(ids, attention_mask=att, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=a.new, eos_token_id=a.stop, pad_token_id=0)
        new = out[:, p_max:]
        if a.stop is None:
            return new.numel()
        return sum(int((row == a.stop).nonzero()[0]) + 1 if (row == a.stop).any() else len(row) for row in new)

    times: dict[str, list[float]] = {"ours": [], "ours_bf16": [], "hf": []}
    toks: dict[str, int] = {}
    with torch.no_grad():
        for _ in range(a.repeats):
            for name, fn in (("ours", ours), ("ours_bf16", ours_bf16), ("hf", hf)):
                t0 = time.perf_counter()
                toks[name] = fn()
                times[name].append(time.perf_counter() - t0)
    tps = {k: toks[k] / statistics.median(times[k]) for k in times}
    print(f"batch: {a.groups} groups x {a.rollouts} rollouts, prompts {lens}, {a.new} new tokens, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, threads={a.threads}")
    for k in times:
        print(f"{k:9s}: {toks[k]} tokens, median {statistics.median(times[k]):.2f}s over {a.repeats} -> "
              f"{tps[k]:.1f} tok/s  (runs: {', '.join(f'{x:.2f}' for x in times[k])})")
    print(f"ratio ours/hf tokens/s: {tps['ours'] / tps['hf']:.2f}x; bf16 decode / fp32 decode (ours): "
          f"{tps['ours_bf16'] / tps['ours']:.2f}x; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(json.dumps({"config": vars(a), "tokens_per_s": tps, "times": times}))


if __name__ == "__main__":
    main()
