"""What only a GPU shows (issue 40; ``gpu`` tests, skipped without CUDA): every sampler draws with the CPU generator
the rollouts seed (``torch.multinomial`` refuses a generator of another device); a packed, checkpointed backward
runs on the autograd engine's CUDA thread; the collective teacher's placeholder forward (FSDP) takes its one token
from the student's ids on the GPU. ``scripts/gpu_check.sh`` runs the same paths inside ``train_rl``."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from repro.models import build_model

pytestmark = pytest.mark.gpu

V = 97


def test_every_engine_samples_on_the_gpu_with_a_cpu_generator() -> None:
    from harness.policies.hf_engine import sample_token
    from repro.engine import HFEngine
    from repro.sampler import KVSampler, TokenRequest

    model = build_model("nano", V, seed=3).cuda().eval()
    req = TokenRequest([5, 6, 7, 8], 6, (2,), 0.7, 0.7)
    for engine in (KVSampler(model), HFEngine(model, 0)):
        cpu = torch.Generator().manual_seed(0)
        res = engine.generate([req, req], generator=cpu)
        assert all(len(r.ids) > 0 and all(0 <= t < V for t in r.ids) for r in res), type(engine).__name__
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[5, 6, 7]], device="cuda")).logits[0, -1]
    tok, lp = sample_token(logits, torch.Generator().manual_seed(0), temperature=0.7, top_p=0.7)
    assert 0 <= tok < V and lp <= 0


def test_a_packed_checkpointed_backward_on_the_gpu_equals_one_without_checkpointing() -> None:
    from repro.distributed import activation_checkpointing
    from repro.packing import pack, packed_attention, packed_nll

    gen = torch.Generator().manual_seed(0)
    batch = pack([(torch.randint(3, V, (n,), generator=gen).tolist(), [1] * n) for n in (5, 9, 4)])
    batch = replace(batch, input_ids=batch.input_ids.cuda(), position_ids=batch.position_ids.cuda(),
                    targets=batch.targets.cuda(), classes=batch.classes.cuda())
    grads = []
    for checkpointed in (False, True):
        model = build_model("nano", V, seed=3).cuda().train()
        activation_checkpointing(model, checkpointed)
        with packed_attention(model):
            nll, _ = packed_nll(model, batch)
            nll.backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads, strict=True):  # the recompute is exact; the tolerance covers atomic-add ordering
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_distill_stage_runs_on_model_device(tmp_path) -> None:
    import _rl_fixtures as F

    from repro.distill import train_distill

    cfg = F.config("tg", "model.device=cuda", "rollout.max_new_tokens=8", "distill.pool_rollouts=3",
                   "distill.pool_tasks=2", "distill.steps=2", "distill.batch=2", "distill.min_reward=-1.0")
    setup = F.setup()
    info = train_distill(cfg, tmp_path / "d", setup=setup)
    assert info.step == 2 and next(setup.model.parameters()).is_cuda
    assert F.metrics(tmp_path / "d")[0]["loss/distill_kl"] > 0


def test_a_micro_batch_without_kl_rows_runs_the_collective_teachers_placeholder_on_the_gpu() -> None:
    import _rl_fixtures as F
    from test_train_step import _groups, _hint

    from repro.tokenizer import ChatEncoder
    from repro.trainer_step import LossRoot, build_batch, collate

    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config("tg")
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    root = LossRoot(s.model.cuda(), cfg)
    root.collective_teacher = True  # as under FSDP: every micro-batch runs a teacher forward
    mb = collate([t for t in plan.trajs if not t.views][:2], 0).to("cuda")
    loss, terms = root(mb, plan.n_pg, plan.n_kl)
    loss.backward()
    assert terms.kl is None and torch.isfinite(loss)
