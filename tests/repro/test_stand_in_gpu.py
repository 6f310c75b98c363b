"""The training and sampling paths keep to the model's device, checked on the CPU with the meta device standing in
for a GPU (``tests/_stand_in_gpu.py``; issue 40). Three faults that a GPU would have shown first — a sampler drawing
with the CPU generator from a GPU's probabilities, the FSDP teacher placeholder built on the CPU, and the distill
stage's CPU inputs — fail these tests on the code before their fixes (checked: 16 of the first 22 fail at
77731f1~1, 10 at 83b2957; the distill test fails with 21c218f~1's distill.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from _stand_in_gpu import DeviceMix, stand_in_gpu, thread_checks, to_stand_in
from test_train_step import _groups, _hint

import repro.distributed as distributed
from repro.models import build_model
from repro.tokenizer import ChatEncoder
from repro.trainer_step import LossRoot, build_batch, collate


@pytest.fixture()
def stand_in_model_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """``model.device`` resolves to the stand-in device wherever the training code resolves it."""
    import repro.distill as distill

    for module in (distributed, distill):
        monkeypatch.setattr(module, "train_device", lambda want: torch.device("meta"))


def test_the_stand_in_refuses_what_a_gpu_refuses_and_allows_the_rest() -> None:
    cpu = torch.arange(4.0)
    with stand_in_gpu() as dev:
        x = torch.ones(4, device=dev)
        with pytest.raises(DeviceMix, match="add"):
            x + cpu
        with pytest.raises(DeviceMix, match="embedding"):
            torch.nn.functional.embedding(torch.tensor([[1, 2]]), torch.ones(5, 3, device=dev))
        with pytest.raises(DeviceMix, match="generator on cpu"):
            torch.multinomial(torch.ones(2, 5, device=dev), 1, generator=torch.Generator().manual_seed(0))
        with pytest.raises(DeviceMix, match="equal"):
            torch.equal(x, cpu)
        assert torch.equal(x, x.clone()) and x.nonzero().shape == (4, 1)  # value-dependent: all count as nonzero
        assert (x * torch.tensor(2.0)).device.type == dev  # a 0-dim CPU tensor is a scalar: allowed
        assert x[torch.tensor([0, 2])].shape == (2,)  # a CPU index: allowed
        assert x.to(dev).device.type == dev and x.to("cpu").tolist() == [1.0] * 4  # copies: allowed
        assert float(x.sum()) == 0.0 and x.tolist() == [0.0] * 4  # values read as zeros
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):  # no meta autocast: a no-op
            assert (x @ x).dtype == torch.float32
    assert float(cpu.sum()) == 6.0  # outside the block nothing is changed


@pytest.mark.parametrize("arm", ["tg", "tg_kl_is", "tg_sampled_token", "tg_per_turn_ctx", "opd_only", "grpo"])
@pytest.mark.parametrize("packed", [True, False])
def test_the_trainer_step_keeps_to_the_models_device(arm: str, packed: bool) -> None:
    """Forward and backward of the loss root, as under FSDP (the collective teacher), for a micro-batch with KL rows
    and one without (whose teacher forward is the one-token placeholder)."""
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config(arm)
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    without_kl = [t for t in plan.trajs if not t.views][:2]
    to_stand_in(s.model)
    with stand_in_gpu() as dev:
        root = LossRoot(s.model, cfg)
        root.collective_teacher = True
        for trajs in (plan.trajs, without_kl):
            loss, _ = root(collate(trajs, 0, padding_free=packed).to(dev), plan.n_pg, plan.n_kl)
            loss.backward()
            assert loss.device.type == dev
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in s.model.parameters() if p.requires_grad)


def test_both_samplers_keep_to_the_models_device_with_a_cpu_generator() -> None:
    from repro.engine import HFEngine
    from repro.sampler import KVSampler, TokenRequest

    model = to_stand_in(build_model("nano", 97, seed=3).eval())
    req = TokenRequest([5, 6, 7, 8], 6, (2,), 0.7, 0.7)
    with stand_in_gpu():
        for engine in (KVSampler(model), HFEngine(model, 0)):
            res = engine.generate([req, req], generator=torch.Generator().manual_seed(0))
            assert [len(r.ids) for r in res] == [6, 6], type(engine).__name__


@pytest.mark.parametrize("sets", [
    pytest.param(("--arm", "tg", "model.precision=bf16-mixed", "model.activation_checkpointing=true"), id="tg-bf16"),
    pytest.param(("--arm", "tg_sampled_token", "optim.padding_free=false"), id="sampled-token-padded"),
    pytest.param(("--arm", "tg_ema_teacher", "async.enabled=true", "async.max_staleness=1"), id="ema-async"),
    pytest.param(("--arm", "tg_fixed_teacher", "model.lora.enabled=true"), id="lora-fixed-teacher"),
])
@pytest.mark.usefixtures("stand_in_model_device")
def test_train_rl_keeps_to_the_models_device(sets: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole RL steps (rollouts with the sampler, the trainer step, the optimizer, weight publication, the
    checkpoint) with ``model.device`` resolved to the stand-in device."""
    from repro.async_producer import AsyncProducer
    from repro.train import train_rl

    produce = AsyncProducer._run

    def checked(self: AsyncProducer) -> None:
        with thread_checks():
            produce(self)

    monkeypatch.setattr(AsyncProducer, "_run", checked)  # the async producer samples in a thread of its own
    cfg = F.config(sets[1], "rollout.max_new_tokens=6", *sets[2:])
    setup = F.setup()
    to_stand_in(setup.model)
    with tempfile.TemporaryDirectory() as tmp, stand_in_gpu():
        info = train_rl(cfg, Path(tmp) / "run", setup=setup)
        assert info.step == 2
    assert next(setup.model.parameters()).device.type == "meta"
    assert setup.model.lm_head.weight is setup.model.model.embed_tokens.weight


@pytest.mark.usefixtures("stand_in_model_device")
def test_train_rl_with_vllm_http_servers_keeps_to_the_models_device(tmp_path: Path) -> None:
    """``rollout.engine = "vllm_http"``: the trainer on the stand-in device pushes its weights to a fake server on
    loopback (which runs on the CPU in a thread of its own) and trains on what the server sampled."""
    from test_vllm_http import http_config
    from vllm_http_fake import FakeServer

    from repro.rl_setup import engine_factory_for
    from repro.train import train_rl

    served = tmp_path / "policy"
    F.setup(seed=0).model.save_pretrained(served, safe_serialization=True)
    with FakeServer(served) as srv:
        cfg = http_config(served, srv.url)
        setup = F.setup(seed=0)
        setup.engine_factory = engine_factory_for(cfg)
        to_stand_in(setup.model)
        with stand_in_gpu():
            info = train_rl(cfg, tmp_path / "run", setup=setup)
        assert info.step == 2 and srv.reloads == 2


@pytest.mark.usefixtures("stand_in_model_device")
def test_the_gpu_checks_rl_part_keeps_to_the_models_device(tmp_path: Path) -> None:
    """``scripts/gpu_check.sh``'s first part (``repro.gpu_check_rl.run_rl``: train_rl with the measured sampler and
    the trainer's log-probs of every sampled token) at toy sizes, its model on the stand-in device."""
    from repro.gpu_check import parser
    from repro.gpu_check_rl import run_rl

    args = parser().parse_args(["--preset", "nano", "--groups", "2", "--group-size", "2", "--max-new-tokens", "6"])
    with stand_in_gpu():
        result = run_rl(args, tmp_path, device="cpu")  # model.device's value; train_device resolves it to meta
    # a device mix would have raised; the log-prob bound compares values, which mean nothing on the stand-in
    assert result["steps"] == 2 and result["tokens"] > 0 and result["logprob_tokens_compared"] > 0


@pytest.mark.parametrize("part", ["run_throughput", "run_lora"])
def test_the_gpu_checks_throughput_and_lora_parts_keep_to_their_device(part: str, tmp_path: Path) -> None:
    """The Qwen3-shaped model of the ``throughput`` and ``lora`` parts, built on the device the check names (one
    layer, a small vocabulary here), trained on packed batches under bf16 autocast. (The ``kl`` part seeds a generator
    on its device, which meta has not; its tensors are all made there.)"""
    import repro.gpu_check_parts as parts
    from repro.gpu_check import parser

    args = parser().parse_args(["--tokens", "256", "--doc-tokens", "96", "--train-steps", "1", "--layers", "1",
                                "--vocab", "1000"])
    with stand_in_gpu() as dev:
        result = getattr(parts, part)(args, tmp_path, device=dev)
    # a device mix would have raised; whether the adapters moved is a question of values, which the stand-in has not
    assert result.get("tokens_per_step", result.get("tokens", 0)) > 0


@pytest.mark.usefixtures("stand_in_model_device")
def test_the_distill_stage_keeps_to_the_models_device(tmp_path: Path) -> None:
    """``tgsuite train distill``'s stage (pool rollouts, then the fit against the frozen teacher copy) with
    ``model.device`` resolved to the stand-in device."""
    import repro.distill as distill

    cfg = F.config("tg", "rollout.max_new_tokens=8", "distill.pool_rollouts=3", "distill.pool_tasks=2",
                   "distill.steps=2", "distill.batch=2", "distill.min_reward=-1.0")
    setup = F.setup()
    to_stand_in(setup.model)
    with stand_in_gpu():
        info = distill.train_distill(cfg, tmp_path / "d", setup=setup)
    assert info.step == 2 and next(setup.model.parameters()).device.type == "meta"


@pytest.mark.parametrize("settings", [{}, {"top_k": 5}, {"logprobs_mode": "raw"}, {"temperature": 0.0}],
                         ids=["sampling", "top-k", "raw-logprobs", "greedy"])
def test_the_evaluation_policy_keeps_to_the_models_device(settings: dict) -> None:
    """``HFPolicy`` (what ``tgsuite eval`` runs a checkpoint with; it loads onto CUDA when one is visible): one
    turn, with the CPU generator each turn seeds."""
    import random

    from harness.policies.hf import HFPolicy
    from harness.schema import Message

    s = F.setup()
    to_stand_in(s.model)
    msgs = [Message(role="system", content="You fix bugs."), Message(role="user", content="Fix bug 1.")]
    with stand_in_gpu():
        out = HFPolicy(s.model, s.tokenizer, max_new_tokens=5, **settings).act(msgs, tools=[], rng=random.Random(0))
    assert 1 <= len(out.token_ids) == len(out.logprobs) <= 5
