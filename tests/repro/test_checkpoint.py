"""Checkpoints: HF layout + trainer state, and exact resume (4 steps == 2 + resume + 2)."""

from __future__ import annotations

from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from safetensors.torch import load_file

from repro.checkpoint import latest_checkpoint, list_checkpoints, load_trainer_state
from repro.config import ConfigError
from repro.train import train_rl

COMMON = ["rollout.max_new_tokens=8", "rollout.groups=1", "run.checkpoint_every=2"]


def test_resume_is_exact(tmp_path: Path) -> None:
    straight, split = tmp_path / "straight", tmp_path / "split"
    train_rl(F.config("tg", *COMMON, "run.steps=4"), straight, setup=F.setup())
    train_rl(F.config("tg", *COMMON, "run.steps=2"), split, setup=F.setup())
    # a fresh process would rebuild everything: a new (differently initialised) model proves the weights come
    # from the checkpoint, not from memory
    info = train_rl(F.config("tg", *COMMON, "run.steps=4"), split, setup=F.setup(seed=123), resume=True)
    assert info.step == 4
    a, b = F.metrics(straight), F.metrics(split)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        for key in ("loss/total", "loss/policy", "loss/kl", "reward/total", "grad/norm"):
            assert ra[key] == pytest.approx(rb[key], abs=1e-6), key
    wa = load_file(str(straight / "checkpoints" / "step_4" / "model.safetensors"))
    wb = load_file(str(split / "checkpoints" / "step_4" / "model.safetensors"))
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-6


def test_checkpoint_contents_and_retention(tmp_path: Path) -> None:
    run = tmp_path / "r"
    train_rl(F.config("grpo", *COMMON, "run.steps=4", "run.checkpoint_every=1", "run.keep_checkpoints=2"), run,
             setup=F.setup())
    names = [p.name for p in list_checkpoints(run)]
    assert names == ["step_3", "step_4"]
    ck = latest_checkpoint(run)
    files = {p.name for p in ck.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "trainer_state.pt", "checkpoint.json"} <= files
    state = load_trainer_state(ck)
    assert state["step"] == 4 and state["next_item"] == 4
    assert {"optimizer", "scheduler", "rng", "compute"} <= set(state)
    assert isinstance(state["rng"]["torch"], torch.Tensor)
    assert not any(p.name.startswith(".tmp") for p in (run / "checkpoints").iterdir())


def test_resume_rejects_changed_config_and_missing_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with pytest.raises(ConfigError, match="no step_<n> checkpoint"):
        train_rl(F.config("tg", *COMMON), run, setup=F.setup(), resume=True)
    train_rl(F.config("tg", *COMMON, "run.steps=2"), run, setup=F.setup())
    with pytest.raises(ConfigError, match="guidance.lam"):
        train_rl(F.config("tg", *COMMON, "run.steps=4", "guidance.lam=0.5"), run, setup=F.setup(), resume=True)


def test_resume_builds_the_default_setup_once_from_the_latest_checkpoint(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a setup, train_rl builds one (``repro.rl_setup.default_setup``) from the latest checkpoint's weights and
    does not load those weights a second time; a setup handed in without ``init_from`` still gets them loaded."""
    import repro.checkpoint as ck
    import repro.train as train

    run = tmp_path / "r"
    train_rl(F.config("tg", *COMMON, "run.steps=2"), run, setup=F.setup())
    built, loads = [], []

    def fake_default_setup(cfg, *, init_override=None):  # type: ignore[no-untyped-def]
        built.append(init_override)
        s = F.setup(seed=123)
        ck.load_weights(s.model, init_override)
        s.init_from = init_override
        return s

    real_load = ck.load_weights
    monkeypatch.setattr(train, "default_setup", fake_default_setup)
    monkeypatch.setattr(ck, "load_weights", lambda m, d: (loads.append(d), real_load(m, d))[1])
    latest = latest_checkpoint(run)
    train_rl(F.config("tg", *COMMON, "run.steps=3"), run, resume=True)
    assert built == [latest] and loads == [latest]  # the one load is the setup's own
    loads.clear()
    latest = latest_checkpoint(run)  # the last step always checkpoints: step_3
    train_rl(F.config("tg", *COMMON, "run.steps=4"), run, setup=F.setup(seed=7), resume=True)
    assert loads == [latest]
