"""Restart phases of a pretraining recipe (``schema.Restart``) and continuing one from a shipped base
(``repro.pretrain.from_base``, ``tgsuite train pretrain --from-base``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from repro.pretrain.loop import PretrainError, lr_at, restarts_at, run_pretrain, setup, train
from repro.pretrain.presets import preset
from repro.pretrain.schema import PretrainConfig, Restart, Stage

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RESTART = Restart(lr=5e-4, warmup_steps=1, decay_frac=0.5)


def _recipe() -> PretrainConfig:
    """nano's two synthetic stages, then a restart stage (no world documents: seconds on one core)."""
    nano = preset("nano")
    c = Stage(name="C", steps=3, mix={"repeat": 0.5, "line": 0.5}, restart=RESTART)
    return nano.model_copy(update={"stages": (*nano.stages[:2], c)})


def test_phases_and_their_learning_rates() -> None:
    cfg, first = _recipe(), preset("nano").model_copy(update={"stages": preset("nano").stages[:2]})
    assert cfg.phases() == [(0, 4, None), (4, 7, RESTART)]
    assert [restarts_at(cfg, s) for s in range(7)] == [False] * 4 + [True, False, False]
    # the first phase keeps the schedule it had without the restart stage (a shipped base's recipe stays valid)
    assert [lr_at(cfg, s) for s in range(4)] == [lr_at(first, s) for s in range(4)]
    assert cfg.phase_prefix(4).recipe_sha256() == first.recipe_sha256() and cfg.phase_prefix(3) is None
    # the restart phase: one warm-up step to its own lr, constant, then decay (int(0.5 · 3) = 1 step) to 0.1·lr
    assert [lr_at(cfg, s) for s in range(4, 7)] == pytest.approx([5e-4, 5e-4, 5e-5])
    with pytest.raises(ValueError, match="first stage cannot restart"):
        PretrainConfig(stages=(Stage(name="A", steps=1, mix={"repeat": 1.0}, restart=RESTART),))


def test_a_stage_without_restart_hashes_as_before() -> None:
    """The mini preset's stages A1–B hash as they did when the first shipped base was made from them (manifest of
    the base exported at 5beeb5f), so that base is where a later restart phase starts."""
    mini = preset("mini")
    first = mini.model_copy(update={"stages": mini.stages[:3]})
    assert [st.name for st in first.stages] == ["A1", "A2", "B"]
    assert first.recipe_sha256() == "9b6b374c68799b6d75ef02c004b0b48a14d4c935dc4805615b3971d8670e358c"


def test_restart_rounds_weights_to_bf16_and_starts_a_fresh_optimizer(tmp_path: Path) -> None:
    cfg = _recipe()
    s = setup(cfg, tmp_path)
    train(s, max_steps=4)
    before = {k: v.detach().clone() for k, v in s.model.named_parameters()}
    assert any(not torch.equal(v, v.to(torch.bfloat16).float()) for v in before.values())
    old_opt = s.opt
    train(s, max_steps=1)
    assert s.opt is not old_opt
    assert all(int(st["step"]) == 1 for st in s.opt.state.values())  # one step of the fresh AdamW, not five


def test_continuing_from_a_shipped_base_is_the_run_from_nothing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Phase 1 → export-base → --from-base gives, bit for bit, the weights and losses of one uninterrupted run."""
    from repro.pretrain import ship
    from repro.pretrain.from_base import seed_from_base
    from tgsuite.commands import train_pretrain

    cfg = _recipe()
    straight = run_pretrain(cfg, tmp_path / "straight")
    first = cfg.phase_prefix(4)
    run_pretrain(first, tmp_path / "phase1")
    ship.export_base(tmp_path / "phase1", tmp_path / "base")
    assert seed_from_base(tmp_path / "base", cfg, tmp_path / "cont") == 4
    cont = train(setup(cfg, tmp_path / "cont"))
    assert straight.step == cont.step == 7 and cont.tokens_seen == straight.tokens_seen
    wa = load_file(tmp_path / "straight" / "checkpoints" / "step_7" / "model.safetensors")
    wb = load_file(tmp_path / "cont" / "checkpoints" / "step_7" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    # refusals: a directory with checkpoints, a base at a step where no phase starts, a base of another recipe
    with pytest.raises(PretrainError, match="already has checkpoints"):
        seed_from_base(tmp_path / "base", cfg, tmp_path / "cont")
    ship.export_base(tmp_path / "straight", tmp_path / "end")
    with pytest.raises(PretrainError, match=r"step 7.*restart phase only at steps \[4\]"):
        seed_from_base(tmp_path / "end", cfg, tmp_path / "x")
    other = cfg.model_copy(update={"lr": 1e-3})
    with pytest.raises(PretrainError, match="trained by another recipe"):
        seed_from_base(tmp_path / "base", other, tmp_path / "y")
    assert train_pretrain.EPILOG.count("--from-base") == 1


def test_cli_from_base_names_a_missing_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tgsuite.cli import main

    assert main(["train", "pretrain", "--preset", "nano", "--out", str(tmp_path / "o"), "--from-base",
                 str(tmp_path / "nothing")]) == 2
    assert "not a shipped base" in capsys.readouterr().err


def test_cli_checks_its_flags_before_seeding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad --max-steps is refused before --from-base writes anything (a retry is not then refused)."""
    from tgsuite.cli import main

    out = tmp_path / "o"
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(out), "--from-base", str(tmp_path / "b"),
                 "--max-steps", "0"]) == 2
    assert "--max-steps 0: give a positive number" in capsys.readouterr().err
    assert not out.exists()
