"""repro.vllm_engine: the vLLM adapter's contract on CPU, against the faithful fake of vLLM's objects in
``tests/vllm_fakes.py`` (the protocol-level tests shared with the other engines are in ``test_engine.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from vllm_fakes import FakeVLLM

from harness.policies.sampling import sampling_logprobs
from repro.config import ConfigError
from repro.engine import TokenRequest
from repro.vllm_engine import (
    VLLMEngine,
    VLLMRollouts,
    VLLMSettings,
    VLLMUnavailable,
    finish_reason_of,
    import_vllm,
)


@pytest.fixture()
def model() -> torch.nn.Module:
    torch.set_num_threads(1)
    return F.setup().model.eval()


def _rollouts(fake: FakeVLLM) -> VLLMRollouts:
    return VLLMRollouts(VLLMSettings(max_model_len=256, max_num_seqs=8), api=fake.api())


def _processed(model: torch.nn.Module, prompt: list[int], ids: list[int], t: float, top_p: float) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
    lp = sampling_logprobs(logits, temperature=t, top_p=top_p)
    return [float(lp[len(prompt) - 1 + k, i]) for k, i in enumerate(ids)]


def test_engine_is_built_for_token_io_processed_logprobs_and_in_process_weights(model: torch.nn.Module) -> None:
    fake = FakeVLLM()
    eng = _rollouts(fake)(model, 0)
    (llm,) = fake.built
    args = llm.engine_args
    assert args["logprobs_mode"] == "processed_logprobs" and args["skip_tokenizer_init"] is True
    assert args["distributed_executor_backend"] == "external_launcher"
    assert (args["max_model_len"], args["max_num_seqs"], args["dtype"]) == (256, 8, "bfloat16")
    assert _rollouts(fake)(model, 0) is not eng and len(fake.built) == 2  # one LLM per factory
    factory = _rollouts(fake)
    assert factory(model, 0) is factory(model, 0) and len(fake.built) == 3  # the same engine on every call


def test_logprobs_are_the_sampled_distributions_at_temperature_and_top_p(model: torch.nn.Module) -> None:
    fake = FakeVLLM()
    eng = _rollouts(fake)(model, 0)
    prompt = [5, 6, 7]
    (res,) = eng.generate([TokenRequest(prompt, 6, temperature=0.7, top_p=0.8)],
                          generator=torch.Generator().manual_seed(3))
    want = _processed(model, prompt, res.ids, 0.7, 0.8)
    assert torch.allclose(torch.tensor(res.logprobs), torch.tensor(want), atol=1e-4)
    raw = _processed(model, prompt, res.ids, 1.0, 1.0)
    assert not torch.allclose(torch.tensor(res.logprobs), torch.tensor(raw), atol=1e-3)  # the test can tell


def test_requests_go_in_as_token_ids_with_only_the_callers_stop_ids(model: torch.nn.Module) -> None:
    fake = FakeVLLM()
    eng = _rollouts(fake)(model, 0)
    turn2 = [1, 2, 3, 9, 9, 4]  # a multi-turn prompt, passed on untouched
    eng.generate([TokenRequest(turn2, 3, stop_ids=(7, 8), temperature=0.9), TokenRequest([4], 2)],
                 generator=torch.Generator().manual_seed(0))
    (prompts, params), = fake.built[0].calls
    assert prompts == [turn2, [4]]
    p = params[0]
    assert (p.stop_token_ids, p.ignore_eos, p.logprobs, p.detokenize, p.max_tokens, p.temperature, p.n) == (
        [7, 8], True, 0, False, 3, 0.9, 1)
    assert params[0].seed != params[1].seed


def test_a_stop_id_on_the_last_allowed_token_is_stop_though_vllm_says_length(model: torch.nn.Module) -> None:
    fake = FakeVLLM()
    eng = _rollouts(fake)(model, 0)
    everything = tuple(range(model.config.vocab_size))
    (res,) = eng.generate([TokenRequest([1, 2], 1, stop_ids=everything)], generator=torch.Generator().manual_seed(0))
    llm = fake.built[0]
    vllm_said = llm._one("x", [1, 2], llm.calls[0][1][0]).outputs[0].finish_reason
    assert vllm_said == "length" and res.finish_reason == "stop" and len(res.ids) == 1


def test_other_vllm_finish_reasons_are_refused() -> None:
    req = TokenRequest([1], 4, stop_ids=(3,))
    assert finish_reason_of([1, 3], req, "stop") == "stop"
    assert finish_reason_of([1, 2, 2, 2], req, "length") == "length"
    with pytest.raises(RuntimeError, match="abort"):
        finish_reason_of([1], req, "abort")


def test_same_generator_seed_same_tokens(model: torch.nn.Module) -> None:
    eng = _rollouts(FakeVLLM())(model, 0)
    reqs = [TokenRequest([1, 2, 3], 5), TokenRequest([1, 2, 3], 5)]
    a = eng.generate(reqs, generator=torch.Generator().manual_seed(4))
    b = eng.generate(reqs, generator=torch.Generator().manual_seed(4))
    assert [r.ids for r in a] == [r.ids for r in b]


def test_weights_follow_the_version_and_prefix_cache_is_reset(model: torch.nn.Module) -> None:
    fake = FakeVLLM()
    factory = _rollouts(fake)
    eng = factory(model, 0)
    llm = fake.built[0]
    req = [TokenRequest([1, 2, 3], 4)]
    eng.set_version(0)
    eng.generate(req, generator=torch.Generator().manual_seed(0))
    assert eng.syncs == 1 and llm.prefix_resets == 1
    assert llm.runner.loaded[0] == {n for n, _ in model.named_parameters()}
    eng.generate(req, generator=torch.Generator().manual_seed(0))
    assert eng.syncs == 1  # same version: no second transfer
    with torch.no_grad():  # an "optimizer step" on the trainer's model
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    (stale,) = eng.generate(req, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(torch.tensor(stale.logprobs), torch.tensor(_processed(model, [1, 2, 3], stale.ids, 1, 1)),
                              atol=1e-3)  # version 0 still sampling: vLLM holds the old weights
    eng.set_version(1)
    (fresh,) = eng.generate(req, generator=torch.Generator().manual_seed(0))
    assert eng.syncs == 2 and llm.prefix_resets == 2 and fresh.version == 1
    assert torch.allclose(torch.tensor(fresh.logprobs), torch.tensor(_processed(model, [1, 2, 3], fresh.ids, 1, 1)),
                          atol=1e-4)
    with torch.no_grad():  # weights changed under an unchanged stamp (e.g. a distillation round): a rebind transfers
        model.lm_head.weight.mul_(1.5)
    assert factory(model, 0) is eng
    (again,) = eng.generate(req, generator=torch.Generator().manual_seed(0))
    assert eng.syncs == 3 and again.version == 1
    assert torch.allclose(torch.tensor(again.logprobs), torch.tensor(_processed(model, [1, 2, 3], again.ids, 1, 1)),
                          atol=1e-4)


def test_without_vllm_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch, model: torch.nn.Module) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(VLLMUnavailable, match=r"gpu\]"):
        import_vllm()
    with pytest.raises(VLLMUnavailable, match="gpu"):
        VLLMRollouts(VLLMSettings())(model, 0)


def test_engine_choice_is_wired_and_checked() -> None:
    from repro.rl_setup import check_engine_choice, default_engine, engine_factory_for

    cfg = F.config("grpo", "rollout.engine=vllm", "vllm.max_num_seqs=0", "vllm.max_model_len=0")
    factory = engine_factory_for(cfg)
    assert isinstance(factory, VLLMRollouts)
    r = cfg.rollout
    assert factory.settings.max_num_seqs == r.groups * r.group_size
    assert factory.settings.max_model_len == r.max_context_tokens + r.max_new_tokens
    assert engine_factory_for(F.config("grpo")) is default_engine
    with pytest.raises(ConfigError, match="engine_factory"):
        check_engine_choice(cfg, default_engine)
    with pytest.raises(ConfigError, match="vllm_http.weights_dir"):
        check_engine_choice(F.config("grpo", "rollout.engine=vllm_http"), None)


def test_two_rl_steps_with_vllm_rollouts_stamp_versions_and_sync_each_step(model: torch.nn.Module,
                                                                          tmp_path: Path) -> None:
    from repro.train import train_rl

    fake = FakeVLLM()
    setup = F.setup()
    setup.engine_factory = _rollouts(fake)
    train_rl(F.config("tg", "rollout.engine=vllm", "rollout.max_new_tokens=6"), tmp_path / "run", setup=setup)
    eng = setup.engine_factory.engine
    assert isinstance(eng, VLLMEngine) and eng.syncs == 2  # step 0's weights, then step 1's
    rows = F.metrics(tmp_path / "run")
    assert [r["rollout/staleness_max"] for r in rows] == [0, 0]
    assert eng.current_version() == 1


def test_lora_model_syncs_its_merged_weights(model: torch.nn.Module) -> None:
    """With LoRA adapters (repro.lora) vLLM gets the merged weights under the plain HF names and samples the adapted
    policy, also after the adapters change."""
    from repro.config import LoraCfg
    from repro.lora import apply_lora

    plain_names = {n for n, _ in model.named_parameters()}
    apply_lora(model, LoraCfg(enabled=True, r=4), seed=0)
    fake = FakeVLLM()
    eng = _rollouts(fake)(model, 0)
    llm = fake.built[0]
    req = [TokenRequest([1, 2, 3], 4)]
    with torch.no_grad():  # an "optimizer step" on the adapters only
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    eng.set_version(1)
    (out,) = eng.generate(req, generator=torch.Generator().manual_seed(0))
    assert llm.runner.loaded[-1] == plain_names
    assert torch.allclose(torch.tensor(out.logprobs), torch.tensor(_processed(model, [1, 2, 3], out.ids, 1, 1)),
                          atol=1e-4)
