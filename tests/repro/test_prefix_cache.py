"""repro.prefix_cache through KVSampler: reused K/V give the uncached results; weight updates invalidate them."""

from __future__ import annotations

import pytest
import torch

from repro.models import build_model
from repro.prefix_cache import PrefixCache
from repro.sampler import KVSampler, TokenRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


V, STOP = 97, 2


def _rand(n: int, seed: int) -> list[int]:
    return torch.randint(3, V, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _conversation(sampler: KVSampler, temperature: float, turns: int = 3) -> list:
    """Three agent-like turns: each prompt = the last prompt + its sampled ids + a new 'observation'; two
    rollouts per turn share the prompt (a GRPO group), a third conversation runs beside them."""
    prompts = [_rand(20, 0), _rand(33, 1)]
    out = []
    for t in range(turns):
        reqs = [TokenRequest(prompts[0], 9, (STOP,), temperature), TokenRequest(prompts[0], 9, (STOP,), temperature),
                TokenRequest(prompts[1], 6, (STOP,), temperature)]
        res = sampler.generate(reqs, generator=torch.Generator().manual_seed(t))
        out.append(res)
        prompts = [prompts[0] + res[0].ids + _rand(7 + t, 10 + t), prompts[1] + res[2].ids + _rand(4, 20 + t)]
    return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reused_prefixes_give_the_uncached_tokens_and_logprobs(temperature: float) -> None:
    model = build_model("nano", V, seed=11)
    plain = _conversation(KVSampler(model), temperature)
    cached_sampler = KVSampler(model, prefix_cache=8)
    cached = _conversation(cached_sampler, temperature)
    for a_turn, b_turn in zip(plain, cached, strict=True):
        for a, b in zip(a_turn, b_turn, strict=True):
            assert a.ids == b.ids and a.finish_reason == b.finish_reason
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)
    st = cached_sampler.prefix.stats  # type: ignore[union-attr]
    assert st.reused_tokens > 0.5 * (st.prompt_tokens - 20 - 33)  # later turns reuse most of their prompt


def test_an_optimizer_step_invalidates_the_cache() -> None:
    model = build_model("nano", V, seed=12)
    s = KVSampler(model, prefix_cache=4)
    p = _rand(30, 3)
    r1 = s.generate([TokenRequest(p, 5, temperature=0.0)], generator=torch.Generator())[0]
    assert len(s.prefix.entries) == 1  # type: ignore[union-attr]
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    model(input_ids=torch.tensor([p])).logits.sum().backward()
    opt.step()
    p2 = p + r1.ids + [5, 6]
    got = s.generate([TokenRequest(p2, 5, temperature=0.0)], generator=torch.Generator())[0]
    want = KVSampler(model).generate([TokenRequest(p2, 5, temperature=0.0)], generator=torch.Generator())[0]
    assert s.prefix.stats.invalidations == 1 and got.ids == want.ids  # type: ignore[union-attr]
    torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want.logprobs), rtol=0, atol=1e-5)


def test_lru_keeps_the_longest_and_evicts_the_oldest() -> None:
    c = PrefixCache(2)
    kv = [(torch.zeros(1, 6, 2), torch.zeros(1, 6, 2))]
    c.store([1, 2, 3], kv)
    c.store([1, 2, 3, 4, 5], kv)          # supersedes its own prefix
    assert [e.ids.tolist() for e in c.entries.values()] == [[1, 2, 3, 4, 5]]
    c.store([7, 8], kv)
    c.store([9], kv)                      # capacity 2: the oldest goes
    assert [e.ids.tolist() for e in c.entries.values()] == [[7, 8], [9]]
    assert c.lookup([7, 8, 1])[1] == 2 and c.lookup([4])[1] == 0 and c.lookup([9, 9])[1] == 1
    with pytest.raises(ValueError, match="capacity"):
        PrefixCache(0)
