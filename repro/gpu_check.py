"""``python -m repro.gpu_check``: two RL steps of a small model with vLLM rollouts on one GPU (``scripts/gpu_check.sh``).

It runs the real training loop (``repro.train.train_rl``, the trainer on one rank) with ``rollout.engine = "vllm"``
(``repro.vllm_engine``), a freshly initialised model of the ``mini`` preset, a tokenizer trained in-process on a
few sentences, and a two-turn pure-Python environment (no sandbox; the reward is whether a turn contains a Markdown
heading). The environment only gives the loop something to score: this checks the engine path (build, weight sync
after each optimizer step, version stamps, log-probs), not learning.

Measured and printed (and written to ``OUT/gpu_check.json``): generated tokens per second of the vLLM engine (all
``generate`` calls of the run, weight transfers included, the engine's start excluded), and the largest absolute
difference between the log-prob vLLM reported for each sampled token and the trainer's log-prob of the same token
(its own forward, at the request's temperature and top-p, under the trainer's precision, with the weights of the
version that sampled it). Exit status: 0 done, 2 no CUDA device or no vLLM (the JSON says which), 1 a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from harness.policies.engine_protocol import TokenRequest, TokenResult
from harness.policies.sampling import sampling_logprobs
from harness.schema import Message, TaskInstance
from repro.precision import autocast
from repro.rollout import EnvOutcome, StepOut
from repro.vllm_engine import VLLMApi, VLLMEngine, VLLMRollouts, VLLMSettings, VLLMUnavailable, import_vllm

CORPUS = [
    "You are a coding agent. Fix the bug in the repository and call finish with a summary.",
    "# Summary\n- fixed `add` in `calc.py`\n- ran the tests and they pass",
    "<think>\nlook at calc.py first\n</think>\n<tool_call>\n{\"name\": \"finish\", \"arguments\": {}}\n</tool_call>",
    "Reminder: format your reply to the user in Markdown.",
    "ok. tests passed. the bug was an off by one error in the loop over the items.",
] * 20


class TwoTurnEnv:
    """Two assistant turns; resolved iff some turn has a Markdown heading (``#``)."""

    def __init__(self, instance: TaskInstance, seed: int) -> None:
        self.instance, self.texts = instance, []

    def reset(self) -> list[Message]:
        return [Message(role="system", content="You are a coding agent."),
                Message(role="user", content=self.instance.problem_statement)]

    def step(self, text: str) -> StepOut:
        self.texts.append(text)
        done = len(self.texts) >= 2
        return StepOut([] if done else [Message(role="tool", content="ok", tool_name="run_tests")], done)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(resolved=any("#" in t for t in self.texts))

    def close(self) -> None:
        pass


class MeasuredEngine:
    """A ``RolloutEngine`` that forwards to a :class:`VLLMEngine` and measures its speed and its log-probs against
    the trainer's (``model``: the weights of the version the engine samples with)."""

    def __init__(self, inner: VLLMEngine, model: torch.nn.Module, sink: MeasuredRollouts) -> None:
        self.inner, self.model, self.sink = inner, model, sink

    def current_version(self) -> int:
        return self.inner.current_version()

    def set_version(self, version: int) -> None:
        self.inner.set_version(version)

    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]:
        t0 = time.perf_counter()
        results = self.inner.generate(requests, generator=generator)
        self.sink.generate_s += time.perf_counter() - t0
        for req, res in zip(requests, results, strict=True):
            self.sink.tokens += len(res.ids)
            diffs = (torch.tensor(res.logprobs) - trainer_logprobs(self.model, req, res.ids, self.sink.precision)).abs()
            self.sink.max_diff = max(self.sink.max_diff, float(diffs.max()))
            self.sink.diff_sum += float(diffs.sum())
        return results


@torch.no_grad()
def trainer_logprobs(model: torch.nn.Module, req: TokenRequest, ids: list[int], precision: Any) -> torch.Tensor:
    """The trainer's log-prob of each sampled id under the request's sampling distribution."""
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    with autocast(precision, dev.type):
        logits = model(input_ids=torch.tensor([list(req.prompt_ids) + ids], device=dev)).logits[0].float()
    model.train(was)
    n = len(req.prompt_ids)
    lp = sampling_logprobs(logits[n - 1:n - 1 + len(ids)], temperature=req.temperature, top_p=req.top_p)
    return lp.gather(1, torch.tensor(ids, device=dev)[:, None]).squeeze(1).cpu()


class MeasuredRollouts(VLLMRollouts):
    """``VLLMRollouts`` whose engines report to this object (tokens, seconds, log-prob differences)."""

    def __init__(self, settings: VLLMSettings, *, precision: Any, api: VLLMApi | None = None) -> None:
        super().__init__(settings, api=api)
        self.precision = precision
        self.tokens, self.generate_s, self.build_s, self.max_diff, self.diff_sum = 0, 0.0, 0.0, 0.0, 0.0

    def __call__(self, model: torch.nn.Module, pad_id: int) -> MeasuredEngine:  # type: ignore[override]
        t0 = time.perf_counter()
        fresh = self.engine is None
        engine = super().__call__(model, pad_id)
        if fresh:
            self.build_s = time.perf_counter() - t0
        return MeasuredEngine(engine, model, self)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m repro.gpu_check", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Needs a CUDA GPU and vLLM (pip install -e '.[gpu]'); scripts/gpu_check.sh "
                                       "installs them in .venv-gpu and runs this.")
    p.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu_check",
                   help="directory for the training run and gpu_check.json (default: $OUT, else runs/gpu_check)")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps (default 2)")
    p.add_argument("--preset", choices=["nano", "mini"], default="mini", help="model preset (default mini)")
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64, help="per assistant turn")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16", help="vLLM's dtype")
    p.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="bf16-mixed", help="the trainer's")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    return p


def build_setup(args: argparse.Namespace, api: VLLMApi | None, device: str) -> tuple[Any, Any, MeasuredRollouts]:
    from harness.behaviour import get_checker, turn_verdicts
    from repro.config import load_config
    from repro.models import build_model
    from repro.tokenizer import train_tokenizer
    from repro.wiring import RLSetup

    cfg = load_config(arm="tg", sets=[
        f"run.steps={args.steps}", "run.progress=false", f"rollout.groups={args.groups}",
        f"rollout.group_size={args.group_size}", "rollout.max_turns=2", f"rollout.max_new_tokens={args.max_new_tokens}",
        "rollout.max_context_tokens=1024", "rollout.engine=vllm", f"model.device={device}",
        f"model.precision={args.precision}", f"vllm.dtype={args.dtype}",
        f"vllm.gpu_memory_utilization={args.gpu_memory_utilization}", "optim.lr=0.001", "optim.micro_batch=8"])
    tok = train_tokenizer(CORPUS, vocab_size=512, min_frequency=1)
    model = build_model(args.preset, len(tok), seed=0, pad_token_id=tok.pad_token_id,
                        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    checker = get_checker(cfg.reward.checker)
    tasks = [TaskInstance(instance_id=f"check-{i}", repo="check", base_commit="0", problem_statement=f"Fix bug {i}",
                          patch="", test_patch="", FAIL_TO_PASS=["t::x"], split="train") for i in range(8)]
    factory = MeasuredRollouts(VLLMSettings.from_config(cfg), precision=cfg.model.precision, api=api)
    setup = RLSetup(tokenizer=tok, model=model, tasks=tasks, make_env=TwoTurnEnv,
                    checker=lambda msgs: list(turn_verdicts(checker, msgs)),
                    hint_text=lambda inst, turn, rng: "Reminder: format your reply to the user in Markdown.",
                    engine_factory=factory)
    return cfg, setup, factory


def run_check(args: argparse.Namespace, *, api: VLLMApi | None = None, device: str = "cuda") -> dict[str, Any]:
    """Two (``--steps``) RL steps with vLLM rollouts; the summary (see the module docstring)."""
    from repro.train import train_rl

    t0 = time.perf_counter()
    cfg, setup, factory = build_setup(args, api, device)
    train_rl(cfg, Path(args.out) / "run", setup=setup)
    engine = factory.engine
    assert engine is not None
    metrics = [json.loads(x) for x in (Path(args.out) / "run" / "metrics.jsonl").read_text().splitlines()]
    return {
        "status": "ok", "steps": args.steps, "preset": args.preset, "vllm_dtype": args.dtype,
        "trainer_precision": args.precision, "device": torch.cuda.get_device_name(0) if device == "cuda" else device,
        "vllm": package_version("vllm"), "torch": torch.__version__,
        "tokens": factory.tokens, "generate_s": factory.generate_s, "engine_start_s": factory.build_s,
        "tokens_per_s": factory.tokens / factory.generate_s if factory.generate_s else None,
        "max_abs_logprob_diff": factory.max_diff,
        "mean_abs_logprob_diff": factory.diff_sum / factory.tokens if factory.tokens else None,
        "weight_syncs": engine.syncs, "final_version": engine.current_version(),
        "staleness_max": [m.get("rollout/staleness_max") for m in metrics],
        "wall_s": time.perf_counter() - t0,
    }


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_check.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Path(args.out)
    try:
        import_vllm()
        if not torch.cuda.is_available():
            raise VLLMUnavailable("no CUDA device (torch.cuda.is_available() is False); run this on a GPU machine")
    except VLLMUnavailable as exc:
        print(f"gpu_check: cannot run: {exc}", file=sys.stderr)
        write_summary(out, {"status": "unavailable", "reason": str(exc)})
        return 2
    try:
        summary = run_check(args)
    except Exception as exc:  # noqa: BLE001 - reported in the summary and on stderr, exit 1
        traceback.print_exc()
        write_summary(out, {"status": "failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    path = write_summary(out, summary)
    print(f"gpu_check: {summary['steps']} RL steps with vLLM rollouts on {summary['device']}: "
          f"{summary['tokens']} tokens in {summary['generate_s']:.2f} s = {summary['tokens_per_s']:.0f} tokens/s "
          f"(engine start {summary['engine_start_s']:.1f} s); largest |sampler - trainer| log-prob difference "
          f"{summary['max_abs_logprob_diff']:.4g} (mean {summary['mean_abs_logprob_diff']:.3g}); "
          f"{summary['weight_syncs']} weight syncs; summary in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
