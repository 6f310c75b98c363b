"""Our KV-cached batched sampler and the evaluation policy over any ``repro.engine.RolloutEngine``.

``RolloutEngine.generate(requests, generator=...)`` (the one protocol, ``repro.engine``) takes prompt token ids and
returns sampled token ids with their behaviour log-probs, finish reason and the policy version that produced them;
nothing is ever re-tokenised. Engines today:

- ``KVSampler`` (this file): a functional re-implementation of the Qwen3 decoder forward (RMSNorm, q/k-norm, RoPE,
  GQA, SwiGLU) over the *live* parameters of a ``Qwen3ForCausalLM``, with a preallocated KV cache, one left-padded
  batched prefill per DISTINCT prompt (the n rollouts of a GRPO group share it, as vLLM's prefix cache would),
  per-step compaction of finished rows, per-request ``max_new_tokens``, temperature and top-p. It reads the model's tensors on every
  call, so optimizer updates are visible immediately; ``set_version`` records which weights they are.
  Equivalence with the HF forward is tested (greedy tokens and log-probs).
- ``repro.engine.HFEngine``: any transformers causal LM (training rollouts of non-Qwen3 models).
- ``repro.vllm_engine.VLLMEngine``: a colocated ``vllm.LLM`` (``rollout.engine = "vllm"``, SCALE.md §2.1);
  ``repro.vllm_http``: external ``vllm serve`` processes over HTTP (``rollout.engine = "vllm_http"``, SCALE.md §2.2).

Log-probs are those of the distribution actually sampled from (after temperature and top-p), i.e. μ in METHOD §6.4;
at T = 1, top_p = 1 they equal the model's raw log-softmax. ``temperature=0`` means greedy (log-prob of the raw
softmax). One ``torch.Generator`` drives a whole batch, so a request's sample depends on its batch-mates; a fixed
(batch, generator seed) pair is reproducible. Covered: dense Qwen3 (no sliding window, no MoE). Not covered: MoE
routing, prefix caching across turns, speculative decoding.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import Qwen3ForCausalLM

from harness.policies.sampling import draw, sampling_logprobs
from repro.engine import FinishReason, RolloutEngine, TokenRequest, TokenResult
from repro.lora import effective_weight
from repro.prefix_cache import PrefixCache

log = logging.getLogger(__name__)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed in fp32 whatever the dtype of ``x`` (as HF's Qwen3RMSNorm does), returned in that dtype."""
    xf = x.float()
    return (w.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * cos + rot * sin


@dataclass
class _Layer:
    ln1: torch.Tensor
    qkv: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o: torch.Tensor
    ln2: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


class KVSampler:
    """KV-cached batched sampler over a ``Qwen3ForCausalLM``'s live weights (see module docstring)."""

    def __init__(self, model: Qwen3ForCausalLM, *, version: int = 0, max_batch: int = 64,
                 prefix_cache: int = 0, dtype: torch.dtype | None = None) -> None:
        """``prefix_cache``: how many finished sequences to keep K/V for, so that a later prompt extending one of
        them prefills only its new tokens (``repro.prefix_cache``); 0 switches reuse off. ``dtype``: what the
        weights, activations and KV cache are computed in (``torch.bfloat16``: bf16 matmuls, on AMX CPUs oneDNN's
        AMX kernels; norms, softmax and the sampling distribution stay fp32); None = the model's own dtype. The
        weights are cast from the live parameters on every call, so training updates stay visible."""
        if dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"KVSampler dtype={dtype}: choose torch.float32, torch.bfloat16 or None (the model's).")
        cfg = model.config
        if getattr(cfg, "model_type", "") != "qwen3":
            raise ValueError(f"KVSampler supports dense Qwen3 models; got model_type={cfg.model_type!r}. Use "
                             "model.generate for other architectures.")
        self.model, self.cfg, self.version, self.max_batch, self.dtype = model, cfg, version, max_batch, dtype
        self.n_heads, self.n_kv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = cfg.rms_norm_eps
        self.max_len = cfg.max_position_embeddings
        self.prefix = PrefixCache(prefix_cache) if prefix_cache > 0 else None

    def current_version(self) -> int:
        return self.version

    def set_version(self, version: int) -> None:
        self.version = version

    def _weights(self) -> tuple[list[_Layer], torch.Tensor, torch.Tensor, torch.Tensor]:
        m = self.model.model
        layers = []
        for lyr in m.layers:
            a, p = lyr.self_attn, lyr.mlp
            w = effective_weight  # LoRA projections: base + B·A·scale (repro.lora); plain ones: their weight
            layers.append(_Layer(
                lyr.input_layernorm.weight, torch.cat([w(a.q_proj), w(a.k_proj), w(a.v_proj)]),
                a.q_norm.weight, a.k_norm.weight, w(a.o_proj), lyr.post_attention_layernorm.weight,
                torch.cat([w(p.gate_proj), w(p.up_proj)]), w(p.down_proj)))
        embed, head = m.embed_tokens.weight, self.model.get_output_embeddings().weight
        if self.dtype is not None and self.dtype != embed.dtype:
            c = self.dtype
            layers = [_Layer(*(t.to(c) for t in vars(lyr).values())) for lyr in layers]
            tied, embed = head is embed, embed.to(c)
            head = embed if tied else head.to(c)
        return layers, embed, m.norm.weight, head

    def _rope_table(self, n: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        rot = self.model.model.rotary_emb
        pos = torch.arange(n, device=device, dtype=torch.float32)
        freqs = torch.outer(pos, rot.inv_freq.to(device=device, dtype=torch.float32))
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = float(getattr(rot, "attention_scaling", 1.0))
        return (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, start: int,
                 cache: list[tuple[torch.Tensor, torch.Tensor]], w: tuple, rope: tuple) -> torch.Tensor:
        """ids/pos [B, T]; writes K/V for cache slots [start, start+T); mask [B, 1, T, start+T] (True = attend)."""
        layers, embed, norm_w, head = w
        cos, sin = rope[0][pos].unsqueeze(1), rope[1][pos].unsqueeze(1)   # [B, 1, T, hd]
        b, t = ids.shape
        x = embed[ids]
        nq, nk = self.n_heads * self.hd, self.n_kv * self.hd
        for lyr, (kc, vc) in zip(layers, cache, strict=True):
            h = _rms(x, lyr.ln1, self.eps) @ lyr.qkv.T
            q = _rms(h[..., :nq].view(b, t, self.n_heads, self.hd), lyr.q_norm, self.eps).transpose(1, 2)
            k = _rms(h[..., nq:nq + nk].view(b, t, self.n_kv, self.hd), lyr.k_norm, self.eps).transpose(1, 2)
            v = h[..., nq + nk:].view(b, t, self.n_kv, self.hd).transpose(1, 2)
            kc[:, :, start:start + t] = _rope(k, cos, sin)
            vc[:, :, start:start + t] = v
            att = F.scaled_dot_product_attention(_rope(q, cos, sin), kc[:, :, :start + t], vc[:, :, :start + t],
                                                 attn_mask=mask, enable_gqa=self.n_kv != self.n_heads)
            x = x + att.transpose(1, 2).reshape(b, t, nq) @ lyr.o.T
            gu = _rms(x, lyr.ln2, self.eps) @ lyr.gate_up.T
            g, u = gu.chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ lyr.down.T
        return _rms(x[:, -1], norm_w, self.eps) @ head.T

    @torch.no_grad()
    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator,
                 row_generators: Sequence[torch.Generator] | None = None) -> list[TokenResult]:
        """Sample completions for ``requests`` (batched in groups of ``max_batch``). ``row_generators`` (one per
        request; the same object may serve several) replaces ``generator``: each request's tokens are then drawn
        from its own generator only, whatever its batch-mates (``repro.batching.BatchingEngine``)."""
        if row_generators is not None and len(row_generators) != len(requests):
            raise ValueError(f"{len(row_generators)} row generators for {len(requests)} requests; pass one per "
                             "request.")
        out: list[TokenResult] = []
        for s in range(0, len(requests), self.max_batch):
            rows = list(row_generators[s:s + self.max_batch]) if row_generators is not None else None
            out.extend(self._generate_batch(list(requests[s:s + self.max_batch]), rows or generator))
        return out

    def _check(self, reqs: list[TokenRequest]) -> None:
        for i, r in enumerate(reqs):
            if not r.prompt_ids:
                raise ValueError(f"request {i}: empty prompt_ids; the prompt must hold at least the chat header.")
            if r.max_new_tokens < 1 or r.temperature < 0 or not 0 < r.top_p <= 1:
                raise ValueError(f"request {i}: max_new_tokens={r.max_new_tokens} (>=1), temperature="
                                 f"{r.temperature} (>=0) and top_p={r.top_p} (in (0, 1]) out of range.")
            if len(r.prompt_ids) + r.max_new_tokens > self.max_len:
                raise ValueError(f"request {i}: prompt ({len(r.prompt_ids)}) + max_new_tokens ({r.max_new_tokens}) "
                                 f"exceeds the model's max_position_embeddings={self.max_len}; shorten the context.")

    def _generate_batch(self, reqs: list[TokenRequest], gen: torch.Generator | list[torch.Generator]
                        ) -> list[TokenResult]:
        """Prefill each DISTINCT prompt once (GRPO groups share their prompt), expand the KV cache to one row per
        request, then decode."""
        self._check(reqs)
        w = self._weights()
        dev, dt = w[1].device, w[1].dtype
        uniq: dict[tuple[int, ...], int] = {}
        src = [uniq.setdefault(tuple(r.prompt_ids), len(uniq)) for r in reqs]
        prompts = list(uniq)
        lens = [len(p) for p in prompts]
        if self.prefix is not None:
            self.prefix.check_weights(self.model)
            reuse = [self.prefix.lookup(list(p)) for p in prompts]
        else:
            reuse = [(None, 0)] * len(prompts)
        keep_n = [n for _, n in reuse]
        p_max, n_new = max(lens), max(r.max_new_tokens for r in reqs)
        start = p_max - max(n - c for n, c in zip(lens, keep_n, strict=True))   # first slot any row must compute
        total = p_max + n_new
        rope = self._rope_table(total, dt, dev)
        u = len(prompts)
        pad = torch.tensor([p_max - n for n in lens], device=dev)
        ids = torch.zeros(u, p_max, dtype=torch.long, device=dev)
        for i, p in enumerate(prompts):
            ids[i, p_max - lens[i]:] = torch.tensor(p, device=dev)
        ar = torch.arange(p_max, device=dev)
        pos = (ar.unsqueeze(0) - pad.unsqueeze(1)).clamp(min=0)
        valid = ar.unsqueeze(0) >= pad.unsqueeze(1)                                   # [U, P] real key slots
        q = ar[start:]
        causal = q.unsqueeze(1) >= ar.unsqueeze(0)                                     # [P - start, P]
        diag = q.unsqueeze(1) == ar.unsqueeze(0)
        mask = (causal.unsqueeze(0) & valid.unsqueeze(1)) | diag                      # pad queries see themselves
        cache = [(torch.zeros(u, self.n_kv, total, self.hd, dtype=dt, device=dev),
                  torch.zeros(u, self.n_kv, total, self.hd, dtype=dt, device=dev)) for _ in w[0]]
        for i, ((kv, _), c) in enumerate(zip(reuse, keep_n, strict=True)):   # reused prefixes: copy, not compute
            if kv is not None and c > 0:
                off = p_max - lens[i]
                for (kc, vc), (k0, v0) in zip(cache, kv, strict=True):
                    kc[i, :, off:off + c] = k0[:, :c]
                    vc[i, :, off:off + c] = v0[:, :c]
        logits = self._forward(ids[:, start:], pos[:, start:], mask.unsqueeze(1), start, cache, w, rope)
        key_valid = torch.zeros(u, total, dtype=torch.bool, device=dev)
        key_valid[:, :p_max] = valid
        next_pos = torch.tensor(lens, device=dev)
        if u < len(reqs) or src != list(range(u)):
            idx = torch.tensor(src, device=dev)
            cache = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in cache]
            logits, key_valid, next_pos = logits[idx], key_valid[idx], next_pos[idx]
        return self._decode(reqs, logits, cache, key_valid, next_pos, p_max, w, rope, gen)

    def _decode(self, reqs, logits, cache, key_valid, next_pos, p_max, w, rope, gen) -> list[TokenResult]:
        b = len(reqs)
        dev = logits.device
        toks: list[list[int]] = [[] for _ in range(b)]
        lps: list[list[float]] = [[] for _ in range(b)]
        reason: list[FinishReason] = ["length"] * b
        rows = list(range(b))                       # original request index of each active row
        temps = torch.tensor([r.temperature for r in reqs], device=dev)
        top_ps = torch.tensor([r.top_p for r in reqs], device=dev)
        step = 0
        while rows:
            tok, lp = _sample(logits.float(), temps, top_ps, gen)
            keep = []
            for j, (i, t, logp_t) in enumerate(zip(rows, tok.tolist(), lp.tolist(), strict=True)):
                toks[i].append(t)
                lps[i].append(logp_t)
                if t in reqs[i].stop_ids:
                    reason[i] = "stop"
                elif len(toks[i]) < reqs[i].max_new_tokens:
                    keep.append(j)
            if self.prefix is not None:
                kept = set(keep)
                for j, i in enumerate(rows):
                    if j not in kept:
                        self._remember(reqs[i].prompt_ids + toks[i][:-1], cache, j, p_max - len(reqs[i].prompt_ids))
            if not keep:
                break
            if len(keep) < len(rows):
                idx = torch.tensor(keep, device=dev)
                cache = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in cache]
                key_valid, next_pos, tok = key_valid[idx], next_pos[idx], tok[idx]
                temps, top_ps = temps[idx], top_ps[idx]
                if isinstance(gen, list):
                    gen = [gen[j] for j in keep]
                rows = [rows[j] for j in keep]
            slot = p_max + step
            key_valid[:, slot] = True
            logits = self._forward(tok.unsqueeze(1), next_pos.unsqueeze(1), key_valid[:, None, None, :slot + 1],
                                   slot, cache, w, rope)
            next_pos = next_pos + 1
            step += 1
        return [TokenResult(toks[i], lps[i], reason[i], self.version) for i in range(b)]

    def _remember(self, ids: list[int], cache, row: int, first_slot: int) -> None:
        """Store the K/V of ``ids`` (cache row ``row``, slots from ``first_slot`` on) in the prefix cache."""
        assert self.prefix is not None
        end = first_slot + len(ids)
        self.prefix.store(ids, [(k[row, :, first_slot:end].clone(), v[row, :, first_slot:end].clone())
                                for k, v in cache])


def _sample(logits: torch.Tensor, temps: torch.Tensor, top_ps: torch.Tensor,
            gen: torch.Generator | list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from fp32 logits [B, V]; returns (ids, log-prob under the sampling distribution).
    ``gen`` is one generator for the batch or one per row (row i then draws from ``gen[i]`` alone)."""
    greedy = temps == 0
    logp = sampling_logprobs(logits, temperature=temps, top_p=top_ps)  # the one distribution (harness.policies)
    tok = draw(logp, gen)
    if bool(greedy.any()):
        tok = torch.where(greedy, logits.argmax(-1), tok)
    return tok, logp.gather(1, tok.unsqueeze(1)).squeeze(1)


class SamplerPolicy:
    """``harness.interfaces.Policy`` over a ``RolloutEngine``: encodes the conversation with the chat template
    (``repro.tokenizer.ChatEncoder``, tools rendered in the system block), appends the assistant header, samples
    one turn and returns its text, token ids and behaviour log-probs (token-in/token-out: the ids are the sampled
    ones, ``<|im_end|>`` included when the turn stopped). A context that cannot fit ``max_new_tokens`` more tokens
    returns ``finish_reason="context"`` with empty text."""

    def __init__(self, engine: RolloutEngine, tokenizer, *, name: str = "sampler", max_new_tokens: int = 256,
                 temperature: float = 1.0, top_p: float = 1.0, max_context: int | None = None) -> None:
        from repro.tokenizer import ChatEncoder

        self.engine, self.tok, self.name = engine, tokenizer, name
        self.enc = ChatEncoder(tokenizer)
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_context = max_context
        # over an engine that serves many threads (repro.batching.BatchingEngine) the runner may call act()
        # concurrently; tokenizer calls are serialised here, generation is not
        self.thread_safe = bool(getattr(engine, "thread_safe", False))
        self._tok_lock = threading.Lock()

    def act(self, messages, *, tools, rng):  # harness.interfaces.Policy
        from harness.interfaces import PolicyOutput

        with self._tok_lock:
            prompt = self.enc.encode(messages, tools).ids + self.enc.assistant_header
        limit = self.max_context or getattr(self.engine, "max_len", None)
        if limit is not None and len(prompt) + self.max_new_tokens > limit:
            return PolicyOutput(text="", token_ids=[], logprobs=[], finish_reason="context")
        gen = torch.Generator().manual_seed(rng.getrandbits(63))
        req = TokenRequest(prompt, self.max_new_tokens, stop_ids=(self.enc.im_end,), temperature=self.temperature,
                           top_p=self.top_p)
        res = self.engine.generate([req], generator=gen)[0]
        body = res.ids[:-1] if res.finish_reason == "stop" else res.ids
        with self._tok_lock:
            text = self.tok.decode(body, skip_special_tokens=False)
        return PolicyOutput(text=text, token_ids=list(res.ids), logprobs=list(res.logprobs),
                            finish_reason=res.finish_reason, policy_version=res.version)
