"""``HFChatEngine``: the ``RolloutEngine`` (``harness.policies.engine_protocol``) behind ``HFPolicy``.

Any transformers causal LM, one sequence at a time through the model's own KV cache. ``generate`` takes
``TokenRequest`` records (prompt ids, ``max_new_tokens``, stop ids, temperature, top-p) and returns one
``TokenResult`` each: the sampled ids (the stop id included when one was sampled), their behaviour log-probs, the
finish reason (``stop`` or ``length``) and the version stamp set with ``set_version``. The requests of one call
are decoded in order and draw from the one ``generator``, so a (prompts, generator state) pair is reproducible on
the same device.

Sampling (:func:`sample_token`): ``temperature=0`` is greedy; otherwise ``harness.policies.sampling`` (the one
distribution of the project) with the request's temperature and top-p and the engine's ``top_k``. Log-probs:
``logprobs_mode="sampling"`` gives those of the distribution actually sampled from, ``"raw"`` the model's
log-softmax (always used for greedy decoding).

Not covered: batching several sequences (``repro.engine.HFEngine`` and ``repro.sampler.KVSampler`` batch),
speculative decoding, multi-GPU sharding.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Literal

import torch

from harness.policies.engine_protocol import FinishReason, TokenRequest, TokenResult
from harness.policies.sampling import draw, sampling_logprobs

LogprobsMode = Literal["sampling", "raw"]


def sample_token(
    logits: torch.Tensor,
    generator: torch.Generator,
    *,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    logprobs_mode: LogprobsMode = "sampling",
) -> tuple[int, float]:
    """Sample one id from 1-D ``logits``; returns (id, log-prob) as described in the module docstring."""
    logits = logits.float()
    raw = torch.log_softmax(logits, dim=-1)
    if temperature == 0:
        tok = int(torch.argmax(logits))
        return tok, float(raw[tok])
    logp = sampling_logprobs(logits, temperature=temperature, top_p=top_p, top_k=top_k)
    tok = int(draw(logp[None], generator)[0])  # on the generator's device (harness.policies.sampling.draw)
    return tok, float(logp[tok] if logprobs_mode == "sampling" else raw[tok])


class HFChatEngine:
    """A transformers causal LM as a ``RolloutEngine`` (see the module docstring). Not thread-safe."""

    thread_safe = False

    def __init__(self, model: torch.nn.Module, *, top_k: int = 0, logprobs_mode: LogprobsMode = "sampling",
                 version: int = 0) -> None:
        if top_k < 0:
            raise ValueError(f"HFChatEngine: top_k must be >= 0 (got {top_k}); pass 0 for no top-k filter")
        self.model, self.top_k, self.logprobs_mode, self.version = model, top_k, logprobs_mode, version
        # transformers >= 5.x names the KV cache argument ``cache`` (``past_key_values`` is deprecated there)
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"

    def current_version(self) -> int:
        return self.version

    def set_version(self, version: int) -> None:
        self.version = version

    @torch.no_grad()
    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]:
        if not requests:
            raise ValueError("HFChatEngine.generate: no requests; pass at least one TokenRequest")
        return [self._one(r, generator) for r in requests]

    def _one(self, req: TokenRequest, gen: torch.Generator) -> TokenResult:
        if req.max_new_tokens < 1 or not req.prompt_ids:
            raise ValueError(f"HFChatEngine.generate: need prompt ids and max_new_tokens >= 1 "
                             f"(got {len(req.prompt_ids)} ids, max_new_tokens={req.max_new_tokens})")
        device = next(self.model.parameters()).device
        out = self.model(input_ids=torch.tensor([list(req.prompt_ids)], device=device), use_cache=True)
        ids: list[int] = []
        lps: list[float] = []
        reason: FinishReason = "length"
        for _ in range(req.max_new_tokens):
            tok, lp = sample_token(out.logits[0, -1].to("cpu"), gen, temperature=req.temperature, top_p=req.top_p,
                                   top_k=self.top_k, logprobs_mode=self.logprobs_mode)
            ids.append(tok)
            lps.append(lp)
            if tok in req.stop_ids:
                reason = "stop"
                break
            if len(ids) == req.max_new_tokens:
                break
            cache = getattr(out, self.cache_kw, None)
            out = self.model(input_ids=torch.tensor([[tok]], device=device), use_cache=True, **{self.cache_kw: cache})
        return TokenResult(ids, lps, reason, self.version)
