"""Benchmark (c): peak memory and wall time of the full-vocabulary KL (forward + backward), one variant per process.

Variants, all on the same random fp32 inputs (student/teacher hidden states [N, H], one shared lm_head [V, H]):
- ``naive``: logits = H Wᵀ materialised for all N tokens, log_softmax, reverse KL, backward (autograd).
- ``ours``: ``repro.losses.chunked_kl_loss`` (chunks of C tokens, closed-form gradients, κ = ∞ so values match).
- ``trl``: TRL's ``trl.kernels.chunked_divergence.ChunkedDivergenceFunction`` (beta = 1 → reverse KL), if installed.

Peak memory = ``ru_maxrss`` after the fwd+bwd minus ``ru_maxrss`` after the inputs exist (each variant runs in a
fresh subprocess, so the high-water mark is its own). Values: each variant prints the loss and gradient checksums;
the parent checks they agree. Ratios are against ``naive`` measured in the same invocation.

    .venv/bin/python benchmarks/kl_memory_bench.py --tokens 2048 --vocab 151936 --hidden 256 --chunk 256
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_variant(name: str, n: int, v: int, h: int, chunk: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    if name == "ours":
        from repro.losses import chunked_kl_loss
    elif name == "trl":
        from trl.kernels.chunked_divergence import ChunkedDivergenceFunction
    g = torch.Generator().manual_seed(0)
    hs = torch.randn(n, h, generator=g).requires_grad_(True)
    ht = torch.randn(n, h, generator=g)
    w = (torch.randn(v, h, generator=g) * 0.05).requires_grad_(True)
    base = _rss_mib()
    t0 = time.perf_counter()
    if name == "naive":
        ls = torch.log_softmax(hs @ w.T, -1)
        with torch.no_grad():
            lt = torch.log_softmax(ht @ w.T, -1)
        loss = (ls.exp() * (ls - lt)).sum(-1).mean()
    elif name == "ours":
        loss = chunked_kl_loss(hs, ht, w, torch.full((n,), 1.0 / n), kappa=float("inf"), chunk_size=chunk).loss
    elif name == "trl":
        per_token, _ = ChunkedDivergenceFunction.apply(hs, w, None, ht, w.detach(), None, 1.0)
        loss = per_token.mean()
    else:
        raise SystemExit(f"unknown variant {name!r}")
    loss.backward()
    wall = time.perf_counter() - t0
    return {"variant": name, "loss": float(loss.detach()), "grad_h_sum": float(hs.grad.double().sum()),
            "grad_h_abs": float(hs.grad.double().abs().sum()), "grad_w_abs": float(w.grad.double().abs().sum()),
            "wall_s": wall, "peak_extra_mib": _rss_mib() - base, "base_mib": base}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default="naive,ours,trl")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_variant(a.child, a.tokens, a.vocab, a.hidden, a.chunk, a.threads)))
        return
    results = {}
    for name in a.variants.split(","):
        if name == "trl":
            try:
                import trl.kernels.chunked_divergence  # noqa: F401
            except ImportError:
                print("trl: ChunkedDivergenceFunction not installed; skipped")
                continue
        cmd = [sys.executable, __file__, "--child", name, "--tokens", str(a.tokens), "--vocab", str(a.vocab),
               "--hidden", str(a.hidden), "--chunk", str(a.chunk), "--threads", str(a.threads)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{name}: FAILED (exit {p.returncode}): {p.stderr.strip()[-500:]}")
            continue
        results[name] = json.loads(p.stdout.strip().splitlines()[-1])
        r = results[name]
        print(f"{name:6s} loss={r['loss']:.6f} wall={r['wall_s']:.2f}s peak_extra={r['peak_extra_mib']:.0f} MiB")
    if "naive" in results:
        ref = results["naive"]
        for name, r in results.items():
            rel = abs(r["loss"] - ref["loss"]) / max(1e-12, abs(ref["loss"]))
            grel = abs(r["grad_h_abs"] - ref["grad_h_abs"]) / max(1e-12, ref["grad_h_abs"])
            print(f"{name:6s} vs naive: memory ratio {r['peak_extra_mib'] / ref['peak_extra_mib']:.3f}, "
                  f"speed-up {ref['wall_s'] / r['wall_s']:.2f}x, loss rel diff {rel:.1e}, |grad_h| rel diff {grel:.1e}")
    if "ours" in results and "trl" in results:
        o, t = results["ours"], results["trl"]
        print(f"ours vs trl: memory ratio {o['peak_extra_mib'] / t['peak_extra_mib']:.3f}, "
              f"speed-up {t['wall_s'] / o['wall_s']:.2f}x, loss rel diff "
              f"{abs(o['loss'] - t['loss']) / max(1e-12, abs(t['loss'])):.1e}")
    print(json.dumps({"config": vars(a), "results": results}))


if __name__ == "__main__":
    main()
