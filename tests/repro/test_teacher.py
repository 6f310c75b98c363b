"""Teacher weights (guidance.teacher = live | ema | fixed; arms tg_ema_teacher / tg_fixed_teacher, METHOD §6.9).

Fixed teacher = the step-0 weights after the student moved; ema teacher = the closed-form EMA of the saved student
trajectory; the copy gets no gradient, is not in the optimizer nor in the student's files; the KL really uses the
copy (closed-form check against full-logit forwards of the expected teacher); exact resume for ema.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import _rl_fixtures as F
import pytest
import torch
from safetensors.torch import load_file
from test_train_step import _groups, _hint

from repro.checkpoint import load_teacher, load_trainer_state, read_manifest
from repro.compute import ModelShape, plan
from repro.config import ConfigError, load_config
from repro.tokenizer import ChatEncoder
from repro.train import train_rl
from repro.trainer_step import LossRoot, build_batch, collate

FAST = ["rollout.max_new_tokens=8", "run.checkpoint_every=1"]
RATE = 0.05


def _ckpt(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step_{step}"


def _student(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(_ckpt(run, step) / "model.safetensors"))


def _teacher_model(run: Path, step: int) -> torch.nn.Module:
    m = F.setup(seed=99).model  # different init: every teacher value must come from the file
    load_teacher(_ckpt(run, step), m)
    return m


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_arms_parse_and_validate() -> None:
    ema, fixed = load_config(arm="tg_ema_teacher"), load_config(arm="tg_fixed_teacher")
    tg = load_config(arm="tg")
    assert (ema.guidance.teacher, ema.guidance.teacher_ema_rate, ema.guidance.lam) == ("ema", 0.05, tg.guidance.lam)
    assert (fixed.guidance.teacher, fixed.guidance.lam) == ("fixed", tg.guidance.lam)
    assert tg.guidance.teacher == "live"
    # every other key equals the tg arm's
    for cfg in (ema, fixed):
        a, b = cfg.to_dict(), tg.to_dict()
        a["run"].pop("arm"), b["run"].pop("arm")
        a["guidance"].pop("teacher"), b["guidance"].pop("teacher")
        assert a == b
    with pytest.raises(ConfigError, match="guidance.teacher"):
        load_config(arm="tg", sets=["guidance.teacher=rollout"])
    with pytest.raises(ConfigError, match="teacher_ema_rate"):
        load_config(arm="tg_ema_teacher", sets=["guidance.teacher_ema_rate=0.0"])


@pytest.mark.parametrize("kind", ["ema", "fixed"])
def test_teacher_copy_is_frozen_and_outside_the_student(kind: str) -> None:
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config("tg", f"guidance.teacher={kind}")
    root = LossRoot(s.model, cfg)
    assert root.teacher_lm is not None and not any(p.requires_grad for p in root.teacher_lm.parameters())
    student_ptrs = {p.data_ptr() for p in s.model.parameters()}
    assert not student_ptrs & {p.data_ptr() for p in root.teacher_lm.parameters()}  # a real copy, not an alias
    assert not any(k.startswith("teacher") for k in s.model.state_dict())  # not in save_pretrained's tensors
    assert any(n.startswith("teacher_lm.") for n, _ in root.named_parameters())  # inside the root (one FSDP wrap)
    plan_ = build_batch(_groups(enc), cfg, _hint(enc))
    loss, terms = root(collate(plan_.trajs, 0), plan_.n_pg, plan_.n_kl)
    stats = terms.stats
    loss.backward()
    assert stats["kl_loss"] > 0
    assert all(p.grad is None for p in root.teacher_lm.parameters())
    assert all(p.grad is not None for p in s.model.parameters())
    # live (the default) holds no copy; λ = 0 holds none either (nothing reads it)
    assert LossRoot(F.setup().model, F.config("tg")).teacher_lm is None
    assert LossRoot(F.setup().model, F.config("grpo", f"guidance.teacher={kind}")).teacher_lm is None


@pytest.mark.parametrize("kind", ["ema", "fixed"])
def test_kl_uses_the_expected_teacher_weights(kind: str) -> None:
    """After 2 optimizer steps the per-token KL equals KL(expected teacher ‖ student) (the default forward
    direction) from plain full-logit forwards, where the expected teacher is θ_0 (fixed) or (1−r)²θ_0 + r(1−r)θ_1 +
    rθ_2 (ema)."""
    torch.manual_seed(0)
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config("opd_only", f"guidance.teacher={kind}")
    assert cfg.guidance.direction == "forward"
    plan_ = build_batch(_groups(enc), cfg, _hint(enc))
    root = LossRoot(s.model, cfg)
    opt = torch.optim.AdamW(s.model.parameters(), lr=0.01)
    states = [copy.deepcopy(s.model.state_dict())]
    for _ in range(2):
        opt.zero_grad()
        root(collate(plan_.trajs, 0), plan_.n_pg, plan_.n_kl)[0].backward()
        opt.step()
        root.after_optimizer_step()
        states.append(copy.deepcopy(s.model.state_dict()))
    weights = [1.0, 0.0, 0.0] if kind == "fixed" else [(1 - RATE) ** 2, RATE * (1 - RATE), RATE]
    expected = copy.deepcopy(s.model)
    expected.load_state_dict({k: sum(w * st[k] for w, st in zip(weights, states, strict=True)) for k in states[0]})
    assert any(not torch.equal(states[0][k], states[2][k]) for k in states[0])  # the student moved
    mb = collate(plan_.trajs, 0, padding_free=False)  # padded, so the oracle below can run plain HF forwards
    stats = root(mb, plan_.n_pg, plan_.n_kl)[1].stats
    assert mb.teacher is not None
    with torch.no_grad():
        def rows(model: torch.nn.Module, seqs: Any, idx: torch.Tensor) -> torch.Tensor:
            z = model(input_ids=seqs.ids, attention_mask=seqs.mask).logits
            return torch.log_softmax(z.reshape(-1, z.shape[-1])[idx], -1)

        ls = rows(s.model, mb.student, mb.act_rows[mb.kl_idx])
        lt = rows(expected, mb.teacher, mb.kl_teacher_rows)
        want = (lt.exp() * (lt - ls)).sum(-1)
        live = rows(s.model, mb.teacher, mb.kl_teacher_rows)
        live_kl = (live.exp() * (live - ls)).sum(-1)
    got = torch.tensor(stats["kl_values"])
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(got, live_kl, rtol=1e-3, atol=1e-5)  # and it is not the live teacher's KL


def test_fixed_teacher_stays_at_step_zero_while_the_student_moves(tmp_path: Path) -> None:
    run = tmp_path / "fixed"
    train_rl(F.config("tg_fixed_teacher", *FAST), run, setup=F.setup())
    init = F.setup().model  # the same seed builds the step-0 weights
    teacher = _teacher_model(run, 2)
    ids = torch.tensor([list(range(5, 45))])
    assert torch.equal(_logits(teacher, ids), _logits(init, ids))
    student = F.setup(seed=99).model
    student.load_state_dict(_student(run, 2), strict=False)
    student.tie_weights()
    assert not torch.allclose(_logits(student, ids), _logits(init, ids), atol=1e-5)


def test_ema_teacher_is_the_closed_form_ema_of_the_student_trajectory(tmp_path: Path) -> None:
    run = tmp_path / "ema"
    train_rl(F.config("tg_ema_teacher", *FAST), run, setup=F.setup())
    th0 = F.setup().model.state_dict()
    th1, th2 = _student(run, 1), _student(run, 2)
    got = _teacher_model(run, 2).state_dict()
    assert set(th1) <= set(got)
    for k in th1:
        want = (1 - RATE) ** 2 * th0[k] + RATE * (1 - RATE) * th1[k] + RATE * th2[k]
        assert torch.allclose(got[k], want, rtol=0, atol=1e-6), k
    assert any(not torch.allclose(got[k], th2[k], atol=1e-6) for k in th1)  # not the live weights
    assert any(not torch.allclose(got[k], th0[k], atol=1e-6) for k in th1)  # and not frozen
    t1 = _teacher_model(run, 1).state_dict()
    assert all(torch.allclose(t1[k], (1 - RATE) * th0[k] + RATE * th1[k], rtol=0, atol=1e-6) for k in th1)


def test_arms_run_two_steps_and_step_one_equals_live(tmp_path: Path) -> None:
    """At step 1 every teacher equals θ_0, so the three arms agree exactly; at step 2 they differ."""
    rows = {}
    for arm in ("tg", "tg_ema_teacher", "tg_fixed_teacher"):
        train_rl(F.config(arm, *FAST), tmp_path / arm, setup=F.setup())
        rows[arm] = F.metrics(tmp_path / arm)
        assert [r["step"] for r in rows[arm]] == [1, 2]
    for arm in ("tg_ema_teacher", "tg_fixed_teacher"):
        assert rows[arm][0]["loss/total"] == rows["tg"][0]["loss/total"]
        assert rows[arm][0]["loss/kl"] == rows["tg"][0]["loss/kl"]
        assert rows[arm][1]["loss/kl"] != rows["tg"][1]["loss/kl"]
        man = read_manifest(tmp_path / arm)
        assert man.arm == arm and man.config["guidance"]["teacher"] == arm.split("_")[1]
        n_student = sum(p.numel() for p in F.setup().model.parameters())
        assert man.model_params["teacher_copy"] == n_student == man.model_params["total"]
        assert man.compute["tokens"]["teacher"] == read_manifest(tmp_path / "tg").compute["tokens"]["teacher"]
        # the optimizer holds the student's parameters only
        opt = load_trainer_state(_ckpt(tmp_path / arm, 2))["optimizer"]
        assert sum(len(g["params"]) for g in opt["param_groups"]) == len(list(F.setup().model.parameters()))
    assert rows["tg_ema_teacher"][1]["loss/kl"] != rows["tg_fixed_teacher"][1]["loss/kl"]
    assert not (_ckpt(tmp_path / "tg", 2) / "teacher.safetensors").exists()
    assert "teacher_copy" not in read_manifest(tmp_path / "tg").model_params


def test_ema_resume_is_exact(tmp_path: Path) -> None:
    common = ["rollout.max_new_tokens=8", "rollout.groups=1", "run.checkpoint_every=2"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    train_rl(F.config("tg_ema_teacher", *common, "run.steps=4"), straight, setup=F.setup())
    train_rl(F.config("tg_ema_teacher", *common, "run.steps=2"), split, setup=F.setup())
    train_rl(F.config("tg_ema_teacher", *common, "run.steps=4"), split, setup=F.setup(seed=123), resume=True)
    a, b = F.metrics(straight), F.metrics(split)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        for key in ("loss/total", "loss/policy", "loss/kl", "reward/total", "grad/norm"):
            assert ra[key] == pytest.approx(rb[key], abs=1e-6), key
    assert a[3]["loss/kl"] is not None
    ta = load_file(str(_ckpt(straight, 4) / "teacher.safetensors"))
    tb = load_file(str(_ckpt(split, 4) / "teacher.safetensors"))
    assert ta.keys() == tb.keys() and max(float((ta[k] - tb[k]).abs().max()) for k in ta) < 1e-6


def test_resume_without_a_teacher_file_says_so(tmp_path: Path) -> None:
    run = tmp_path / "r"
    train_rl(F.config("tg_ema_teacher", "rollout.max_new_tokens=8", "rollout.groups=1", "run.steps=1"), run,
             setup=F.setup())
    (_ckpt(run, 1) / "teacher.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="teacher"):
        train_rl(F.config("tg_ema_teacher", "rollout.max_new_tokens=8", "rollout.groups=1", "run.steps=2"), run,
                 setup=F.setup(), resume=True)


def test_plan_counts_the_teacher_copy_in_memory_not_flops() -> None:
    shape = ModelShape(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=512, intermediate=128)
    kw = dict(trainer_gpus=2, trajectories_per_step=8, tokens_per_trajectory=100, failing_fraction=0.5)
    live, copy_ = plan(shape, **kw), plan(shape, **kw, teacher_copy_bytes_per_param=4.0)
    assert live["teacher_copy_bytes_per_gpu"] == 0.0
    assert copy_["teacher_copy_bytes_per_gpu"] == 4.0 * live["params_total"] / 2
    assert copy_["flops_per_step"] == live["flops_per_step"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ema_update_closed_form_and_tied_parameters_once(dtype: torch.dtype) -> None:
    from repro.teacher import build_teacher, ema_update_

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(4, 3)
            self.head = torch.nn.Linear(3, 4, bias=False)
            self.head.weight = self.emb.weight
            self.register_buffer("scale", torch.ones(3))

    g = torch.Generator().manual_seed(0)
    student = Tied().to(dtype)
    assert build_teacher(student, "live") is None
    with pytest.raises(ValueError, match="guidance.teacher"):
        build_teacher(student, "rollout")  # type: ignore[arg-type]
    teacher = build_teacher(student, "ema")
    th0 = student.emb.weight.detach().float().clone()
    with torch.no_grad():
        student.emb.weight.copy_(torch.randn(4, 3, generator=g))
        student.scale.fill_(2.0)
    ema_update_(teacher, student, 0.25)
    want = (0.75 * th0 + 0.25 * student.emb.weight.float()).to(dtype)
    tol = 1e-6 if dtype == torch.float32 else 1e-2  # bf16: one rounding of the fp32 average
    assert torch.allclose(teacher.emb.weight.float(), want.float(), rtol=tol, atol=tol)
    assert teacher.head.weight is teacher.emb.weight  # updated once (twice would give 0.5625·θ_0), still tied
    assert torch.equal(teacher.scale, student.scale)  # buffers are copied
    assert not teacher.emb.weight.requires_grad
    with pytest.raises(ValueError, match="teacher_ema_rate"):
        ema_update_(teacher, student, 0.0)
