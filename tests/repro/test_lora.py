"""LoRA (repro.lora, [model.lora]): only the adapters train, the sampler and checkpoints see the adapted weights, the
teacher is the same model (fixed = adapters off), resume is exact, SFT honours it, the dry-run plan counts it."""

from __future__ import annotations

import json
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from safetensors.torch import load_file

from repro.checkpoint import load_trainer_state
from repro.compute import lora_param_count, plan, plan_shape
from repro.config import ConfigError, LoraCfg, load_config, load_saved, to_toml
from repro.lora import (
    adapters_disabled,
    apply_lora,
    effective_weight,
    has_lora,
    load_adapter_file,
    lora_cfg_of,
    merged_state_dict,
    save_pretrained,
)
from repro.models import build_model
from repro.train import train_rl

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LORA = ["model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8.0"]
FAST = ["rollout.max_new_tokens=8", "rollout.groups=1"]


def _lora_model(seed: int = 0, r: int = 4, perturb: bool = True) -> torch.nn.Module:
    m = build_model("nano", 64, seed=seed)
    apply_lora(m, LoraCfg(enabled=True, r=r, alpha=8.0), seed=1)
    if perturb:  # lora_B starts at zero (adapted = base); give the adapters something to say
        g = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return m


def test_config_section_validates_and_round_trips(tmp_path: Path) -> None:
    cfg = load_config(sets=[*LORA, 'model.lora.target_modules=["q_proj", "v_proj"]'])
    assert cfg.model.lora.enabled and cfg.model.lora.target_modules == ("q_proj", "v_proj")
    (tmp_path / "config.toml").write_text(to_toml(cfg))
    assert load_saved(tmp_path / "config.toml") == cfg
    with pytest.raises(ConfigError, match=r"model\.lora\.target_modules.*lm_head"):
        load_config(sets=[*LORA, 'model.lora.target_modules=["lm_head"]'])
    with pytest.raises(ConfigError, match=r"model\.lora\.r"):
        load_config(sets=["model.lora.r=0"])
    with pytest.raises(ConfigError, match="unknown key `model.lora.rank`"):
        load_config(sets=["model.lora.rank=4"])
    with pytest.raises(ConfigError, match="'ema' is not implemented"):
        load_config(arm="tg_ema_teacher", sets=LORA)


def test_only_adapters_train_and_step0_is_the_base() -> None:
    base = build_model("nano", 64, seed=0)
    m = _lora_model(perturb=False)
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    assert torch.equal(m(ids).logits, base(ids).logits)  # B = 0: the adapted model starts as the base
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert len(trainable) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
    before = torch.random.get_rng_state()
    again = build_model("nano", 64, seed=0)
    apply_lora(again, LoraCfg(enabled=True, r=4, alpha=8.0), seed=1)
    assert torch.equal(torch.random.get_rng_state(), before)  # the init uses its own seed, not the global stream
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), again.state_dict().values(), strict=True))
    assert lora_cfg_of(m) == LoraCfg(enabled=True, r=4, alpha=8.0)


def test_effective_weights_merged_state_and_disabled_adapters() -> None:
    base, m = build_model("nano", 64, seed=0), _lora_model()
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    out = m(ids).logits
    assert not torch.allclose(out, base(ids).logits, atol=1e-4)
    q = m.model.layers[0].self_attn.q_proj
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(torch.nn.functional.linear(x, effective_weight(q)), q(x), atol=1e-6)
    plain = build_model("nano", 64, seed=5)
    plain.load_state_dict(merged_state_dict(m))
    assert torch.allclose(plain(ids).logits, out, atol=1e-5)
    with adapters_disabled(m):
        assert torch.equal(m(ids).logits, base(ids).logits)
    assert sum(p.requires_grad for p in m.parameters()) == 28  # restored on exit


def test_kv_sampler_samples_the_adapted_policy() -> None:
    from repro.engine import TokenRequest
    from repro.sampler import KVSampler

    m = _lora_model()
    plain = build_model("nano", 64, seed=5)
    plain.load_state_dict(merged_state_dict(m))
    req = [TokenRequest(prompt_ids=[1, 5, 9, 3], max_new_tokens=6, stop_ids=(), temperature=1.0, top_p=1.0)]
    a = KVSampler(m).generate(req, generator=torch.Generator().manual_seed(0))[0]
    b = KVSampler(plain).generate(req, generator=torch.Generator().manual_seed(0))[0]
    assert a.ids == b.ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    with adapters_disabled(m):  # and the test can fail: the base samples differently
        base_lp = KVSampler(m).generate([TokenRequest(prompt_ids=[1, 5, 9, 3], max_new_tokens=1, stop_ids=(),
                                                      temperature=1.0, top_p=1.0)],
                                        generator=torch.Generator().manual_seed(0))[0]
    assert base_lp.logprobs[0] != pytest.approx(a.logprobs[0], abs=1e-4)


def test_saved_directory_is_merged_hf_plus_peft_adapter(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    m = _lora_model()
    save_pretrained(m, tmp_path)
    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(4))
    ref = m(ids).logits
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert not has_lora(hf) and torch.allclose(hf(ids).logits, ref, atol=1e-5)
    peft_model = PeftModel.from_pretrained(build_model("nano", 64, seed=0), str(tmp_path / "adapter"))
    assert torch.allclose(peft_model(ids).logits, ref, atol=1e-6)
    other = _lora_model(perturb=False)
    load_adapter_file(other, tmp_path)
    assert torch.equal(other(ids).logits, ref)
    wrong = build_model("nano", 64, seed=0)
    apply_lora(wrong, LoraCfg(enabled=True, r=2), seed=0)
    with pytest.raises(RuntimeError, match="adapter_model.safetensors"):
        load_adapter_file(wrong, tmp_path)


def test_rl_trains_adapters_only_with_adapter_checkpoints_and_exact_resume(tmp_path: Path) -> None:
    straight, split = tmp_path / "straight", tmp_path / "split"
    info = train_rl(F.config("tg", *FAST, *LORA, "run.steps=2"), straight, setup=F.setup())
    ck = Path(info.path)
    assert (ck / "adapter" / "adapter_model.safetensors").is_file() and (ck / "model.safetensors").is_file()
    base = F.setup().model.state_dict()
    merged = load_file(str(ck / "model.safetensors"))
    lora_targets = [k for k in merged if any(f".{t}." in k for t in LoraCfg().target_modules)]
    assert all(torch.equal(merged[k], base[k]) for k in merged if k not in lora_targets)  # base frozen
    assert any(not torch.equal(merged[k], base[k]) for k in lora_targets)  # the adapters moved
    opt = load_trainer_state(ck)["optimizer"]
    n_adapter = sum(1 for n in load_file(str(ck / "adapter" / "adapter_model.safetensors")))
    assert len(opt["state"]) == sum(len(g["params"]) for g in opt["param_groups"]) == n_adapter
    from repro.rl_setup import base_source

    assert base_source(F.config("tg", *LORA), ck) is None  # resuming: the base from the config, adapters from ck
    assert base_source(F.config("tg"), ck) == ck  # without LoRA the checkpoint's (merged) weights are the model
    man = json.loads((straight / "manifest.json").read_text())
    assert 0 < man["model_params"]["trainable"] < man["model_params"]["total"] / 5
    # resume: the base is rebuilt as the config says, the adapters (and their optimizer state) come from the checkpoint
    train_rl(F.config("tg", *FAST, *LORA, "run.steps=1", "run.checkpoint_every=1"), split, setup=F.setup())
    train_rl(F.config("tg", *FAST, *LORA, "run.steps=2", "run.checkpoint_every=1"), split, setup=F.setup(),
             resume=True)
    a, b = F.metrics(straight), F.metrics(split)
    for ra, rb in zip(a, b, strict=True):
        assert ra["loss/total"] == pytest.approx(rb["loss/total"], abs=1e-6)
    wb = load_file(str(split / "checkpoints" / "step_2" / "adapter" / "adapter_model.safetensors"))
    wa = load_file(str(ck / "adapter" / "adapter_model.safetensors"))
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-6


def test_teacher_is_the_same_model_fixed_switches_the_adapters_off() -> None:
    from repro.trainer_step import LossRoot, make_seqs

    m = _lora_model()
    ids, mask = torch.randint(0, 64, (1, 7), generator=torch.Generator().manual_seed(6)), torch.ones(1, 7)
    base = build_model("nano", 64, seed=0).model(input_ids=ids, attention_mask=mask).last_hidden_state
    live = LossRoot(m, load_config(arm="tg", sets=LORA))
    fixed = LossRoot(m, load_config(arm="tg_fixed_teacher", sets=LORA))
    assert live.teacher_lm is None and fixed.teacher_lm is None  # no second copy of the weights
    seqs = make_seqs([ids[0].tolist()], 0, packed=True)  # the packed layout the trainer uses
    with torch.no_grad():
        h_live, h_fixed = live._teacher_hidden(seqs)[None], fixed._teacher_hidden(seqs)[None]
    assert torch.allclose(h_fixed, base, atol=1e-5) and not torch.allclose(h_live, base, atol=1e-4)
    assert torch.allclose(h_live, m.model(input_ids=ids, attention_mask=mask).last_hidden_state, atol=1e-5)
    from repro.teacher import build_teacher

    with pytest.raises(ValueError, match="'ema' with LoRA"):
        build_teacher(m, "ema")


def test_fixed_teacher_with_lora_trains(tmp_path: Path) -> None:
    train_rl(F.config("tg_fixed_teacher", *FAST, *LORA, "run.steps=1"), tmp_path / "r", setup=F.setup())
    row = F.metrics(tmp_path / "r")[0]
    assert row["loss/kl"] is not None and row["loss/kl"] > 0
    assert "teacher_copy" not in json.loads((tmp_path / "r" / "manifest.json").read_text())[
        "model_params"]


def test_async_producer_samples_the_published_adapters(tmp_path: Path) -> None:
    """The producer's twin is a copy of the LoRA model; with lead 0 the async run equals the synchronous one."""
    sync, asy = tmp_path / "sync", tmp_path / "async"
    train_rl(F.config("tg", *FAST, *LORA), sync, setup=F.setup())
    train_rl(F.config("tg", *FAST, *LORA, "async.enabled=true", "async.max_lead=0"), asy, setup=F.setup())
    for ra, rb in zip(F.metrics(sync), F.metrics(asy), strict=True):
        assert ra["reward/total"] == rb["reward/total"] and ra["loss/total"] == pytest.approx(rb["loss/total"],
                                                                                            abs=1e-6)


def test_distill_refuses_lora(tmp_path: Path) -> None:
    from repro.distill import train_distill

    with pytest.raises(ConfigError, match="not implemented"):
        train_distill(F.config("tg", *LORA), tmp_path / "d", setup=F.setup())


def test_sft_with_lora_trains_adapters_only(tmp_path: Path) -> None:
    from repro.sft import SFTConfig, sft_loss, sft_train

    tok = F.tokenizer()
    from repro.tokenizer import ChatEncoder

    enc = ChatEncoder(tok)
    convs = [[{"role": "user", "content": f"Fix bug {i} in calc.py"},
              {"role": "assistant", "content": "# Summary\n- fixed `add` in `calc.py`"}] for i in range(3)]
    ex = [(e.ids, e.act) for e in (enc.encode(c) for c in convs)]
    model = build_model("nano", len(tok), seed=1)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = SFTConfig(train_tasks="unused", epochs=20, batch_tokens=64, lr=3e-2, warmup_steps=1, seed=0,
                    lora=LoraCfg(enabled=True, r=4, alpha=8.0))
    apply_lora(model, cfg.lora, seed=cfg.seed)
    with torch.no_grad():
        before = sum(float(sft_loss(model, i, a)[0]) for i, a in ex)
    sft_train(model, ex, cfg, tmp_path / "metrics.jsonl")
    with torch.no_grad():
        after = sum(float(sft_loss(model, i, a)[0]) for i, a in ex)
    assert after < 0.92 * before, (before, after)  # measured: 290 -> 251 (a random nano model, rank 4)
    frozen = {n.replace(".base_layer.", "."): p for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen.keys() == {n for n, _ in build_model("nano", len(tok), seed=1).named_parameters()}
    assert all(torch.equal(frozen[k], base[k]) for k in frozen)  # the base did not move


def test_lora_param_count_matches_peft_and_the_plan(tmp_path: Path) -> None:
    cfg = load_config(sets=LORA)
    shape, _ = plan_shape(cfg)
    m = build_model("nano", shape.vocab, seed=0)
    apply_lora(m, cfg.model.lora, seed=0)
    assert lora_param_count(shape, 4, cfg.model.lora.target_modules) == sum(
        p.numel() for p in m.parameters() if p.requires_grad)
    full = plan(shape, trainer_gpus=1, trajectories_per_step=8, tokens_per_trajectory=128)
    n = lora_param_count(shape, 4, ("q_proj", "v_proj"))
    lo = plan(shape, trainer_gpus=1, trajectories_per_step=8, tokens_per_trajectory=128, lora_params=n)
    assert lo["params_trainable"] == n and full["params_trainable"] == full["params_total"]
    assert lo["train_state_bytes_per_gpu"] == 4 * full["params_total"] + 16 * n
    paper = load_config(path=Path(__file__).resolve().parents[2] / "configs" / "paper" /
                        "qwen3_coder_30b_a3b_tg_lora.toml")
    moe, _ = plan_shape(paper)
    with pytest.raises(ValueError, match="fused"):
        lora_param_count(moe, 8, ("q_proj", "gate_proj"))
    # 48 layers x r 32 x (q 2048+4096, k 2048+512, v 2048+512, o 4096+2048)
    assert lora_param_count(moe, 32, paper.model.lora.target_modules) == 48 * 32 * 17408


def test_dry_run_of_the_paper_lora_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tgsuite.cli import main

    path = Path(__file__).resolve().parents[2] / "configs" / "paper" / "qwen3_coder_30b_a3b_tg_lora.toml"
    assert main(["train", "rl", "--config", str(path), "--out", str(tmp_path / "x"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "LoRA r=32" in out and "26.7 M trainable" in out and "15.3 GB/GPU" in out
