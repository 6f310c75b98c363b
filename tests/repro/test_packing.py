"""Packed sequences (repro.packing): equal to one document at a time; masks; errors."""

from __future__ import annotations

import random

import pytest
import torch

from repro.models import build_model
from repro.packing import IGNORE, pack, packed_nll, packed_token_logprobs
from repro.precision import autocast
from repro.sft import sft_losses

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _docs(rng: random.Random, lengths: tuple[int, ...], vocab: int = 300) -> list:
    return [([rng.randrange(3, vocab) for _ in range(n)], [int(rng.random() < 0.6) for _ in range(n)])
            for n in lengths]


def test_packed_logprobs_equal_each_document_alone() -> None:
    model = build_model("nano", 300, seed=0)
    docs = _docs(random.Random(0), (5, 17, 1, 9, 30))
    lp, _ = packed_token_logprobs(model, pack(docs))
    alone = torch.cat([packed_token_logprobs(model, pack([d]))[0] for d in docs])
    assert lp.shape == alone.shape
    assert torch.allclose(lp, alone, atol=1e-5)
    # and the total equals the one-sequence SFT loss the trainer used before packing
    ref = sum(float(sft_losses(model, ids, act)[0].detach()) for ids, act in docs)
    assert float(packed_nll(model, pack(docs))[0].detach()) == pytest.approx(ref, rel=1e-5)


def test_no_attention_across_documents() -> None:
    """Changing the first document must not change the second's log-probs."""
    model = build_model("nano", 300, seed=0)
    a, b = _docs(random.Random(1), (12, 10))
    a2 = ([t + 1 for t in a[0]], a[1])
    lp1, w1 = packed_token_logprobs(model, pack([a, b]))
    lp2, w2 = packed_token_logprobs(model, pack([a2, b]))
    tail = w1 >= 12
    assert torch.equal(w1, w2)
    assert torch.allclose(lp1[tail], lp2[tail], atol=1e-6)
    assert not torch.allclose(lp1[~tail], lp2[~tail])


def test_targets_positions_and_splits() -> None:
    b = pack([([5, 6, 7], [0, 1, 0]), ([8, 9, 10, 11, 12], [1, 1, 1, 1, 1])], max_doc_len=3)
    assert b.cu_seqlens == (0, 3, 6, 8)
    assert b.n_split == 1
    assert b.position_ids[0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    # target of token t is token t+1 of the same piece, only where act[t+1] = 1; never across a boundary
    assert b.targets[0].tolist() == [6, IGNORE, IGNORE, 9, 10, IGNORE, 12, IGNORE]
    assert b.n_targets == 4 and b.n_tokens == 8


def test_bad_documents_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        pack([([1, 2, 3], [1, 1])])
    with pytest.raises(ValueError, match="no tokens"):
        pack([([], [])])


def test_packed_bf16_close_to_fp32_and_sampler_attention_untouched() -> None:
    model = build_model("nano", 300, seed=0)
    docs = _docs(random.Random(2), (40, 25))
    lp32, _ = packed_token_logprobs(model, pack(docs))
    with autocast("bf16-mixed"):
        lp16, _ = packed_token_logprobs(model, pack(docs))
    assert lp16.dtype == torch.float32
    assert (lp16 - lp32).abs().max() < 0.1
    assert model.config._attn_implementation == "sdpa"  # restored after the packed forward
