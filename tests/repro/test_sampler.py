"""repro.sampler: KVSampler equals the HF forward (greedy tokens, log-probs), samples the right distribution."""

from __future__ import annotations

import functools

import pytest
import torch

from repro.models import build_model
from repro.sampler import KVSampler, RolloutEngine, TokenRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V = 97
STOP = 2


@functools.lru_cache(maxsize=1)
def model():
    return build_model("nano", V, seed=3)


def _prompts(lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, V, (n,), generator=g).tolist() for n in lengths]


def _recompute_logprobs(prompt: list[int], ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        logits = model()(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits / temperature, -1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)


def test_greedy_matches_hf_generate_with_ragged_batch() -> None:
    prompts = _prompts([9, 23, 4, 16], seed=0)
    s = KVSampler(model(), version=5)
    assert isinstance(s, RolloutEngine)
    res = s.generate([TokenRequest(p, 12, temperature=0.0) for p in prompts], generator=torch.Generator())
    for p, r in zip(prompts, res, strict=True):
        hf = model().generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                              pad_token_id=0)[0, len(p):].tolist()
        assert r.ids == hf and r.version == 5 and r.finish_reason == "length"
        torch.testing.assert_close(torch.tensor(r.logprobs), _recompute_logprobs(p, r.ids), rtol=0, atol=1e-5)


def test_sampled_logprobs_are_the_behaviour_logprobs_and_stop_works() -> None:
    prompts = _prompts([7, 15, 11], seed=1)
    reqs = [TokenRequest(p, n, stop_ids=(STOP, 5, 6, 7), temperature=t)
            for p, n, t in zip(prompts, [30, 5, 30], [1.0, 0.7, 1.3], strict=True)]
    res = KVSampler(model()).generate(reqs, generator=torch.Generator().manual_seed(0))
    for req, r in zip(reqs, res, strict=True):
        assert len(r.ids) <= req.max_new_tokens
        if r.finish_reason == "stop":
            assert r.ids[-1] in req.stop_ids and not set(r.ids[:-1]) & set(req.stop_ids)
        else:
            assert len(r.ids) == req.max_new_tokens
        torch.testing.assert_close(torch.tensor(r.logprobs), _recompute_logprobs(req.prompt_ids, r.ids,
                                                                                 req.temperature), rtol=0, atol=1e-5)


def test_seeded_sampling_is_reproducible() -> None:
    reqs = [TokenRequest(p, 10) for p in _prompts([5, 8], seed=2)]
    a = KVSampler(model()).generate(reqs, generator=torch.Generator().manual_seed(42))
    b = KVSampler(model()).generate(reqs, generator=torch.Generator().manual_seed(42))
    assert [r.ids for r in a] == [r.ids for r in b]


def test_first_token_frequencies_follow_the_softmax() -> None:
    """3,000 rollouts of one prompt (one shared prefill): empirical first-token frequencies vs the model's softmax."""
    prompt = _prompts([6], seed=4)[0]
    n = 3000
    res = KVSampler(model(), max_batch=n).generate([TokenRequest(prompt, 1)] * n,
                                                   generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        p = torch.softmax(model()(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)
    freq = torch.bincount(torch.tensor([r.ids[0] for r in res]), minlength=V).float() / n
    # total variation distance for 3,000 draws over 97 near-uniform outcomes is ~0.07 at most
    assert 0.5 * (freq - p).abs().sum() < 0.1
    # a wrong distribution (uniform instead of the model's) is not what we sample: logprobs equal log p
    lp = torch.tensor([r.logprobs[0] for r in res[:50]])
    torch.testing.assert_close(lp, p.log()[torch.tensor([r.ids[0] for r in res[:50]])], rtol=0, atol=1e-5)


def test_top_p_restricts_to_the_nucleus() -> None:
    prompt = _prompts([6], seed=5)[0]
    with torch.no_grad():
        logp = torch.log_softmax(model()(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)
    sp, si = torch.sort(logp, descending=True)
    k = int((sp.exp().cumsum(0) < 0.3).sum()) + 1
    nucleus = set(si[:k].tolist())
    res = KVSampler(model(), max_batch=400).generate([TokenRequest(prompt, 1, top_p=0.3)] * 400,
                                                     generator=torch.Generator().manual_seed(2))
    assert {r.ids[0] for r in res} <= nucleus
    renorm = logp[si[:k]] - torch.logsumexp(logp[si[:k]], 0)
    lookup = dict(zip(si[:k].tolist(), renorm.tolist(), strict=True))
    assert all(abs(r.logprobs[0] - lookup[r.ids[0]]) < 1e-5 for r in res)


def test_invalid_requests_raise() -> None:
    s = KVSampler(model())
    with pytest.raises(ValueError, match="max_position_embeddings"):
        s.generate([TokenRequest([3] * 10, model().config.max_position_embeddings)], generator=torch.Generator())
    with pytest.raises(ValueError, match="empty prompt"):
        s.generate([TokenRequest([], 3)], generator=torch.Generator())
    with pytest.raises(ValueError, match="top_p"):
        s.generate([TokenRequest([3], 3, top_p=0.0)], generator=torch.Generator())


def test_bf16_decode_stays_close_to_fp32_and_leaves_the_weights_alone() -> None:
    prompts = _prompts([9, 23, 4], seed=4)
    reqs = [TokenRequest(p, 16, temperature=1.0) for p in prompts]
    res = KVSampler(model(), dtype=torch.bfloat16).generate(reqs, generator=torch.Generator().manual_seed(0))
    assert all(p.dtype == torch.float32 for p in model().parameters())
    diffs = torch.cat([torch.tensor(r.logprobs) - _recompute_logprobs(q.prompt_ids, r.ids)
                       for q, r in zip(reqs, res, strict=True)]).abs()
    assert 0 < float(diffs.max()) < 0.1, float(diffs.max())   # bf16 rounding, not fp32 (0) and not a wrong forward
    with pytest.raises(ValueError, match="dtype"):
        KVSampler(model(), dtype=torch.float16)
