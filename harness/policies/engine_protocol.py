"""The one rollout-engine protocol of the project: prompt token ids in; sampled ids, behaviour log-probs, finish
reason and the policy version of the weights out. Nothing is ever re-tokenised.

``RolloutEngine.generate(requests, generator=...)`` takes :class:`TokenRequest` records and returns one
:class:`TokenResult` per request. It lives here, in the harness, because the evaluation policies of the harness
(``harness.policies.hf.HFPolicy`` over ``harness.policies.hf_engine.HFChatEngine``) and the training samplers of
``repro`` (``repro.engine`` re-exports these names; ``repro.sampler.KVSampler``, ``repro.engine.HFEngine``,
``repro.batching.BatchingEngine``) all implement it, and the harness may not import ``repro``.

The records are plain frozen dataclasses and the module imports no torch at run time (``torch.Generator`` appears
only in the annotation), so it can be imported without an accelerator stack. The version stamp is whatever the
owner set with ``set_version``; an engine never changes it by itself. Not covered: the sampling distribution
(``harness.policies.sampling``). ``repro.vllm_engine.VLLMEngine`` implements it over a colocated vLLM engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotation only: this module stays importable without torch
    import torch

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class TokenRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    stop_ids: tuple[int, ...] = ()
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass(frozen=True)
class TokenResult:
    ids: list[int]                  # sampled ids, including the stop token when finish_reason == "stop"
    logprobs: list[float]           # behaviour log-prob of each sampled id
    finish_reason: FinishReason
    version: int                    # policy version of the weights that sampled every token
    info: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class RolloutEngine(Protocol):
    """What the RL loop and the evaluation policies need from an inference engine (ours now, vLLM at scale)."""

    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]: ...

    def current_version(self) -> int: ...

    def set_version(self, version: int) -> None: ...
