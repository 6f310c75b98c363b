"""``python -m repro.gpu_check``: the project's paper-scale path on one GPU, in one command (``scripts/gpu_check.sh``).

Parts, in this order (``--parts`` picks some), one printed line each; the JSON summary ``gpu_check.json`` under
``--out`` is rewritten after every part, so what finished survives a timeout:

1. ``rl`` — RL steps of the ``mini`` model (arm ``tg``) through the real ``repro.train.train_rl`` with the
   ``hf_sampler`` engine, bf16-mixed; the sampler's log-probs against the trainer's at temperature 0.7 / top-p 0.7
   with a bound (``repro.gpu_check_rl``);
2. ``throughput`` — trainer tokens/s and MFU of a ~0.5 B Qwen3-architecture model, bf16-mixed, packed;
3. ``kl`` — the chunked full-vocabulary KL at V = 151,936, N = 16,384 against the naive one (time, peak memory);
4. ``lora`` — one LoRA step of the 0.5 B model;
5. ``fsdp`` — FSDP2 on one rank (NCCL) through ``train_rl``, with activation checkpointing;
6. ``vllm`` — the RL steps with a colocated vLLM engine when vLLM is importable, else ``skipped: no vLLM``
   (never a failure).

(2–5: ``repro.gpu_check_parts``.) Each part's entry has ``status`` ``ok`` / ``failed`` (with ``error``) /
``skipped`` (with ``reason``). ``--plan`` prints the parts with their time budgets and exits without a GPU.

Exit status: 0 every part ok or skipped; 1 a part failed (the others still ran); 2 no CUDA device; 3 a Python
dependency of the project is not importable (pydantic: carry its wheels, see ``scripts/gpu_check.sh``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_NO_GPU, EXIT_MISSING_DEP = 0, 1, 2, 3
REQUIRED = ("torch", "transformers", "safetensors", "peft", "pydantic", "tokenizers", "tqdm")


@dataclass(frozen=True)
class Part:
    name: str
    what: str
    budget_s: int  # planned wall time on an H100 (an allowance, not a measurement)
    module: str
    func: str


PARTS = (
    Part("rl", "RL steps of the mini model, arm tg, train_rl + hf_sampler engine, log-prob bound", 60,
         "repro.gpu_check_rl", "run_rl"),
    Part("throughput", "trainer tokens/s and MFU, ~0.5B Qwen3 (random init), bf16-mixed, packed", 90,
         "repro.gpu_check_parts", "run_throughput"),
    Part("kl", "chunked vs naive full-vocabulary KL, V=151,936, N=16,384 (time, peak memory)", 60,
         "repro.gpu_check_parts", "run_kl"),
    Part("lora", "one LoRA step of the ~0.5B model", 40, "repro.gpu_check_parts", "run_lora"),
    Part("fsdp", "FSDP2 on one rank (NCCL) through train_rl, activation checkpointing", 60,
         "repro.gpu_check_parts", "run_fsdp"),
    Part("vllm", "RL steps with a colocated vLLM engine (skipped without vLLM)", 150,
         "repro.gpu_check_rl", "run_vllm"),
)
BY_NAME = {p.name: p for p in PARTS}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m repro.gpu_check", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Parts: " + "; ".join(f"{x.name}: {x.what}" for x in PARTS)
                                + ". scripts/gpu_check.sh runs this on the lent GPU machine.")
    p.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu_check",
                   help="directory for gpu_check.json (default: $OUT, else runs/gpu_check)")
    p.add_argument("--work", default=None,
                   help="directory for the parts' training runs and checkpoints (default: a new temporary directory, "
                        "so $OUT receives only the JSON)")
    p.add_argument("--parts", default=",".join(x.name for x in PARTS),
                   help="comma-separated parts to run, in the fixed order (default: all)")
    p.add_argument("--plan", action="store_true", help="print the parts and their time budgets, run nothing")
    g = p.add_argument_group("rl / fsdp / vllm")
    g.add_argument("--steps", type=int, default=2, help="optimizer steps (default 2)")
    g.add_argument("--preset", choices=["nano", "mini"], default="mini", help="model preset (default mini)")
    g.add_argument("--groups", type=int, default=4)
    g.add_argument("--group-size", type=int, default=8)
    g.add_argument("--max-new-tokens", type=int, default=64, help="per assistant turn")
    g.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (default 0.7: not 1)")
    g.add_argument("--top-p", type=float, default=0.7,
                   help="top-p (default 0.7: not 1; a sampler reporting raw log-probs would be off by ≥ 0.3 nats)")
    g.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="bf16-mixed", help="the trainer's")
    g.add_argument("--max-mean-logprob-diff", type=float, default=0.02,
                   help="bound on the mean |sampler - trainer| log-prob difference, nats (default 0.02)")
    g.add_argument("--max-outside-nucleus", type=float, default=0.05,
                   help="bound on the share of sampled tokens outside the trainer's top-p nucleus (default 0.05: "
                        "a random model's near-uniform tail makes the nucleus edge sensitive to bf16 rounding)")
    g.add_argument("--vllm-dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    g = p.add_argument_group("throughput / lora")
    g.add_argument("--tokens", type=int, default=16384, help="tokens per packed step (default 16,384)")
    g.add_argument("--doc-tokens", type=int, default=2048, help="mean document length (default 2,048)")
    g.add_argument("--train-steps", type=int, default=4, help="timed steps after one warm-up (default 4)")
    g.add_argument("--layers", type=int, default=28, help="decoder layers of the 0.5B shape (default 28)")
    g.add_argument("--vocab", type=int, default=151936, help="vocabulary of the 0.5B shape (default 151,936)")
    g = p.add_argument_group("kl")
    g.add_argument("--kl-rows", type=int, default=16384, help="N (default 16,384)")
    g.add_argument("--kl-vocab", type=int, default=151936, help="V (default 151,936)")
    g.add_argument("--kl-hidden", type=int, default=2048, help="hidden size (default 2,048: the paper model's)")
    g.add_argument("--kl-chunk", type=int, default=1024, help="rows per chunk of the chunked KL (default 1,024)")
    return p


def chosen_parts(spec: str) -> list[Part]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in BY_NAME]
    if bad or not names:
        raise SystemExit(f"--parts {spec!r}: unknown part(s) {bad}; choose from {', '.join(BY_NAME)}")
    return [p for p in PARTS if p.name in names]


def plan_lines(parts: list[Part]) -> list[str]:
    lines = [f"{i}. {p.name:<10} ≤{p.budget_s:>4d} s  {p.what}" for i, p in enumerate(parts, 1)]
    return lines + [f"total budget {sum(p.budget_s for p in parts)} s (plus start-up)"]


def missing_dependencies() -> list[str]:
    out = []
    for name in REQUIRED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            out.append(f"{name} ({exc})")
    return out


def one_line(name: str, r: dict[str, Any]) -> str:
    """The part's printed line: its status and its main numbers."""
    st = r.get("status")
    if st != "ok":
        msg = str(r.get("error") or r.get("reason"))
        return f"[gpu_check] {name}: " + (msg if msg.startswith(f"{st}:") else f"{st}: {msg}")

    def g(key: str, fmt: str = ".3g") -> str:
        v = r.get(key)
        return "n/a" if v is None else format(v, fmt)

    if name in ("rl", "vllm"):
        return (f"[gpu_check] {name}: ok: {r['steps']} steps, {r['tokens']} tokens at {g('tokens_per_s', '.0f')} tok/s; "
                f"sampler vs trainer log-prob |diff| mean {g('mean_abs_logprob_diff')} max {g('max_abs_logprob_diff')}"
                f", outside nucleus {g('outside_nucleus_frac', '.2%')} (T={r['temperature']}, top-p={r['top_p']})")
    if name == "throughput":
        return (f"[gpu_check] throughput: ok: {r['params_total'] / 1e6:.0f}M params, {r['tokens_per_step']} tok/step, "
                f"{g('tokens_per_s', '.0f')} tok/s, MFU {g('mfu', '.1%')} of spec peak, "
                f"{g('frac_of_measured_matmul', '.1%')} of measured bf16 matmul")
    if name == "kl":
        def side(k: str) -> str:
            s = r[k]
            if s.get("out_of_memory"):
                return f"{k}: out of memory"
            mem = "n/a" if s.get("peak_bytes") is None else f"{s['peak_bytes'] / 2**30:.2f} GiB"
            return f"{k}: {s['s'] * 1000:.0f} ms, peak {mem}"
        return (f"[gpu_check] kl: ok: N={r['rows']} V={r['vocab']}: {side('chunked')}; {side('naive')}"
                + (f"; loss rel diff {r['loss_rel_diff']:.2e}" if "loss_rel_diff" in r else ""))
    if name == "lora":
        return (f"[gpu_check] lora: ok: {r['trainable_params'] / 1e6:.1f}M trainable, step {r['step_s']:.2f} s, "
                f"{r['adapters_moved']}/{r['adapters']} adapters moved, base unchanged")
    return f"[gpu_check] {name}: ok: " + ", ".join(f"{k}={v}" for k, v in r.items() if k in ("step_s", "loss"))


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_check.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return path


def run_parts(parts: list[Part], args: argparse.Namespace, out: Path, summary: dict[str, Any], *,
              device: str = "cuda", runner: Callable[[Part], Callable[..., dict[str, Any]]] | None = None,
              work: Path | None = None) -> int:
    """Run ``parts`` in order, each caught on its own (their runs under ``work``, default ``out``); print its line,
    record it, rewrite ``out/gpu_check.json``. Returns the exit status (:data:`EXIT_FAILED` when a part failed)."""
    status = EXIT_OK
    for part in parts:
        fn = runner(part) if runner else getattr(importlib.import_module(part.module), part.func)
        t0 = time.perf_counter()
        try:
            result = fn(args, work or out, device=device)
        except Exception as exc:  # noqa: BLE001 - recorded as the part's failure; the next part still runs
            traceback.print_exc()
            result = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        result["part_wall_s"] = time.perf_counter() - t0
        if result["status"] == "failed":
            status = EXIT_FAILED
        summary["parts"][part.name] = result
        print(one_line(part.name, result), flush=True)
        write_summary(out, summary)
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()
    return status


def environment() -> dict[str, Any]:
    import torch

    from repro.gpu_check_rl import package_version

    return {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            **{name: package_version(name) for name in ("transformers", "peft", "pydantic", "vllm")}}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    parts = chosen_parts(args.parts)
    if args.plan:
        print("\n".join(plan_lines(parts)))
        return EXIT_OK
    out = Path(args.out)
    missing = missing_dependencies()
    if missing:
        reason = ("not importable: " + "; ".join(missing) + ". Carry the wheels named in scripts/gpu_check.sh's "
                  "header (pydantic, pydantic-core, typing-inspection, annotated-types) in .whl/")
        print(f"[gpu_check] cannot run: {reason}", file=sys.stderr)
        write_summary(out, {"status": "missing_dependency", "reason": reason})
        return EXIT_MISSING_DEP
    import torch

    if not torch.cuda.is_available():
        reason = "no CUDA device (torch.cuda.is_available() is False); run this on a GPU machine"
        print(f"[gpu_check] cannot run: {reason}", file=sys.stderr)
        write_summary(out, {"status": "unavailable", "reason": reason})
        return EXIT_NO_GPU
    summary: dict[str, Any] = {"status": "running", "environment": environment(), "args": vars(args), "parts": {}}
    for line in plan_lines(parts):
        print(f"[gpu_check] plan: {line}", flush=True)
    import tempfile

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="tgsuite-gpu-check-"))
    summary["work"] = str(work)
    code = run_parts(parts, args, out, summary, work=work)
    summary["status"] = "ok" if code == EXIT_OK else "failed"
    path = write_summary(out, summary)
    print(f"[gpu_check] {summary['status']}: summary in {path}", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
