"""harness.policies.sampling: the one sampling distribution (temperature, top-k, top-p with one tie rule), with
known answers, and its use by every sampler: the HF policy, the training rollouts' HFEngine, the KV engine."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from harness.policies.hf import sample_token
from harness.policies.sampling import draw, sampling_logprobs
from repro.engine import HFEngine, TokenRequest

# probabilities 0.5, 0.25, 0.25 (exact in fp32), the most likely token in the middle
HALF = torch.log(torch.tensor([0.25, 0.5, 0.25]))


def test_top_p_drops_a_token_once_the_mass_before_it_reaches_top_p() -> None:
    p = sampling_logprobs(HALF, temperature=1.0, top_p=0.5).exp()
    assert p.tolist() == [0.0, 1.0, 0.0]  # mass before the 2nd token = 0.5 >= 0.5: dropped (the tie rule)
    p = sampling_logprobs(HALF, temperature=1.0, top_p=0.75).exp()
    assert p.tolist() == pytest.approx([1 / 3, 2 / 3, 0.0]) or p.tolist() == pytest.approx([0.0, 2 / 3, 1 / 3])
    assert sampling_logprobs(HALF, temperature=1.0, top_p=1.0).exp().tolist() == pytest.approx([0.25, 0.5, 0.25])


def test_temperature_top_k_and_per_row_options() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.0, 0.0]])
    lp = sampling_logprobs(logits, temperature=torch.tensor([2.0, 0.0]), top_p=torch.tensor([1.0, 1.0]))
    assert lp[0].tolist() == pytest.approx(torch.log_softmax(logits[0] / 2, -1).tolist())
    assert lp[1].tolist() == pytest.approx(torch.log_softmax(logits[1], -1).tolist())  # T = 0: unscaled (greedy)
    k2 = sampling_logprobs(logits[0], temperature=1.0, top_k=2).exp()
    assert k2[2] == 0 and k2[:2].tolist() == pytest.approx([1 / (1 + math.exp(-1)), 1 - 1 / (1 + math.exp(-1))])
    tok = draw(sampling_logprobs(logits, temperature=1.0, top_p=0.01), torch.Generator().manual_seed(0))
    assert tok.tolist() == [0, 0]


def test_hf_policy_samples_from_the_shared_distribution() -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        tok, lp = sample_token(HALF, gen, temperature=1.0, top_p=0.5)
        assert (tok, lp) == (1, 0.0)


class _FixedLM(torch.nn.Module):
    """Every position predicts ``HALF``: enough for HFEngine's decoding loop."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: torch.Tensor, **kw: object) -> SimpleNamespace:
        b, t = input_ids.shape
        return SimpleNamespace(logits=HALF.expand(b, t, 3).clone(), past_key_values=None)


def test_training_sampler_uses_the_same_tie_rule() -> None:
    """The HF engine (training rollouts of non-Qwen3 models) used ``>`` before: it kept the 0.25 tokens at
    top_p = 0.5, where the HF policy and the KV engine dropped them."""
    reqs = [TokenRequest([0, 1], 40, (99,), 1.0, 0.5), TokenRequest([2], 40, (99,), 1.0, 0.5)]
    out = HFEngine(_FixedLM(), pad_id=0).generate(reqs, generator=torch.Generator().manual_seed(0))
    for res in out:
        assert res.ids == [1] * 40 and res.logprobs == [0.0] * 40 and res.finish_reason == "length"
