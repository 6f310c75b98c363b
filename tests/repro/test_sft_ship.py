"""The shipped SFT coder (repro.sft_ship): built by a preset's recipe, exported in bf16 with a manifest, verified
file by file at load, named by `sft:<name>`, and the reproduction starts RL from it without training SFT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from repro.pretrain.ship import BaseIntegrityError, is_base, resolve_init
from repro.sft_ship import is_sft_coder, verify_sft
from tgsuite.pipeline.presets import SMOKE


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tgsuite.pipeline.sft_coder import build_sft_coder

    root = tmp_path_factory.mktemp("sftship")
    (root / "evalrun").mkdir()
    (root / "evalrun" / "aggregate.json").write_text(json.dumps({"resolved_rate": 0.25}))
    build_sft_coder(SMOKE, root / "build", ship=root / "coder", heldout_run=root / "evalrun")
    return root / "coder"


@pytest.mark.slow
def test_export_writes_a_verified_bf16_coder_with_its_recipe(shipped: Path) -> None:
    m = verify_sft(shipped)
    assert is_sft_coder(shipped) and not is_base(shipped)
    assert m.preset == "smoke" and m.recipe["preset"] == "nano" and "train_tasks" not in m.recipe
    assert m.n_trajectories > 0 and m.train_tokens > 0 and m.steps > 0 and m.wall_s["train"] > 0
    assert m.heldout == {"run": str(shipped.parent / "evalrun"), "aggregate": {"resolved_rate": 0.25}}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(m.files)
    from safetensors.torch import load_file

    assert {t.dtype for t in load_file(shipped / "model.safetensors").values()} == {torch.bfloat16}


@pytest.mark.slow
def test_an_altered_or_extra_file_is_refused_naming_it(shipped: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "coder"
    shutil.copytree(shipped, copy)
    (copy / "tokenizer.json").write_text((copy / "tokenizer.json").read_text() + " ")
    with pytest.raises(BaseIntegrityError, match=r"tokenizer\.json: sha256 differs.*Fix: restore it"):
        verify_sft(copy)
    shutil.copy(shipped / "tokenizer.json", copy / "tokenizer.json")
    (copy / "extra.safetensors").write_bytes(b"x")
    with pytest.raises(BaseIntegrityError, match="extra.safetensors"):
        verify_sft(copy)


@pytest.mark.slow
def test_rl_loads_the_coder_in_float32_after_verifying_it(shipped: Path, tmp_path: Path) -> None:
    import shutil

    from repro.config import load_config
    from repro.rl_setup import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(load_config(overrides={"model.init": str(shipped)}))
    assert {p.dtype for p in model.parameters()} == {torch.float32} and len(tok) > 0
    bad = tmp_path / "bad"
    shutil.copytree(shipped, bad)
    (bad / "config.json").write_text((bad / "config.json").read_text().replace("{", "{ ", 1))
    with pytest.raises(BaseIntegrityError, match="config.json"):
        load_model_and_tokenizer(load_config(overrides={"model.init": str(bad)}))


def test_sft_prefix_names_the_shipped_folder_or_says_how_to_rebuild() -> None:
    with pytest.raises(BaseIntegrityError, match=r"tgsuite train sft --preset nope .*--ship assets/sft/nope"):
        resolve_init("sft:nope")
    assert resolve_init("some/dir") == Path("some/dir")


def test_a_plain_folder_is_not_a_coder(tmp_path: Path) -> None:
    with pytest.raises(BaseIntegrityError, match="not a shipped SFT coder"):
        verify_sft(tmp_path)
