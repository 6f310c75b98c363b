"""Every turn SFT teaches fits the per-turn token cap the mini preset samples with, in evaluation and in RL.

A turn longer than the cap is cut before its ``</tool_call>`` closes, so the episode gets a malformed call where the
model did what it was taught. Measured at 33815ab: 61 of the 400 expert ``finish`` turns of the mini SFT (and 7
``edit_file`` turns) were longer than the 128 tokens the preset then allowed; the longest was 160 tokens
(docs/RESULTS.md, "Tokens per turn"). The check uses the episodes SFT collects (hinted summaries are the longest, so every episode
here is hinted; mistakes and short turn limits as the preset draws them) and the shipped base's tokenizer.
"""

from __future__ import annotations

import pytest


@pytest.mark.slow  # ~20 s: 24 real expert episodes in LocalSandboxes
def test_the_experts_longest_turn_fits_the_mini_presets_cap(tmp_path) -> None:
    from transformers import AutoTokenizer

    from harness.minirepos import make_mini
    from repro.pretrain.ship import resolve_init
    from repro.sft import collect_expert_trajectories
    from tgsuite.pipeline.presets import MINI

    make_mini(tmp_path / "train", split="train", repos=6, tasks_per_repo=4, seed=0)
    sft = MINI.sft
    trajs = collect_expert_trajectories(tmp_path / "train", episodes=24, hint_share=1.0, think=sft["think"], seed=0,
                                        stumble_share=sft["stumble_share"], budget_share=sft["budget_share"],
                                        finish_notice_turns=sft["finish_notice_turns"])
    tok = AutoTokenizer.from_pretrained(resolve_init(sft["init"]))
    lengths = [len(tok(m.content)["input_ids"]) + 1  # + the end-of-turn token
               for t in trajs for m in t.messages if m.role == "assistant"]
    assert len(trajs) >= 20 and lengths
    longest = max(lengths)
    cap = min(MINI.eval.max_new_tokens, MINI.rl["rollout.max_new_tokens"])
    assert longest <= cap, f"an SFT turn of {longest} tokens is cut at the preset's {cap}; raise the cap"
    assert longest > 128, "the hinted summaries these episodes end with are longer than the cap before (128)"
