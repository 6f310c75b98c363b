"""The one rollout-engine protocol, re-exported for ``repro``, and :class:`HFEngine`, its generic implementation.

The protocol (``TokenRequest``, ``TokenResult``, ``FinishReason``, ``RolloutEngine``) is defined in
``harness.policies.engine_protocol`` (the harness's evaluation policies implement it too, and the harness may not
import ``repro``); it is imported and re-exported here, so ``from repro.engine import TokenRequest`` keeps working.
Prompt token ids in; sampled ids, behaviour log-probs, finish reason and the policy version of the weights out.
Nothing is ever re-tokenised.

``RolloutEngine.generate(requests, generator=...)`` takes :class:`TokenRequest` records and returns one
:class:`TokenResult` per request. Every sampler of the project implements it, and every caller uses it:

- ``repro.sampler.KVSampler`` — the KV-cached batched engine for dense Qwen3 models (training rollouts and
  evaluation; ``repro.batching.BatchingEngine`` wraps it for concurrent episode threads);
- :class:`HFEngine` (this file) — any transformers causal LM through its own forward and KV cache (training
  rollouts of non-Qwen3 models);
- ``harness.policies.hf_engine.HFChatEngine`` — the one-conversation engine behind ``HFPolicy`` (``hf:<dir>``);
- ``repro.vllm_engine.VLLMEngine`` — a colocated ``vllm.LLM`` (``rollout.engine = "vllm"``; SCALE.md §2.1);
- ``repro.vllm_http.HttpEngine`` — external ``vllm serve`` processes over HTTP (``rollout.engine = "vllm_http"``;
  SCALE.md §2.2);
- callers: ``repro.rollout.run_groups`` (training and self-distillation rollouts; it stores each turn's
  ``finish_reason`` and ``version`` in the ``RolloutSample``), ``repro.sampler.SamplerPolicy`` and
  ``harness.policies.hf.HFPolicy`` (the evaluation policies; ``PolicyOutput.finish_reason`` and
  ``PolicyOutput.policy_version``, which the agent loop records on each assistant ``Message``).

The version stamp is whatever the owner set with ``set_version`` (the trainer sets the optimizer step whose weights
the engine reads); an engine never changes it by itself. Log-probs are those of the distribution actually sampled
from (``harness.policies.sampling.sampling_logprobs``: temperature, then top-p). Not covered: top-k in training rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.policies.engine_protocol import FinishReason, RolloutEngine, TokenRequest, TokenResult
from harness.policies.sampling import draw, sampling_logprobs

__all__ = ["FinishReason", "HFEngine", "RolloutEngine", "TokenRequest", "TokenResult", "uniform_settings"]


def uniform_settings(requests: Sequence[TokenRequest]) -> tuple[float, float]:
    """The (temperature, top_p) shared by every request of a batch; a clear error when they differ."""
    if not requests:
        raise ValueError("generate: no requests; pass at least one TokenRequest")
    temps = {r.temperature for r in requests}
    top_ps = {r.top_p for r in requests}
    if len(temps) > 1 or len(top_ps) > 1:
        raise ValueError(f"HFEngine.generate: one temperature and top_p per batch (got temperatures "
                         f"{sorted(temps)}, top_p {sorted(top_ps)}); split the batch or use KVSampler")
    return temps.pop(), top_ps.pop()


class HFEngine:
    """Left-padded batched sampling with a transformers model's own KV cache; returns ids (up to and including a
    stop id) and the behaviour log-prob of each sampled token under the distribution actually sampled from
    (after temperature and top-p, vLLM's ``processed_logprobs``). One temperature and top-p per batch."""

    def __init__(self, model: torch.nn.Module, pad_id: int, *, version: int = 0) -> None:
        self.model, self.pad_id, self.version = model, pad_id, version

    def current_version(self) -> int:
        return self.version

    def set_version(self, version: int) -> None:
        self.version = version

    @torch.no_grad()
    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]:
        temperature, top_p = uniform_settings(requests)
        contexts = [r.prompt_ids for r in requests]
        b, width = len(contexts), max(len(c) for c in contexts)
        limits = [r.max_new_tokens for r in requests]
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        att = torch.zeros((b, width), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, width - len(c):] = torch.tensor(list(c), dtype=torch.long)
            att[i, width - len(c):] = 1
        dev = next(self.model.parameters()).device
        ids, att = ids.to(dev), att.to(dev)
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
        done = [False] * b
        reason: list[FinishReason] = ["length"] * b
        toks: list[list[int]] = [[] for _ in range(b)]
        lps: list[list[float]] = [[] for _ in range(b)]
        for _ in range(max(limits)):
            logp = sampling_logprobs(logits.float(), temperature=temperature, top_p=top_p)
            tok = draw(logp, generator)  # drawn on the generator's device, returned on dev
            chosen = logp.gather(1, tok[:, None]).squeeze(1)
            for i in range(b):
                if done[i]:
                    continue
                toks[i].append(int(tok[i]))
                lps[i].append(float(chosen[i]))
                if toks[i][-1] in requests[i].stop_ids:
                    done[i], reason[i] = True, "stop"
                elif len(toks[i]) >= limits[i]:
                    done[i] = True
            if all(done):
                break
            att = torch.cat([att, torch.ones((b, 1), dtype=torch.long, device=dev)], dim=1)
            pos = pos[:, -1:] + 1
            out = self.model(input_ids=tok[:, None], attention_mask=att, position_ids=pos, past_key_values=past,
                             use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1]
        return [TokenResult(toks[i], lps[i], reason[i], self.version) for i in range(b)]
