"""The RL parts of ``python -m repro.gpu_check``: RL steps of the ``mini`` model through the real
``repro.train.train_rl`` on one GPU, with the ``hf_sampler`` engine (part ``rl``) or a colocated vLLM engine (part
``vllm``), and the sampler-versus-trainer log-prob comparison both report.

The environment is a two-turn pure-Python one (no sandbox; a turn with a Markdown heading resolves the task), the
tokenizer is trained in-process on a few sentences and the model is freshly initialised: this checks the training
path on a GPU (engine, weight sync, version stamps, bf16-mixed trainer, teacher forward and KL term of arm ``tg``),
not learning. ``guidance.gating = "all_turns"`` puts a hint and KL rows on every turn: a random model's turns are
rarely judged failing, and a step without KL rows would not run the teacher at all.

Log-prob comparison (:class:`MeasuredEngine`): for every sampled token, the log-prob the engine reported against the
trainer's own forward of the same token under the request's sampling distribution (temperature, then top-p:
``harness.policies.sampling.sampling_logprobs``), with the weights of the version that sampled it, under the
trainer's precision. The check samples at temperature 0.7 and top-p 0.7 by default, where the processed
distribution differs from the model's raw softmax by at least log(1/0.7) ≈ 0.36 nats per token (the top-p
renormalisation alone; at T = 1 and top-p = 1 the two are equal, so a sampler reporting raw log-probs would pass
unnoticed), far above the bound of 0.02 nats. A token the trainer places outside its own top-p nucleus has
log-prob −inf there; such tokens are counted (``outside_nucleus``), not averaged. The part fails when the mean
absolute difference over the other tokens exceeds ``--max-mean-logprob-diff`` or the share outside the nucleus
exceeds ``--max-outside-nucleus``.
"""

from __future__ import annotations

import json
import time
from argparse import Namespace
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from harness.schema import Message, TaskInstance
    from repro.config import TrainConfig
    from repro.engine import RolloutEngine, TokenRequest, TokenResult
    from repro.rl_setup import EngineFactory, RLSetup
    from repro.rollout import EnvOutcome, StepOut
    from repro.vllm_engine import VLLMApi

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
        from harness.schema import Message

        return [Message(role="system", content="You are a coding agent."),
                Message(role="user", content=self.instance.problem_statement)]

    def step(self, text: str) -> StepOut:
        from harness.schema import Message
        from repro.rollout import StepOut

        self.texts.append(text)
        done = len(self.texts) >= 2
        return StepOut([] if done else [Message(role="tool", content="ok", tool_name="run_tests")], done)

    def outcome(self) -> EnvOutcome:
        from repro.rollout import EnvOutcome

        return EnvOutcome(resolved=any("#" in t for t in self.texts))

    def close(self) -> None:
        pass


@dataclass
class LogprobStats:
    """What :class:`MeasuredEngine` accumulated over a run (see the module docstring)."""

    precision: str
    tokens: int = 0
    generate_s: float = 0.0
    compared: int = 0
    outside_nucleus: int = 0
    max_diff: float = 0.0
    diff_sum: float = 0.0

    def add(self, engine_lp: torch.Tensor, trainer_lp: torch.Tensor) -> None:
        inside = torch.isfinite(trainer_lp)
        self.outside_nucleus += int((~inside).sum())
        diffs = (engine_lp[inside] - trainer_lp[inside]).abs()
        self.compared += int(diffs.numel())
        if diffs.numel():
            self.max_diff = max(self.max_diff, float(diffs.max()))
            self.diff_sum += float(diffs.sum())

    def summary(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "generate_s": self.generate_s,
                "tokens_per_s": self.tokens / self.generate_s if self.generate_s else None,
                "logprob_tokens_compared": self.compared, "outside_nucleus": self.outside_nucleus,
                "outside_nucleus_frac": self.outside_nucleus / self.tokens if self.tokens else None,
                "max_abs_logprob_diff": self.max_diff,
                "mean_abs_logprob_diff": self.diff_sum / self.compared if self.compared else None}

    def violations(self, max_mean: float, max_outside: float) -> list[str]:
        """The bounds this run broke (empty: within bounds); no compared token at all is a violation too."""
        s, out = self.summary(), []
        if not self.compared:
            out.append("no sampled token could be compared with the trainer")
        elif s["mean_abs_logprob_diff"] > max_mean:
            out.append(f"mean |sampler - trainer| log-prob difference {s['mean_abs_logprob_diff']:.4g} > {max_mean}")
        if self.tokens and s["outside_nucleus_frac"] > max_outside:
            out.append(f"{s['outside_nucleus_frac']:.2%} of sampled tokens lie outside the trainer's top-p nucleus "
                       f"(> {max_outside:.2%})")
        return out


@torch.no_grad()
def trainer_logprobs(model: torch.nn.Module, req: TokenRequest, ids: list[int], precision: str) -> torch.Tensor:
    """The trainer's log-prob of each sampled id under the request's sampling distribution (−inf: outside its
    top-p nucleus)."""
    from harness.policies.sampling import sampling_logprobs
    from repro.precision import autocast

    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    with autocast(precision, dev.type):  # type: ignore[arg-type]
        logits = model(input_ids=torch.tensor([list(req.prompt_ids) + ids], device=dev)).logits[0].float()
    model.train(was)
    n = len(req.prompt_ids)
    lp = sampling_logprobs(logits[n - 1:n - 1 + len(ids)], temperature=req.temperature, top_p=req.top_p)
    return lp.gather(1, torch.tensor(ids, device=dev)[:, None]).squeeze(1).cpu()


class MeasuredEngine:
    """A ``RolloutEngine`` that forwards to ``inner`` and records its speed and its log-probs against the trainer's
    (``model``: the weights of the version the engine samples with)."""

    def __init__(self, inner: RolloutEngine, model: torch.nn.Module, stats: LogprobStats) -> None:
        self.inner, self.model, self.stats = inner, model, stats

    def current_version(self) -> int:
        return self.inner.current_version()

    def set_version(self, version: int) -> None:
        self.inner.set_version(version)

    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        results = self.inner.generate(requests, generator=generator)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.stats.generate_s += time.perf_counter() - t0
        for req, res in zip(requests, results, strict=True):
            self.stats.tokens += len(res.ids)
            if res.ids:
                self.stats.add(torch.tensor(res.logprobs, dtype=torch.float32),
                               trainer_logprobs(self.model, req, res.ids, self.stats.precision))
        return results


def rl_config(args: Namespace, engine: str, device: str, out_sets: Sequence[str] = ()) -> TrainConfig:
    from repro.config import load_config

    return load_config(arm="tg", sets=[
        f"run.steps={args.steps}", "run.progress=false", f"rollout.groups={args.groups}",
        f"rollout.group_size={args.group_size}", "rollout.max_turns=2", f"rollout.max_new_tokens={args.max_new_tokens}",
        "rollout.max_context_tokens=1024", f"rollout.temperature={args.temperature}", f"rollout.top_p={args.top_p}",
        f"rollout.engine={engine}", f"model.device={device}", f"model.precision={args.precision}",
        f"vllm.dtype={args.vllm_dtype}", f"vllm.gpu_memory_utilization={args.gpu_memory_utilization}",
        "optim.lr=0.001", "optim.micro_batch=8", "guidance.gating=all_turns", *out_sets])


def rl_setup(cfg: TrainConfig, preset: str, engine_factory: EngineFactory) -> RLSetup:
    from harness.behaviour import get_checker, turn_verdicts
    from harness.schema import TaskInstance
    from repro.models import build_model
    from repro.rl_setup import RLSetup
    from repro.tokenizer import train_tokenizer

    tok = train_tokenizer(CORPUS, vocab_size=512, min_frequency=1)
    model = build_model(preset, len(tok), seed=0, pad_token_id=tok.pad_token_id,
                        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    checker = get_checker(cfg.reward.checker)
    tasks = [TaskInstance(instance_id=f"check-{i}", repo="check", base_commit="0", problem_statement=f"Fix bug {i}",
                          patch="", test_patch="", FAIL_TO_PASS=["t::x"], split="train") for i in range(8)]
    return RLSetup(tokenizer=tok, model=model, tasks=tasks, make_env=TwoTurnEnv,
                   checker=lambda msgs: list(turn_verdicts(checker, msgs)),
                   hint_text=lambda inst, turn, rng: "Reminder: format your reply to the user in Markdown.",
                   engine_factory=engine_factory)


def read_metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def run_rl(args: Namespace, out: Path, *, device: str = "cuda") -> dict[str, Any]:
    """Part ``rl``: ``--steps`` RL steps (arm tg) with the hf_sampler engine, measured (module docstring)."""
    from repro.rl_setup import default_engine
    from repro.train import train_rl

    cfg = rl_config(args, "hf_sampler", device)
    stats = LogprobStats(precision=cfg.model.precision)

    def factory(model: torch.nn.Module, pad_id: int) -> MeasuredEngine:
        return MeasuredEngine(default_engine(model, pad_id), model, stats)

    t0 = time.perf_counter()
    train_rl(cfg, out / "rl", setup=rl_setup(cfg, args.preset, factory))
    metrics = read_metrics(out / "rl")
    bad = stats.violations(args.max_mean_logprob_diff, args.max_outside_nucleus)
    return {"status": "failed" if bad else "ok", **({"error": "; ".join(bad)} if bad else {}),
            "steps": args.steps, "preset": args.preset, "arm": "tg", "engine": "hf_sampler",
            "temperature": args.temperature, "top_p": args.top_p, "precision": cfg.model.precision, **stats.summary(),
            "step_s": [m.get("time/step_s") for m in metrics], "loss_kl": [m.get("loss/kl") for m in metrics],
            "kl_tokens": [m.get("guidance/kl_tokens") for m in metrics],
            "peak_cuda_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
            "wall_s": time.perf_counter() - t0}


def run_vllm(args: Namespace, out: Path, *, api: VLLMApi | None = None, device: str = "cuda") -> dict[str, Any]:
    """Part ``vllm``: the same RL steps with ``rollout.engine = "vllm"`` (a colocated ``vllm.LLM``); ``skipped``
    when vLLM is not importable (never a failure)."""
    from repro.train import train_rl
    from repro.vllm_engine import VLLMRollouts, VLLMSettings, VLLMUnavailable, import_vllm

    if api is None:
        try:
            api = import_vllm()
        except VLLMUnavailable:
            return {"status": "skipped", "reason": "skipped: no vLLM"}
    cfg = rl_config(args, "vllm", device)
    stats = LogprobStats(precision=cfg.model.precision)

    class Measured(VLLMRollouts):
        build_s = 0.0

        def __call__(self, model: torch.nn.Module, pad_id: int) -> MeasuredEngine:  # type: ignore[override]
            t0, fresh = time.perf_counter(), self.engine is None
            engine = super().__call__(model, pad_id)
            if fresh:
                Measured.build_s = time.perf_counter() - t0
            return MeasuredEngine(engine, model, stats)

    factory = Measured(VLLMSettings.from_config(cfg), api=api)
    t0 = time.perf_counter()
    train_rl(cfg, out / "vllm", setup=rl_setup(cfg, args.preset, factory))
    engine = factory.engine
    assert engine is not None
    bad = stats.violations(args.max_mean_logprob_diff, args.max_outside_nucleus)
    return {"status": "failed" if bad else "ok", **({"error": "; ".join(bad)} if bad else {}),
            "steps": args.steps, "vllm_dtype": args.vllm_dtype, "temperature": args.temperature, "top_p": args.top_p,
            **stats.summary(), "engine_start_s": Measured.build_s, "weight_syncs": engine.syncs,
            "final_version": engine.current_version(),
            "staleness_max": [m.get("rollout/staleness_max") for m in read_metrics(out / "vllm")],
            "wall_s": time.perf_counter() - t0}


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
