"""Tiny Qwen3-architecture causal LMs built from a config (no weights are downloaded, ever).

Presets (``build_model(preset, vocab_size, seed=...)``):

- ``nano``: for tests. 2 layers, d=64, 4 query / 2 KV heads (head_dim 16), MLP 128; < 1M parameters at
  vocab <= 4k. A forward+backward over 512 tokens takes milliseconds on one CPU core.
- ``mini``: the CPU reproduction. 4 layers, d=256, 4 query / 2 KV heads (head_dim 64), MLP 768, tied embeddings
  (the same parameters as 8 × 32 heads; head_dim 64 was 1.2x cheaper per training token on this CPU, issue #20);
  ≈ 4.2 M parameters at vocab 4,096. Measured on the 2-core CPU machine: forward+backward ≈ 745 tokens/s on a
  1,024-token sequence (2 threads, lightly loaded); ≈ 170–190 tokens/s during SFT on ~2.5k-token trajectories
  when the machine was shared with other jobs (1 thread). One SFT epoch over 120 expert trajectories (≈ 300k
  tokens) is therefore ≈ 7 min unloaded, ≈ 27 min loaded. Sampling: ``benchmarks/sampler_bench.py``.

Everything is a ``transformers.Qwen3Config`` → ``Qwen3ForCausalLM`` (RMSNorm, q/k-norm, RoPE, GQA, SwiGLU), so
checkpoints load anywhere transformers runs and the paper-scale path only changes the config.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

log = logging.getLogger(__name__)

Preset = Literal["nano", "mini"]


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = True
    rope_theta: float = 10_000.0


PRESETS: dict[str, ModelShape] = {
    "nano": ModelShape(64, 2, 4, 2, 16, 128, 8192),
    "mini": ModelShape(256, 4, 4, 2, 64, 768, 16384),
}


def make_config(preset: Preset, vocab_size: int, *, pad_token_id: int = 0, eos_token_id: int = 2) -> Qwen3Config:
    """A ``Qwen3Config`` for ``preset`` with the tokenizer's vocabulary size (``len(tokenizer)``)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {sorted(PRESETS)}.")
    if vocab_size < 8:
        raise ValueError(f"vocab_size={vocab_size} is not a real vocabulary; pass len(tokenizer).")
    s = asdict(PRESETS[preset])
    rope_theta = s.pop("rope_theta")
    cfg = Qwen3Config(
        vocab_size=vocab_size, **s, rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0,
        hidden_act="silu", use_cache=True, pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta}, initializer_range=0.02,
        use_sliding_window=False,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


def build_model(preset: Preset, vocab_size: int, *, seed: int, pad_token_id: int = 0,
                eos_token_id: int = 2) -> Qwen3ForCausalLM:
    """Randomly initialised ``Qwen3ForCausalLM``; initialisation uses only ``torch.Generator(seed)`` via
    ``torch.random.fork_rng`` so the global RNG stream is left untouched."""
    cfg = make_config(preset, vocab_size, pad_token_id=pad_token_id, eos_token_id=eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg)
    model.eval()
    log.info("built %s Qwen3 model: %.2fM params", preset, count_params(model) / 1e6)
    return model


def count_params(model: torch.nn.Module) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def lm_head_weight(model: Qwen3ForCausalLM) -> torch.Tensor:
    """The [V, d] output projection used by the chunked KL (tied to the embedding in our presets)."""
    return model.get_output_embeddings().weight


def final_hidden_states(model: Qwen3ForCausalLM, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Final-norm hidden states [B, T, d] (the inputs of ``lm_head``), without computing logits."""
    out = model.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return out.last_hidden_state
