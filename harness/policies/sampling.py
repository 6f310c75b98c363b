"""The one sampling distribution of the project: temperature, then top-k, then top-p, renormalised.

Used by every sampler that draws tokens: the HF policy (``harness.policies.hf_engine.sample_token``), the training
rollouts' generic engine (``repro.engine.HFEngine``) and the KV-cached engine (``repro.sampler.KVSampler``).
It lives here, in a torch-only module of ``harness.policies``, because the harness may not import ``repro`` while
``repro`` may import the harness.

Rules (one set, everywhere):

- temperature ``T``: logits / T; ``T = 0`` means greedy, and for those rows the logits are left unscaled here (the
  caller takes the argmax; the returned log-probs are then the raw log-softmax);
- top-k (``k > 0``): keep the tokens whose scaled logit is >= the k-th largest (ties at the k-th value are kept);
- top-p: keep the smallest prefix of tokens, by descending probability, whose mass reaches ``top_p``; a token is
  dropped when the mass strictly before it is ``>= top_p`` (so the most likely token is always kept);
- the kept tokens are renormalised; the result is the log-prob of the distribution actually sampled from
  (vLLM's ``processed_logprobs``, μ in METHOD §6.4).

Covered: the distribution and one batched draw. Not covered: KV caching, stopping, batching (the callers).
"""

from __future__ import annotations

import torch


def sampling_logprobs(logits: torch.Tensor, *, temperature: float | torch.Tensor, top_p: float | torch.Tensor = 1.0,
                      top_k: int = 0) -> torch.Tensor:
    """Log-probs ``[..., V]`` of the sampling distribution of fp32 ``logits`` ``[..., V]`` (rules above).

    ``temperature`` and ``top_p`` are scalars or one value per row (shape ``logits.shape[:-1]``)."""
    temps = torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device)
    temps = torch.where(temps == 0, torch.ones_like(temps), temps)
    scaled = logits / (temps.unsqueeze(-1) if temps.ndim else temps)
    if top_k > 0 and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    logp = torch.log_softmax(scaled, dim=-1)
    ps = torch.as_tensor(top_p, dtype=logits.dtype, device=logits.device)
    if bool((ps < 1).any()):
        sp, si = torch.sort(logp, dim=-1, descending=True)
        cum = sp.exp().cumsum(-1)
        drop_sorted = (cum - sp.exp()) >= (ps.unsqueeze(-1) if ps.ndim else ps)
        drop = torch.zeros_like(drop_sorted).scatter(-1, si, drop_sorted)
        logp = torch.log_softmax(logp.masked_fill(drop, float("-inf")), dim=-1)
    return logp


def draw(logp: torch.Tensor, generator: torch.Generator | list[torch.Generator]) -> torch.Tensor:
    """One token id per row of ``logp`` ``[B, V]``; ``generator`` is one for the batch or one per row (row i then
    draws from ``generator[i]`` alone). The draw happens on the generator's device: with a CPU generator (every
    caller's: seeded from the episode's ``random.Random``) and log-probs on a GPU, the probabilities are copied to
    the CPU for the draw (``torch.multinomial`` refuses a generator of another device), so the same seed draws from
    the same stream on any device. The ids are returned on ``logp``'s device."""
    probs = logp.exp()

    def one(p: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return torch.multinomial(p.to(g.device), 1, generator=g).to(logp.device)

    if isinstance(generator, list):
        return torch.cat([one(probs[i:i + 1], g) for i, g in enumerate(generator)]).squeeze(1)
    return one(probs, generator).squeeze(1)
