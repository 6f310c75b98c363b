"""repro.models: presets, deterministic init, hidden states × lm_head == logits, save/load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen3ForCausalLM

from repro.models import PRESETS, build_model, count_params, final_hidden_states, lm_head_weight, make_config


def test_nano_is_small_and_qwen3() -> None:
    m = build_model("nano", 1000, seed=0)
    assert isinstance(m, Qwen3ForCausalLM) and m.config.model_type == "qwen3"
    assert count_params(m) < 1_000_000
    assert m.config.num_key_value_heads < m.config.num_attention_heads  # GQA exercised


def test_mini_size_is_in_the_documented_range() -> None:
    cfg = make_config("mini", 4096)
    s = PRESETS["mini"]
    d, f, layers = s.hidden_size, s.intermediate_size, s.num_hidden_layers
    attn = d * s.num_attention_heads * s.head_dim * 2 + d * s.num_key_value_heads * s.head_dim * 2
    approx = 4096 * d + layers * (attn + 3 * d * f)
    assert 3e6 < approx < 20e6 and cfg.tie_word_embeddings


def test_init_is_seeded_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b = build_model("nano", 300, seed=7), build_model("nano", 300, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    c = build_model("nano", 300, seed=8)
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_hidden_states_times_head_are_the_logits(tmp_path: Path) -> None:
    m = build_model("nano", 300, seed=1)
    ids = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        h = final_hidden_states(m, ids)
        torch.testing.assert_close(h @ lm_head_weight(m).T, m(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    m.save_pretrained(tmp_path)
    m2 = Qwen3ForCausalLM.from_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(m2(input_ids=ids).logits, m(input_ids=ids).logits)


def test_unknown_preset_raises() -> None:
    with pytest.raises(ValueError, match="preset"):
        make_config("huge", 100)  # type: ignore[arg-type]
