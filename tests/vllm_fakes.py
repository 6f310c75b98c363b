"""A faithful CPU fake of the vLLM objects ``repro.vllm_engine`` uses, for the contract tests (vLLM needs CUDA).

What is copied from vLLM (v0.22-0.31, the gpu extra's range; names and defaults of ``vllm.SamplingParams``,
``vllm.outputs.RequestOutput`` / ``CompletionOutput``, ``vllm.logprobs.Logprob``):

- ``LLM(model=DIR, **engine_args)`` loads an HF directory; ``generate(prompts, sampling_params=..., use_tqdm=...)``
  takes ``{"prompt_token_ids": [...]}`` prompts and one ``SamplingParams`` or one per prompt (a length mismatch is
  an error), and returns one ``RequestOutput`` per prompt in order;
- ``SamplingParams`` is keyword-only and rejects unknown fields; ``detokenize=True`` with
  ``skip_tokenizer_init=True`` is an error, as in vLLM's input processor;
- the stop check runs in vLLM's order (``vllm/v1/core/sched/utils.py::check_stop``): the length cap first, then the
  EOS id unless ``ignore_eos``, then ``stop_token_ids`` (the stop token stays in ``token_ids``);
- ``CompletionOutput.logprobs`` is a list, one ``dict[token id -> Logprob]`` per output token, holding the sampled
  token (plus the top ``logprobs`` ids when > 0); ``logprobs_mode`` ``processed_logprobs`` gives the log-prob
  under the distribution sampled from (temperature, then top-p), ``raw_logprobs`` the model's log-softmax;
- the in-process model at ``llm.llm_engine.model_executor.driver_worker.model_runner.model`` has
  ``load_weights(iterable of (name, tensor))`` (unknown names raise), and ``llm.reset_prefix_cache()`` exists.

Sampling uses ``harness.policies.sampling`` with a generator seeded from ``SamplingParams.seed``, so the fake draws
exactly what our own engines would for that seed; that is a property of the fake, not of vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from harness.policies.sampling import draw, sampling_logprobs
from repro.vllm_engine import VLLMApi


@dataclass(frozen=True)
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool


@dataclass(kw_only=True)
class SamplingParams:
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True


class FakeRunnerModel:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.loaded: list[set[str]] = []

    def load_weights(self, weights: Any) -> set[str]:
        params = dict(self.model.named_parameters())
        done: set[str] = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name not in params:
                    raise KeyError(f"fake vLLM model has no parameter {name}")
                params[name].copy_(tensor.to(params[name].dtype))
                done.add(name)
        self.loaded.append(done)
        return done


class FakeLLM:
    def __init__(self, model: str, **engine_args: Any) -> None:
        self.engine_args = engine_args
        self.logprobs_mode = engine_args.get("logprobs_mode", "raw_logprobs")
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.runner = FakeRunnerModel(self.model)
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(
            driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=self.runner))))
        self.prefix_resets = 0
        self.calls: list[tuple[list[list[int]], list[SamplingParams]]] = []

    def reset_prefix_cache(self) -> bool:
        self.prefix_resets += 1
        return True

    def generate(self, prompts: list[dict[str, list[int]]], sampling_params: Any = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        ids = [list(p["prompt_token_ids"]) for p in prompts]
        self.calls.append((ids, list(params)))
        return [self._one(str(i), p, sp) for i, (p, sp) in enumerate(zip(ids, params, strict=True))]

    @torch.no_grad()
    def _one(self, rid: str, prompt: list[int], sp: SamplingParams) -> RequestOutput:
        if sp.detokenize and self.engine_args.get("skip_tokenizer_init"):
            raise ValueError("skip_tokenizer_init is True but detokenize is True; set detokenize=False")
        gen = torch.Generator().manual_seed(sp.seed if sp.seed is not None else 0)
        eos = self.model.config.eos_token_id
        max_len = self.engine_args.get("max_model_len") or 10**9
        toks: list[int] = []
        lps: list[dict[int, Logprob]] = []
        reason, stop_reason = None, None
        while reason is None:
            logits = self.model(input_ids=torch.tensor([prompt + toks])).logits[:, -1].float()
            processed = sampling_logprobs(logits, temperature=sp.temperature, top_p=sp.top_p)
            tok = int(draw(processed, gen)[0])
            shown = processed if self.logprobs_mode == "processed_logprobs" else torch.log_softmax(logits, -1)
            entry = {tok: Logprob(float(shown[0, tok]))}
            if sp.logprobs:
                for t in torch.topk(shown[0], sp.logprobs).indices.tolist():
                    entry.setdefault(int(t), Logprob(float(shown[0, t])))
            toks.append(tok)
            lps.append(entry)
            if len(toks) >= (sp.max_tokens or 10**9) or len(prompt) + len(toks) >= max_len:
                reason = "length"
            elif not sp.ignore_eos and tok == eos:
                reason = "stop"
            elif tok in (sp.stop_token_ids or ()):
                reason, stop_reason = "stop", tok
        comp = CompletionOutput(0, "", toks, sum(float(e[t].logprob) for e, t in zip(lps, toks, strict=True)),
                                lps if sp.logprobs is not None else None, reason, stop_reason)
        return RequestOutput(rid, None, prompt, None, [comp], True)


@dataclass
class FakeVLLM:
    """``VLLMApi`` over the fakes, remembering every LLM it built."""

    built: list[FakeLLM] = field(default_factory=list)

    def llm(self, model: str, **kwargs: Any) -> FakeLLM:
        out = FakeLLM(model, **kwargs)
        self.built.append(out)
        return out

    def api(self) -> VLLMApi:
        return VLLMApi(self.llm, SamplingParams)
