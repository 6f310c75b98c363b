"""``HFPolicy``: any transformers causal LM with its chat template, sampled locally with a KV cache.

Rendering: ``tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)``; assistant turns
are passed as ``{"role": "assistant", "content": <text>}`` with their ``<think>``/``<tool_call>`` markup verbatim
(no ``tool_calls`` field, so the template does not render calls twice); tool observations as ``role: tool``;
hints as ``role: user``.

Sampling: one ``torch.Generator`` seeded from ``rng.getrandbits(63)`` per turn, so a (policy, messages, rng state)
triple is reproducible on the same device. ``temperature=0`` is greedy. ``top_k``/``top_p`` filter the
temperature-scaled distribution and renormalise it (``harness.policies.sampling``: the one sampling
distribution of the project, shared with the training samplers).

Generation goes through the one engine protocol (``harness.policies.engine_protocol.RolloutEngine``):
``HFPolicy.engine`` is an ``harness.policies.hf_engine.HFChatEngine`` over the model, asked with one
``TokenRequest`` per turn; its ``TokenResult`` gives the ids, log-probs, finish reason and version stamp
(``version=`` at construction, ``policy.engine.set_version`` later), returned as ``PolicyOutput.policy_version``.

Returned ``token_ids`` are the sampled completion including the stop token (``<|im_end|>`` / eos) when one was
sampled; ``logprobs`` are their behaviour log-probabilities under the distribution actually sampled from
(``logprobs_mode="sampling"``: after temperature, top-k and top-p; at T=1 and no filtering this is the model's
log-softmax) or the model's raw log-softmax (``logprobs_mode="raw"``; always used for greedy decoding).
``finish_reason``: ``stop`` (a stop token), ``length`` (``max_new_tokens``), ``context`` (the prompt plus the
completion reached ``max_context``; ``run_episode`` records a ``context`` limit).

Not covered: batching several conversations, speculative decoding, multi-GPU sharding (use ``OpenAIPolicy`` with
``vllm serve`` for that).
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.interfaces import PolicyOutput
from harness.policies.engine_protocol import RolloutEngine, TokenRequest
from harness.policies.hf_engine import HFChatEngine, LogprobsMode, sample_token
from harness.schema import Message

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["HFPolicy", "sample_token", "to_chat"]

log = logging.getLogger(__name__)


CHECKPOINT_FILES = ("config.json", "generation_config.json", "model*.safetensors", "model*.safetensors.index.json",
                    "pytorch_model*.bin", "pytorch_model*.bin.index.json", "tokenizer*", "special_tokens_map.json",
                    "added_tokens.json", "vocab*", "merges.txt", "chat_template*")
"""What ``from_pretrained`` reads from a checkpoint directory: weights, config, tokenizer and chat template."""


def checkpoint_sha256(path: str | Path) -> str:
    """sha256 over the names and contents of the ``CHECKPOINT_FILES`` of a checkpoint directory (recorded as the
    arm's ``checkpoint_sha256``: a resume after the directory was trained again is refused)."""
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if f.is_file() and any(fnmatch.fnmatchcase(f.name, g) for g in CHECKPOINT_FILES):
            h.update(f.name.encode() + b"\0")
            with f.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()


def to_chat(messages: list[Message]) -> list[dict[str, Any]]:
    """Harness messages as chat-template dicts (role + content; see the module docstring)."""
    return [{"role": m.role, "content": m.content} for m in messages]


class HFPolicy:
    """A transformers causal LM as a ``harness.interfaces.Policy`` (see the module docstring).

    Not thread-safe (one model, sequential decoding): runners serialise calls to it."""

    thread_safe = False

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str = "hf",
        max_new_tokens: int = 1024,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_context: int | None = None,
        logprobs_mode: LogprobsMode = "sampling",
        chat_template_kwargs: dict[str, Any] | None = None,
        version: int = 0,
    ) -> None:
        if temperature < 0 or not 0 < top_p <= 1 or top_k < 0 or max_new_tokens < 1:
            raise ValueError(
                "HFPolicy: need temperature >= 0, 0 < top_p <= 1, top_k >= 0 and max_new_tokens >= 1 "
                f"(got {temperature}, {top_p}, {top_k}, {max_new_tokens})"
            )
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(f"HFPolicy {name}: the tokenizer has no chat_template; save one with the checkpoint")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.spec: str | None = None  # the command-line spec, set by from_pretrained
        self.checkpoint_sha256: str | None = None  # of the directory's files, set by from_pretrained
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.logprobs_mode = logprobs_mode
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        cfg_ctx = getattr(model.config, "max_position_embeddings", None)
        self.max_context = int(max_context or cfg_ctx or 32_768)
        self.stop_ids = self._stop_ids()
        self.engine: RolloutEngine = HFChatEngine(self.model, top_k=top_k, logprobs_mode=logprobs_mode,
                                                  version=version)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str | None = None, **kwargs: object) -> HFPolicy:
        """Load a checkpoint directory (``save_pretrained`` layout with its tokenizer)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        p = Path(path)
        if not (p / "config.json").is_file():
            raise FileNotFoundError(
                f"{p}: no config.json here; pass a checkpoint directory written by save_pretrained "
                "(e.g. runs/train/checkpoints/step_200)"
            )
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        tok = AutoTokenizer.from_pretrained(p)
        model = AutoModelForCausalLM.from_pretrained(p).to(device)
        kwargs.setdefault("name", f"hf:{p}")
        policy = cls(model, tok, **kwargs)
        policy.spec = f"hf:{p}"
        policy.checkpoint_sha256 = checkpoint_sha256(p)
        return policy

    def generation_settings(self) -> dict[str, Any]:
        """What every turn samples with (recorded per arm in the run manifest; a resume with other values is
        refused)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "max_tokens": self.max_new_tokens, "max_context": self.max_context,
                "logprobs_mode": self.logprobs_mode,
                **({"chat_template_kwargs": repr(sorted(self.chat_template_kwargs.items()))}
                   if self.chat_template_kwargs else {})}

    def _stop_ids(self) -> set[int]:
        ids: set[int] = set()
        for tok in ("<|im_end|>", "<|endoftext|>", self.tokenizer.eos_token):
            if tok:
                tid = self.tokenizer.convert_tokens_to_ids(tok)
                if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                    ids.add(tid)
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        if not ids:
            raise ValueError(f"HFPolicy {self.name}: the tokenizer defines no <|im_end|> or eos token to stop on")
        return ids

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        """Prompt token ids for the next assistant turn."""
        out = self.tokenizer.apply_chat_template(
            to_chat(messages), tools=tools or None, add_generation_prompt=True, tokenize=True,
            **self.chat_template_kwargs,
        )
        if isinstance(out, dict) or hasattr(out, "input_ids"):  # BatchEncoding in newer transformers
            out = out["input_ids"]
        return list(out)

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        prompt = self.render(messages, tools)
        gen = torch.Generator(device="cpu").manual_seed(rng.getrandbits(63))
        budget = min(self.max_new_tokens, self.max_context - len(prompt))
        if budget <= 0:
            return PolicyOutput(text="", token_ids=[], logprobs=[], finish_reason="context",
                                info={"prompt_tokens": len(prompt)})
        req = TokenRequest(prompt, budget, stop_ids=tuple(sorted(self.stop_ids)), temperature=self.temperature,
                           top_p=self.top_p)
        res = self.engine.generate([req], generator=gen)[0]
        # the engine stops at the budget ("length"); a budget cut short by max_context is a context limit
        reason = "context" if res.finish_reason == "length" and budget < self.max_new_tokens else res.finish_reason
        body = res.ids[:-1] if res.finish_reason == "stop" else res.ids
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        return PolicyOutput(text=text, token_ids=list(res.ids), logprobs=list(res.logprobs), finish_reason=reason,
                            policy_version=res.version, info={"prompt_tokens": len(prompt)})
