"""Where the RL step's sampling could still get faster on this CPU (issue #35): two candidate changes to
``repro.sampler.KVSampler``'s decode step, each against today's sampler in the same run.

1. **Grouped-query attention without expanding K/V.** Today every decode step calls
   ``scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)``. With one query token, the query heads
   that share a K/V head can instead be laid out as query rows of that head (``[B, n_kv, heads/n_kv, hd]``), which
   needs no GQA support from the kernel. Timed on one attention call at the mini model's shapes (4 rows, 4 heads,
   2 K/V heads, head dim 64, ``--context`` keys), with the largest difference from today's output.
2. **``torch.compile`` of the forward pass** (``KVSampler._forward``, ``dynamic=True`` so the growing cache does not
   recompile every step): one ``generate`` of 4 rows × ``--new`` tokens after a ``--context``-token prompt with the
   shipped SFT coder (``--model``), eager against compiled, ``--repeats`` times each; the first compiled call
   includes compilation and is reported apart. Whether the sampled tokens are the same is printed.

One thread (``torch.set_num_threads(1)``), as the RL step samples. Run:

    .venv/bin/python benchmarks/decode_step_bench.py [--model assets/sft/mini] [--context 2000] [--new 150]

The last line reads ``decode gqa_rows <X>x compiled <Y>x`` (today's median time over the candidate's).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def attention(context: int, reps: int) -> float:
    """Median seconds of today's GQA call over the rows layout, printed with both medians and the difference."""
    b, h, kv, d = 4, 4, 2, 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, n, s, d, generator=g) for n, s in ((h, 1), (kv, context), (kv, context)))
    mask = torch.ones(b, 1, 1, context, dtype=torch.bool)
    mask[:, :, :, :50] = False  # left padding, as a batch of prompts of different lengths has

    def today() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def rows() -> torch.Tensor:
        return F.scaled_dot_product_attention(q.view(b, kv, h // kv, d), k, v, attn_mask=mask).view(b, h, 1, d)

    diff = float((today() - rows()).abs().max())
    times: dict[str, list[float]] = {"today": [], "rows": []}
    for _ in range(3):
        for name, fn in (("today", today), ("rows", rows)):
            for _ in range(10):
                fn()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - t0) / reps)
    med = {n: statistics.median(t) for n, t in times.items()}
    print(f"attention, one decode step of one layer at {context} keys: today {med['today'] * 1e3:.3f} ms, "
          f"query heads as rows {med['rows'] * 1e3:.3f} ms; largest difference {diff:.1e}")
    return med["today"] / med["rows"]


def compiled(model_dir: str, context: int, new: int, repeats: int) -> float:
    from transformers import AutoModelForCausalLM

    from repro.engine import TokenRequest
    from repro.sampler import KVSampler

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt = torch.randint(10, model.config.vocab_size, (context,), generator=torch.Generator().manual_seed(0)).tolist()
    reqs = [TokenRequest(prompt_ids=prompt, max_new_tokens=new, temperature=1.0, top_p=1.0, stop_ids=())] * 4

    def timed(s: KVSampler) -> tuple[float, list[list[int]]]:
        t0 = time.perf_counter()
        out = s.generate(reqs, generator=torch.Generator().manual_seed(1))
        return time.perf_counter() - t0, [o.ids for o in out]

    eager, comp = KVSampler(model), KVSampler(model)
    comp._forward = torch.compile(comp._forward, dynamic=True)  # type: ignore[method-assign]
    first, ids_c = timed(comp)
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    ids_e: list[list[int]] = []
    for _ in range(repeats):
        t, ids_e = timed(eager)
        times["eager"].append(t)
        t, ids_c = timed(comp)
        times["compiled"].append(t)
    med = {n: statistics.median(t) for n, t in times.items()}
    print(f"generate, 4 rows x {new} tokens after {context}: eager {med['eager']:.2f} s, compiled {med['compiled']:.2f} s "
          f"(first compiled call, compilation included: {first:.1f} s); same tokens: {ids_e == ids_c}")
    return med["eager"] / med["compiled"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="assets/sft/mini")
    ap.add_argument("--context", type=int, default=2000)
    ap.add_argument("--new", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    r_att = attention(a.context, 200)
    r_comp = compiled(a.model, a.context, a.new, a.repeats)
    print(f"decode gqa_rows {r_att:.2f}x compiled {r_comp:.2f}x")


if __name__ == "__main__":
    main()
