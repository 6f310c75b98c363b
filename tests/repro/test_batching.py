"""repro.batching: concurrent single-request calls are served as batches, each caller drawing from its own stream."""

from __future__ import annotations

import functools
import threading

import pytest
import torch

from repro.batching import BatchingEngine
from repro.models import build_model
from repro.sampler import KVSampler, RolloutEngine, TokenRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


V, STOP = 97, 2


@functools.lru_cache(maxsize=1)
def model():
    return build_model("nano", V, seed=5)


def _reqs(temperature: float) -> list[TokenRequest]:
    g = torch.Generator().manual_seed(0)
    return [TokenRequest(torch.randint(3, V, (n,), generator=g).tolist(), m, stop_ids=(STOP,), temperature=temperature)
            for n, m in zip([5, 19, 11, 27, 8, 14], [20, 7, 25, 12, 30, 16], strict=True)]


def _alone(req: TokenRequest, seed: int):
    return KVSampler(model()).generate([req], generator=torch.Generator().manual_seed(seed))[0]


def test_row_generators_make_each_row_independent_of_its_batch_mates() -> None:
    reqs = _reqs(1.0)
    gens = [torch.Generator().manual_seed(100 + i) for i in range(len(reqs))]
    batched = KVSampler(model()).generate(reqs, generator=torch.Generator(), row_generators=gens)
    for i, (req, r) in enumerate(zip(reqs, batched, strict=True)):
        a = _alone(req, 100 + i)
        assert r.ids == a.ids and r.finish_reason == a.finish_reason
        torch.testing.assert_close(torch.tensor(r.logprobs), torch.tensor(a.logprobs), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="one per request"):
        KVSampler(model()).generate(reqs, generator=torch.Generator(), row_generators=gens[:2])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_concurrent_callers_are_batched_and_get_their_own_results(temperature: float) -> None:
    reqs = _reqs(temperature)
    out: dict[int, object] = {}
    barrier = threading.Barrier(len(reqs))
    with BatchingEngine(KVSampler(model(), version=3), max_batch=16, window_s=0.5) as eng:
        assert isinstance(eng, RolloutEngine) and eng.max_len == model().config.max_position_embeddings

        def call(i: int) -> None:
            barrier.wait()
            out[i] = eng.generate([reqs[i]], generator=torch.Generator().manual_seed(100 + i))[0]

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert eng.stats.calls == len(reqs) and eng.stats.batches < len(reqs)  # at least two callers shared a batch
    for i, req in enumerate(reqs):
        a, r = _alone(req, 100 + i), out[i]
        assert r.ids == a.ids and r.version == 3  # type: ignore[attr-defined]
        torch.testing.assert_close(torch.tensor(r.logprobs), torch.tensor(a.logprobs), rtol=0, atol=1e-5)  # type: ignore[attr-defined]


def test_errors_reach_the_caller_and_a_closed_engine_refuses_work() -> None:
    eng = BatchingEngine(KVSampler(model()), window_s=0.0)
    with pytest.raises(ValueError, match="empty prompt_ids"):
        eng.generate([TokenRequest([], 4)], generator=torch.Generator())
    ok = eng.generate([TokenRequest([5, 6, 7], 3, temperature=0.0)], generator=torch.Generator())
    assert len(ok[0].ids) == 3  # the scheduler survived the bad request
    eng.close()
    with pytest.raises(RuntimeError, match="closed"):
        eng.generate([TokenRequest([5], 1)], generator=torch.Generator())
    with pytest.raises(ValueError, match="max_batch"):
        BatchingEngine(KVSampler(model()), max_batch=0)
