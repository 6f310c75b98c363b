"""repro.engine: the one rollout-engine protocol. Each implementation (the KV-cached ``KVSampler``, the generic
``HFEngine`` and the vLLM adapter ``repro.vllm_engine.VLLMEngine`` over a fake of vLLM's objects) honours the contract: ids and one log-prob per id, the log-probs of the sampled distribution,
``finish_reason`` (``stop`` on a stop id, ``length`` at ``max_new_tokens``) and the version stamp set by its owner."""

from __future__ import annotations

import _rl_fixtures as F
import pytest
import torch

from repro.engine import HFEngine, RolloutEngine, TokenRequest, uniform_settings
from repro.rl_metrics import version_metrics
from repro.sampler import KVSampler


def _engine(kind: str, model: torch.nn.Module) -> RolloutEngine:
    if kind == "vllm":  # the vLLM adapter over a faithful CPU fake of vLLM's objects (tests/vllm_fakes.py)
        from vllm_fakes import FakeVLLM

        from repro.vllm_engine import VLLMRollouts, VLLMSettings

        return VLLMRollouts(VLLMSettings(max_model_len=256), api=FakeVLLM().api())(model, 0)
    return KVSampler(model) if kind == "kv" else HFEngine(model, pad_id=0)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.set_num_threads(1)
    return F.setup().model.eval()


@pytest.mark.parametrize("kind", ["kv", "hf", "vllm"])
def test_ids_logprobs_length_and_version(kind: str, model: torch.nn.Module) -> None:
    eng = _engine(kind, model)
    assert isinstance(eng, RolloutEngine)
    eng.set_version(7)
    prompts = [[1, 2, 3, 4], [5, 6]]
    res = eng.generate([TokenRequest(p, 5) for p in prompts], generator=torch.Generator().manual_seed(0))
    assert eng.current_version() == 7
    for p, r in zip(prompts, res, strict=True):
        assert r.finish_reason == "length" and r.version == 7
        assert len(r.ids) == len(r.logprobs) == 5
        # at T = 1, top_p = 1 the behaviour log-probs are the model's log-softmax of the sampled ids
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=torch.tensor([p + r.ids])).logits[0].float(), -1)
        want = [float(lp[len(p) - 1 + t, i]) for t, i in enumerate(r.ids)]
        assert torch.allclose(torch.tensor(r.logprobs), torch.tensor(want), atol=1e-4)


@pytest.mark.parametrize("kind", ["kv", "hf", "vllm"])
def test_stop_id_ends_the_turn_with_finish_reason_stop(kind: str, model: torch.nn.Module) -> None:
    vocab = model.config.vocab_size
    eng = _engine(kind, model)
    reqs = [TokenRequest([1, 2, 3], 8, stop_ids=tuple(range(vocab))), TokenRequest([4, 5], 3)]
    stopped, ran = eng.generate(reqs, generator=torch.Generator().manual_seed(1))
    assert stopped.finish_reason == "stop" and len(stopped.ids) == len(stopped.logprobs) == 1
    assert ran.finish_reason == "length" and len(ran.ids) == 3
    assert stopped.version == ran.version == 0


def test_hf_engine_refuses_mixed_sampling_settings() -> None:
    with pytest.raises(ValueError, match="one temperature and top_p per batch"):
        uniform_settings([TokenRequest([1], 2, temperature=1.0), TokenRequest([1], 2, temperature=0.5)])


def test_version_stamps_reach_the_training_metrics() -> None:
    from repro.rollout import EnvOutcome, RolloutSample
    from repro.tokenizer import EncodedConversation

    def sample(version: int, reasons: list[str]) -> RolloutSample:
        return RolloutSample(item=0, index=0, instance_id="t", encoded=EncodedConversation([], [], [], [], [], [], []),
                             texts=[], verdicts=[], truncated_turns=[],
                             outcome=EnvOutcome(resolved=False), version=version, finish_reasons=reasons)  # type: ignore[arg-type]

    m = version_metrics([[sample(3, ["stop", "length"]), sample(4, ["stop"])]], step=4)
    assert m == {"rollout/staleness_mean": 0.5, "rollout/staleness_max": 1, "rollout/finish_length_frac": 1 / 3}


@pytest.mark.parametrize("kind", ["kv", "hf", "vllm"])
def test_evaluation_policy_reports_the_engines_finish_reason_and_version(kind: str, model: torch.nn.Module) -> None:
    """``SamplerPolicy`` (the evaluation policy) over either engine: token ids and log-probs as sampled, the
    engine's finish reason, and its version stamp as the typed ``PolicyOutput.policy_version``."""
    import random

    from harness.schema import Message
    from repro.sampler import SamplerPolicy

    eng = _engine(kind, model)
    eng.set_version(11)
    pol = SamplerPolicy(eng, F.tokenizer(), max_new_tokens=4)
    out = pol.act([Message(role="user", content="fix the bug")], tools=[], rng=random.Random(0))
    assert out.finish_reason in ("stop", "length") and out.policy_version == 11
    assert len(out.token_ids) == len(out.logprobs) >= 1
    assert (out.finish_reason == "length") == (len(out.token_ids) == 4 and out.token_ids[-1] != pol.enc.im_end)


def test_the_protocol_lives_in_the_harness_and_is_torch_free() -> None:
    """One protocol: ``repro.engine`` re-exports the harness's records and Protocol (the same objects), and the
    harness module that defines them imports no torch."""
    import subprocess
    import sys

    import harness.policies.engine_protocol as hp
    import repro.engine as re_

    assert (re_.TokenRequest, re_.TokenResult, re_.RolloutEngine, re_.FinishReason) == (
        hp.TokenRequest, hp.TokenResult, hp.RolloutEngine, hp.FinishReason)
    code = "import sys, harness.policies.engine_protocol; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
