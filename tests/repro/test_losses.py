"""repro.losses: closed forms, chunking invariance, TRL oracles (GKD JSD, SDPO divergence, GRPO dapo), stop-grad."""

from __future__ import annotations

import math
import os
import statistics

import pytest
import torch
import torch.nn.functional as F

from repro.losses import (
    chunked_kl_loss,
    chunked_token_logprobs,
    clipped_surrogate,
    group_advantages,
    kl_from_logits,
    sampled_token_kl_advantage,
)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
DIRS = ["reverse", "forward", "jsd"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _logits(n: int, v: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    return torch.randn(n, v, generator=_gen(seed), dtype=torch.float64) * scale


# ---------------------------------------------------------------- closed forms (METHOD §6.5)

def test_reverse_kl_gradient_closed_form() -> None:
    z = _logits(5, 11, 0).requires_grad_(True)
    zt = _logits(5, 11, 1)
    d = kl_from_logits(z, zt, direction="reverse")
    d.sum().backward()
    p, lp, lq = F.softmax(z.detach(), -1), F.log_softmax(z.detach(), -1), F.log_softmax(zt, -1)
    expected = p * (lp - lq - d.detach().unsqueeze(1))
    torch.testing.assert_close(z.grad, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(d.detach(), (p * (lp - lq)).sum(-1))


def test_forward_kl_gradient_closed_form() -> None:
    z = _logits(5, 11, 2).requires_grad_(True)
    zt = _logits(5, 11, 3)
    kl_from_logits(z, zt, direction="forward").sum().backward()
    torch.testing.assert_close(z.grad, F.softmax(z.detach(), -1) - F.softmax(zt, -1), rtol=1e-10, atol=1e-12)


def test_kl_is_zero_for_identical_and_positive_otherwise() -> None:
    z = _logits(4, 9, 4)
    for direction in DIRS:
        assert kl_from_logits(z, z.clone(), direction=direction).abs().max() < 1e-12
        assert (kl_from_logits(z, _logits(4, 9, 5), direction=direction) > 0).all()


# ---------------------------------------------------------------- chunked == unchunked (values and grads)

@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("chunk", [1, 7, 13])
def test_chunked_equals_unchunked(direction: str, chunk: int) -> None:
    n, d, v = 13, 6, 37
    hs = torch.randn(n, d, generator=_gen(10), dtype=torch.float64).requires_grad_(True)
    ht = torch.randn(n, d, generator=_gen(11), dtype=torch.float64)
    w = torch.randn(v, d, generator=_gen(12), dtype=torch.float64).requires_grad_(True)
    tw = torch.rand(n, generator=_gen(13), dtype=torch.float64)
    tw[3] = 0.0
    with torch.no_grad():  # clamp at the median: some tokens clamp, some not
        kappa = float(kl_from_logits(hs @ w.T, ht @ w.T, direction=direction).median()) + 1e-9
    res = chunked_kl_loss(hs, ht, w, tw, direction=direction, kappa=kappa, chunk_size=chunk)
    res.loss.backward()
    g_hs, g_w = hs.grad.clone(), w.grad.clone()
    hs.grad = w.grad = None
    per = kl_from_logits(hs @ w.T, ht @ w.detach().T, direction=direction)
    ref = (torch.clamp(per, max=kappa) * tw).sum()
    ref.backward()
    assert 0.0 < ((per >= kappa) & (tw > 0)).float().mean() < 1.0, "test must exercise both clamp branches"
    torch.testing.assert_close(res.loss.detach(), ref.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.per_token, per.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_hs, hs.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(g_w, w.grad, rtol=1e-10, atol=1e-12)


def test_chunked_fp32_matches_fp64_reference() -> None:
    n, d, v = 40, 16, 301
    hs64 = torch.randn(n, d, generator=_gen(20), dtype=torch.float64)
    ht64 = torch.randn(n, d, generator=_gen(21), dtype=torch.float64)
    w64 = torch.randn(v, d, generator=_gen(22), dtype=torch.float64) * 0.3
    tw = torch.full((n,), 1.0 / n, dtype=torch.float64)
    hs = hs64.float().requires_grad_(True)
    res = chunked_kl_loss(hs, ht64.float(), w64.float(), tw.float(), chunk_size=8, kappa=math.inf)
    res.loss.backward()
    ref = (kl_from_logits(hs64 @ w64.T, ht64 @ w64.T) * tw).sum()
    assert abs(float(res.loss.detach()) - float(ref)) < 1e-5 * max(1.0, float(ref))
    assert hs.grad is not None and hs.grad.dtype == torch.float32


def test_clamped_tokens_contribute_kappa_and_no_gradient() -> None:
    hs = torch.randn(4, 5, generator=_gen(30), dtype=torch.float64).mul(10).requires_grad_(True)
    ht = torch.randn(4, 5, generator=_gen(31), dtype=torch.float64).mul(10)
    w = torch.randn(19, 5, generator=_gen(32), dtype=torch.float64)
    res = chunked_kl_loss(hs, ht, w, torch.ones(4, dtype=torch.float64), kappa=1e-6)
    assert res.clamped_frac == 1.0
    assert float(res.loss.detach()) == pytest.approx(4e-6)
    res.loss.backward()
    assert hs.grad.abs().max() == 0.0


# ---------------------------------------------------------------- stop-gradient on the teacher

def test_teacher_gets_no_gradient_with_shared_weights() -> None:
    """Same lm_head for student and teacher: the gradient on W must be the student path only."""
    n, d, v = 9, 4, 23
    hs = torch.randn(n, d, generator=_gen(40), dtype=torch.float64).requires_grad_(True)
    ht = torch.randn(n, d, generator=_gen(41), dtype=torch.float64)
    w = torch.randn(v, d, generator=_gen(42), dtype=torch.float64).requires_grad_(True)
    tw = torch.ones(n, dtype=torch.float64)
    chunked_kl_loss(hs, ht, w, tw, kappa=math.inf, chunk_size=4).loss.backward()
    g_ours = w.grad.clone()
    w.grad = None
    # wrong reference: gradient flowing into the teacher logits as well
    both = (kl_from_logits(hs @ w.T, ht @ w.T) * tw).sum()  # kl_from_logits detaches the teacher
    both.backward()
    torch.testing.assert_close(g_ours, w.grad)
    w.grad = None
    ls, lt = F.log_softmax(hs @ w.T, -1), F.log_softmax(ht @ w.T, -1)
    ((ls.exp() * (ls - lt)).sum(-1) * tw).sum().backward()  # no stop-grad
    assert (g_ours - w.grad).abs().max() > 1e-6, "the stop-gradient must change the weight gradient"


def test_teacher_hidden_requiring_grad_is_rejected() -> None:
    hs = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(ValueError, match="no_grad"):
        chunked_kl_loss(hs, torch.randn(3, 4, requires_grad=True), torch.randn(7, 4), torch.ones(3))


def test_bad_jsd_beta_and_shapes_raise() -> None:
    hs, ht, w = torch.randn(3, 4), torch.randn(3, 4), torch.randn(7, 4)
    with pytest.raises(ValueError, match="beta"):
        chunked_kl_loss(hs, ht, w, torch.ones(3), direction="jsd", beta=1.0)
    with pytest.raises(ValueError, match="token_weights"):
        chunked_kl_loss(hs, ht, w, torch.ones(4))


# ---------------------------------------------------------------- TRL oracles

@pytest.fixture(scope="module")
def gkd():
    mod = pytest.importorskip("trl.experimental.gkd")
    return mod.GKDTrainer


@pytest.mark.parametrize(("beta", "direction"), [(1.0, "reverse"), (0.0, "forward"), (0.5, "jsd")])
def test_matches_trl_generalized_jsd_loss(gkd, beta: float, direction: str) -> None:
    b, t, v = 2, 6, 17
    s = torch.randn(b, t, v, generator=_gen(50), dtype=torch.float64)
    te = torch.randn(b, t, v, generator=_gen(51), dtype=torch.float64)
    labels = torch.randint(0, v, (b, t), generator=_gen(52))
    labels[0, :2] = -100
    labels[1, 5] = -100
    trl_loss = gkd.generalized_jsd_loss(s, te, labels=labels, beta=beta, temperature=1.0, reduction="batchmean")
    mask = labels != -100
    ours = kl_from_logits(s, te, direction=direction, beta=0.5)[mask].mean()
    torch.testing.assert_close(ours, trl_loss.to(ours.dtype), rtol=1e-10, atol=1e-12)
    # and the chunked hidden-state path agrees when logits = H W^T
    h = torch.randn(b * t, 5, generator=_gen(53), dtype=torch.float64)
    ht = torch.randn(b * t, 5, generator=_gen(54), dtype=torch.float64)
    w = torch.randn(v, 5, generator=_gen(55), dtype=torch.float64)
    m = mask.reshape(-1)
    trl2 = gkd.generalized_jsd_loss((h @ w.T).view(b, t, v), (ht @ w.T).view(b, t, v), labels=labels, beta=beta)
    res = chunked_kl_loss(h, ht, w, m.double() / m.sum(), direction=direction, beta=0.5, kappa=math.inf,
                          chunk_size=5)
    torch.testing.assert_close(res.loss, trl2.to(res.loss.dtype), rtol=1e-10, atol=1e-12)


def test_matches_trl_sdpo_full_logit_reverse() -> None:
    lu = pytest.importorskip("trl.experimental.sdpo.loss_utils")
    s = torch.randn(2, 5, 13, generator=_gen(60), dtype=torch.float64)
    te = torch.randn(2, 5, 13, generator=_gen(61), dtype=torch.float64)
    trl_per = lu.compute_full_logit_self_distillation_loss(s, te, distillation_alpha=1.0)
    torch.testing.assert_close(kl_from_logits(s, te, direction="reverse"), trl_per, rtol=1e-10, atol=1e-12)


def _trl_dapo_loss(logp, old_logp, adv, mask, eps_low, eps_high, num_items):
    """TRL GRPOTrainer._compute_loss math for loss_type='dapo', beta=0, token-level IS, 1 process, 1 accum step
    (trl/trainer/grpo_trainer.py, read from the installed trl 1.16)."""
    advantages = adv.unsqueeze(1)
    coef_1 = torch.exp(logp - old_logp)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    normalizer = num_items.clamp(min=1.0) / 1
    return (per_token_loss * mask).sum() / normalizer


def test_policy_loss_matches_trl_dapo() -> None:
    b, t = 6, 9
    base = torch.randn(b, t, generator=_gen(70), dtype=torch.float64) - 2
    old = base + 0.3 * torch.randn(b, t, generator=_gen(71), dtype=torch.float64)
    adv = torch.randn(b, generator=_gen(72), dtype=torch.float64)
    mask = (torch.rand(b, t, generator=_gen(73)) > 0.3).double()
    n = mask.sum()
    lp1 = base.clone().requires_grad_(True)
    ours = clipped_surrogate(lp1, old, adv, mask, n_tokens_global=float(n), eps_low=0.2, eps_high=0.28)
    ours.loss.backward()
    lp2 = base.clone().requires_grad_(True)
    ref = _trl_dapo_loss(lp2, old, adv, mask, 0.2, 0.28, n)
    ref.backward()
    torch.testing.assert_close(ours.loss, ref)
    torch.testing.assert_close(lp1.grad, lp2.grad)
    assert 0.0 < float(ours.clip_frac) < 1.0


def test_policy_loss_global_count_splits_over_microbatches() -> None:
    lp = torch.randn(4, 5, generator=_gen(80), dtype=torch.float64)
    old = lp + 0.1
    adv, mask = torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=torch.float64), torch.ones(4, 5, dtype=torch.float64)
    whole = clipped_surrogate(lp, old, adv, mask, n_tokens_global=20).loss
    parts = sum(clipped_surrogate(lp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], n_tokens_global=20).loss
                for i in (0, 2))
    torch.testing.assert_close(whole, parts)
    with pytest.raises(ValueError, match="n_tokens_global"):
        clipped_surrogate(lp, old, adv, mask, n_tokens_global=0)


def test_group_advantages_dr_grpo_and_trl_group_scaling() -> None:
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [1.5, 0.0, 1.0, 0.5]])
    a = group_advantages(r)
    torch.testing.assert_close(a, r - r.mean(1, keepdim=True))
    g = group_advantages(r, scale="group")
    # TRL: std with Bessel correction, + 1e-4
    std = torch.tensor([statistics.stdev(row) for row in r.tolist()])  # Bessel-corrected, as TRL's nanstd
    torch.testing.assert_close(g, (r - r.mean(1, keepdim=True)) / (std.unsqueeze(1).float() + 1e-4))
    assert (g[1] == 0).all()
    with pytest.raises(ValueError, match="groups"):
        group_advantages(torch.ones(4))


def test_sampled_token_estimator() -> None:
    s, t = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True), torch.tensor([[-1.5, -1.0, -0.5]])
    adv = sampled_token_kl_advantage(s, t, torch.tensor([[1, 1, 0]]), coef=2.0)
    torch.testing.assert_close(adv, torch.tensor([[-1.0, 2.0, 0.0]]))
    assert not adv.requires_grad


def test_chunked_token_logprobs_match_log_softmax() -> None:
    h = torch.randn(11, 6, generator=_gen(90), dtype=torch.float64).requires_grad_(True)
    w = torch.randn(29, 6, generator=_gen(91), dtype=torch.float64).requires_grad_(True)
    y = torch.randint(0, 29, (11,), generator=_gen(92))
    lp, ent = chunked_token_logprobs(h, w, y, chunk_size=4)
    lp.sum().backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    ref = F.log_softmax(h @ w.T, -1)
    ref.gather(1, y[:, None]).sum().backward()
    torch.testing.assert_close(lp.detach(), ref.detach().gather(1, y[:, None]).squeeze(1))
    torch.testing.assert_close(ent, -(ref.exp() * ref).sum(-1).detach())
    torch.testing.assert_close(gh, h.grad)
    torch.testing.assert_close(gw, w.grad)
