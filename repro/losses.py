"""Pure tensor math for GRPO + targeted guidance (METHOD §6.4–6.7). No model, no I/O, no global state.

Covered:
- ``group_advantages``: Dr.GRPO ``A = r − mean_group(r)``; ``scale="group"`` divides by the Bessel-corrected group std
  + 1e-4 exactly like TRL ``scale_rewards="group"``.
- ``clipped_surrogate``: per-token ``−min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A)``, ρ = exp(logπ − logμ), summed over the
  mask and divided by a *global* token count the caller passes in (TRL ``loss_type="dapo"``; DDP/FSDP ranks pass the
  all-reduced count).
- ``kl_from_logits``: per-token full-vocabulary divergence on materialised logits (the reference / naive path).
- ``chunked_kl_loss``: the same divergence from final hidden states and the lm_head weight in chunks of C tokens; per
  chunk it forms the [C, V] logits, evaluates d_t = min(D_t, κ) and the closed-form gradient
  (∂D_rev/∂z = p(log p − log q − D), ∂D_fwd/∂z = p − q, ∂D_jsd/∂z = (1−β)p(log p − log m − KL(p‖m)))
  and keeps only [N, d] and [V, d] gradient buffers, so full logits never exist for the whole sequence. The teacher
  side is a constant (stop-gradient) by construction; tokens whose divergence is clamped get zero gradient.
- ``sampled_token_kl_advantage``: the ``tg_sampled_token`` estimator, −coef·sg(log p_S(y) − log p_T(y)).
- ``chunked_token_logprobs``: log π(y_t) (and entropy) from hidden states in checkpointed chunks, for the PG term.

Not covered: temperature-scaled or top-k KL (the spec uses raw T=1 full softmax), lm_head bias (Qwen3 has none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

KLDirection = Literal["reverse", "forward", "jsd"]
AdvantageScale = Literal["none", "group"]


def group_advantages(rewards: torch.Tensor, *, scale: AdvantageScale = "none", eps: float = 1e-4) -> torch.Tensor:
    """Advantages for rewards shaped [G, n] (G groups of n rollouts of the same task).

    ``scale="none"``: A = r − mean (Dr.GRPO, METHOD §6.4 default). ``scale="group"``: A /= (std + eps) with the
    Bessel-corrected std (TRL ``scale_rewards="group"``). Zero-variance groups get A = 0 (they are not dropped).
    """
    if rewards.dim() != 2 or rewards.shape[1] < 1:
        raise ValueError(f"rewards must be [groups, rollouts], got shape {tuple(rewards.shape)}; reshape with "
                         "rewards.view(num_groups, rollouts_per_group).")
    r = rewards.to(torch.float32)
    adv = r - r.mean(dim=1, keepdim=True)
    if scale == "group":
        if r.shape[1] < 2:
            raise ValueError("scale='group' needs >= 2 rollouts per group (Bessel-corrected std); use scale='none'.")
        adv = adv / (r.std(dim=1, keepdim=True, unbiased=True) + eps)
    elif scale != "none":
        raise ValueError(f"unknown advantage scale {scale!r}; use 'none' or 'group'.")
    return adv


@dataclass(frozen=True)
class SurrogateResult:
    loss: torch.Tensor          # scalar, Σ m·ℓ / n_tokens_global
    per_token: torch.Tensor     # [B, T] ℓ_t (unmasked)
    clip_frac: torch.Tensor     # share of masked tokens where the clipped branch was active (detached)
    ratio_mean: torch.Tensor    # masked mean of ρ (detached)
    ratio_max: torch.Tensor     # masked max of ρ (detached)


def clipped_surrogate(logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
                      mask: torch.Tensor, *, n_tokens_global: float, eps_low: float = 0.2,
                      eps_high: float = 0.2) -> SurrogateResult:
    """PPO-clip surrogate with DAPO token-mean aggregation over a global token count.

    ``logp``/``behaviour_logp``/``mask``: [B, T]; ``advantages``: [B] (broadcast) or [B, T]. ``n_tokens_global``:
    Σ mask over the whole optimisation batch (all micro-batches and ranks), so the micro-batch losses sum to the
    batch token-mean. Tokens with mask 0 may hold any finite behaviour log-prob.
    """
    if n_tokens_global <= 0:
        raise ValueError(f"n_tokens_global={n_tokens_global}: pass the number of policy-gradient tokens in the "
                         "whole batch (>= 1).")
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    m = mask.to(logp.dtype)
    log_ratio = torch.where(m > 0, logp - behaviour_logp, torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    loss = (per_token * m).sum() / n_tokens_global
    with torch.no_grad():
        n = m.sum().clamp(min=1.0)
        is_clipped = ((ratio * adv) > (clipped * adv)).to(m.dtype) * m
        r_masked = ratio.detach() * m
        ratio_max = torch.where(m > 0, ratio.detach(), torch.zeros_like(ratio)).max()
    return SurrogateResult(loss, per_token, is_clipped.sum() / n, r_masked.sum() / n, ratio_max)


def _divergence(ls: torch.Tensor, lt: torch.Tensor, direction: KLDirection, beta: float) -> torch.Tensor:
    """Per-row divergence from student/teacher log-probs [N, V] (teacher treated as given)."""
    if direction == "reverse":
        return (ls.exp() * (ls - lt)).sum(-1)
    if direction == "forward":
        return (lt.exp() * (lt - ls)).sum(-1)
    if direction == "jsd":
        _check_beta(beta)
        lm = torch.logsumexp(torch.stack([ls + math.log(1.0 - beta), lt + math.log(beta)]), dim=0)
        return beta * (lt.exp() * (lt - lm)).sum(-1) + (1.0 - beta) * (ls.exp() * (ls - lm)).sum(-1)
    raise ValueError(f"unknown KL direction {direction!r}; use 'reverse', 'forward' or 'jsd'.")


def _check_beta(beta: float) -> None:
    if not 0.0 < beta < 1.0:
        raise ValueError(f"jsd beta={beta} must lie strictly in (0, 1); beta=0 is direction='forward' and beta=1 is "
                         "direction='reverse'.")


def kl_from_logits(student_logits: torch.Tensor, teacher_logits: torch.Tensor, *,
                   direction: KLDirection = "reverse", beta: float = 0.5) -> torch.Tensor:
    """Per-token divergence [...] on materialised logits [..., V], in fp32; the teacher is detached.

    reverse = KL(S‖T), forward = KL(T‖S), jsd = β·KL(T‖M) + (1−β)·KL(S‖M), M = (1−β)S + βT (TRL GKD convention).
    """
    cd = torch.promote_types(student_logits.dtype, torch.float32)
    ls = F.log_softmax(student_logits.to(cd), dim=-1)
    lt = F.log_softmax(teacher_logits.detach().to(cd), dim=-1)
    return _divergence(ls, lt, direction, beta)


def _chunk_div_and_grad(zs: torch.Tensor, zt: torch.Tensor, direction: KLDirection, beta: float,
                        want_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """From fp32 logits [C, V] (consumed in place) return D [C] and ∂D/∂z_S [C, V] (or None)."""
    ls = zs.sub_(torch.logsumexp(zs, dim=-1, keepdim=True))
    lt = zt.sub_(torch.logsumexp(zt, dim=-1, keepdim=True))
    if direction == "reverse":
        ps = ls.exp()
        diff = lt.neg_().add_(ls)                                   # log p − log q
        d = torch.bmm(ps.unsqueeze(1), diff.unsqueeze(2)).view(-1)
        grad = diff.sub_(d.unsqueeze(1)).mul_(ps) if want_grad else None
        return d, grad
    if direction == "forward":
        pt = lt.exp()
        diff = lt - ls                                              # log q − log p
        d = torch.bmm(pt.unsqueeze(1), diff.unsqueeze(2)).view(-1)
        del diff
        grad = ls.exp_().sub_(pt) if want_grad else None            # p − q
        return d, grad
    _check_beta(beta)
    lm = torch.logaddexp(ls + math.log(1.0 - beta), lt + math.log(beta))
    pt = lt.exp()
    kl_t = torch.bmm(pt.unsqueeze(1), lt.sub_(lm).unsqueeze(2)).view(-1)
    del pt
    ps = ls.exp()
    diff = ls.sub_(lm)                                              # log p − log m
    kl_s = torch.bmm(ps.unsqueeze(1), diff.unsqueeze(2)).view(-1)
    d = beta * kl_t + (1.0 - beta) * kl_s
    grad = diff.sub_(kl_s.unsqueeze(1)).mul_(ps).mul_(1.0 - beta) if want_grad else None
    return d, grad


class _ChunkedKL(torch.autograd.Function):
    """Σ_t w_t·min(D_t, κ) with gradients computed chunk by chunk during the forward (closed form)."""

    @staticmethod
    def forward(ctx, hs, ht, weight, token_weights, direction, beta, kappa, chunk_size, want_grad,  # type: ignore[override]
                teacher_weight=None):
        with torch.autocast(device_type=hs.device.type, enabled=False):  # fp32 math even under a bf16 policy
            return _ChunkedKL._forward(ctx, hs, ht, weight, token_weights, direction, beta, kappa, chunk_size,
                                       want_grad, teacher_weight)

    @staticmethod
    def _forward(ctx, hs, ht, weight, token_weights, direction, beta, kappa, chunk_size, want_grad,  # type: ignore[no-untyped-def]
                 teacher_weight):
        n = hs.shape[0]
        cd = torch.promote_types(hs.dtype, torch.float32)  # fp32 math (fp64 if the inputs are fp64)
        w32 = weight.to(cd)
        wt32 = w32 if teacher_weight is None else teacher_weight.detach().to(cd)
        per_token = torch.empty(n, dtype=cd, device=hs.device)
        g_hs = torch.zeros(hs.shape, dtype=cd, device=hs.device) if want_grad else None
        g_w = torch.zeros(weight.shape, dtype=cd, device=hs.device) if want_grad else None
        for s in range(0, n, chunk_size):
            e = min(s + chunk_size, n)
            h_s = hs[s:e].to(cd)
            zs = h_s @ w32.T
            zt = ht[s:e].to(cd) @ wt32.T
            d, grad = _chunk_div_and_grad(zs, zt, direction, beta, want_grad)
            per_token[s:e] = d
            if want_grad:
                active = (d < kappa).to(cd) * token_weights[s:e].to(cd)
                grad.mul_(active.unsqueeze(1))
                g_hs[s:e] = grad @ w32
                g_w.addmm_(grad.T, h_s)
            del zs, zt, grad
        loss = (torch.clamp(per_token, max=kappa) * token_weights.to(cd)).sum()
        ctx.save_for_backward(g_hs, g_w)
        ctx.dtypes = (hs.dtype, weight.dtype)
        ctx.mark_non_differentiable(per_token)
        return loss, per_token

    @staticmethod
    def backward(ctx, grad_loss, _grad_per_token):  # type: ignore[override]
        g_hs, g_w = ctx.saved_tensors
        if g_hs is None:
            raise RuntimeError("chunked_kl_loss ran without gradients (inputs did not require grad or grad mode was "
                               "off); call it with grad enabled on the student hidden states to backpropagate.")
        hs_grad = (g_hs * grad_loss).to(ctx.dtypes[0]) if ctx.needs_input_grad[0] else None
        w_grad = (g_w * grad_loss).to(ctx.dtypes[1]) if ctx.needs_input_grad[2] else None
        return hs_grad, None, w_grad, None, None, None, None, None, None, None


@dataclass(frozen=True)
class KLResult:
    loss: torch.Tensor        # scalar Σ_t w_t·min(D_t, κ) (differentiable w.r.t. student hidden states and weight)
    per_token: torch.Tensor   # [N] unclamped D_t (detached), for logging mean/p99
    clamped_frac: float       # share of tokens with w_t > 0 and D_t >= κ


def chunked_kl_loss(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, weight: torch.Tensor,
                    token_weights: torch.Tensor, *, direction: KLDirection = "reverse", beta: float = 0.5,
                    kappa: float = 20.0, chunk_size: int = 256,
                    teacher_weight: torch.Tensor | None = None) -> KLResult:
    """Full-vocabulary KL from hidden states [N, d] (rows already aligned: teacher row t = map(t)) and lm_head
    weight [V, d], in chunks of ``chunk_size`` tokens. ``teacher_weight`` [V, d]: the teacher's own lm_head when the
    teacher holds other weights (EMA / fixed teacher, ``repro.teacher``); ``None`` = the student's ``weight``.

    ``token_weights`` [N]: the per-token weight, typically m_kl / N_kl_global (× an IS weight for ``tg_kl_is``);
    it is treated as a constant. Peak extra memory ≈ 3·chunk_size·V·4 bytes plus [N, d] and [V, d] fp32 gradient
    buffers. The teacher hidden states must not require grad (METHOD §8: run the teacher under ``torch.no_grad()``).
    """
    if teacher_hidden.requires_grad:
        raise ValueError("teacher_hidden requires grad: the teacher is a stop-gradient target (METHOD §6.3). Run the "
                         "teacher forward under torch.no_grad() or pass teacher_hidden.detach().")
    if student_hidden.dim() != 2 or student_hidden.shape != teacher_hidden.shape:
        raise ValueError(f"student/teacher hidden states must both be [N, d]; got {tuple(student_hidden.shape)} and "
                         f"{tuple(teacher_hidden.shape)}. Gather the KL rows (student t, teacher map(t)) first.")
    if token_weights.shape != student_hidden.shape[:1]:
        raise ValueError(f"token_weights must be [N]={student_hidden.shape[0]}, got {tuple(token_weights.shape)}.")
    if chunk_size < 1 or kappa <= 0:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1 and kappa={kappa} > 0 (use math.inf for no clamp).")
    if teacher_weight is not None and teacher_weight.shape != weight.shape:
        raise ValueError(f"teacher_weight {tuple(teacher_weight.shape)} must match weight {tuple(weight.shape)}.")
    if direction == "jsd":
        _check_beta(beta)
    want_grad = torch.is_grad_enabled() and (student_hidden.requires_grad or weight.requires_grad)
    loss, per_token = _ChunkedKL.apply(student_hidden, teacher_hidden, weight, token_weights.detach(), direction,
                                       float(beta), float(kappa), int(chunk_size), want_grad, teacher_weight)
    active = token_weights.detach() > 0
    n_active = int(active.sum())
    clamped = float(((per_token >= kappa) & active).sum()) / n_active if n_active else 0.0
    return KLResult(loss, per_token, clamped)


def sampled_token_kl_advantage(student_logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor, *,
                               coef: float = 1.0) -> torch.Tensor:
    """``tg_sampled_token``: per-token advantage term −coef·sg(log p_S(y) − log p_T(y)) on mask tokens (0 elsewhere),
    to be ADDED to the GRPO token advantages (Thinking Machines OPD, discount 0)."""
    gap = (student_logp.detach() - teacher_logp.detach()) * mask.to(student_logp.dtype)
    return -coef * gap


def _logp_entropy_chunk(h: torch.Tensor, weight: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (h @ weight.T).to(torch.promote_types(h.dtype, torch.float32))
    lse = torch.logsumexp(logits, dim=-1)
    logp_y = logits.gather(-1, y.unsqueeze(-1)).squeeze(-1) - lse
    p = torch.softmax(logits, dim=-1)
    entropy = lse - (p * logits).sum(-1)
    return logp_y, entropy


def chunked_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                           chunk_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(y_t) and the entropy per row from hidden states [N, d] and targets [N], one activation-checkpointed
    chunk at a time (full [N, V] logits never exist). Entropy is returned detached (a diagnostic)."""
    if hidden.shape[:1] != targets.shape:
        raise ValueError(f"hidden [N, d] and targets [N] disagree: {tuple(hidden.shape)} vs {tuple(targets.shape)}.")
    outs, ents = [], []
    for s in range(0, hidden.shape[0], chunk_size):
        h, y = hidden[s:s + chunk_size], targets[s:s + chunk_size]
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
            lp, ent = checkpoint(_logp_entropy_chunk, h, weight, y, use_reentrant=False)
        else:
            lp, ent = _logp_entropy_chunk(h, weight, y)
        outs.append(lp)
        ents.append(ent.detach())
    if not outs:
        z = hidden.new_zeros(0, dtype=torch.float32)
        return z, z
    return torch.cat(outs), torch.cat(ents)
