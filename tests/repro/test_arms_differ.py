"""Every arm the mini studies train is a different training run: from the same model, seed and rollouts' sampling
stream, one RL step of each arm ends in different weights (issue #13 item 4). In particular ``tg_no_think_kl``
must differ from ``tg``: with no ``<think>`` tokens in the rollouts the two are the same run, so the start model
here writes thinking first, as the mini preset's SFT model does (``think = true``)."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from safetensors.torch import load_file

from repro.train import RLSetup, train_rl
from tgsuite.pipeline.presets import MINI


def _thinking_model():
    """The fixture's nano model after a few SFT steps on replies that open with a ``<think>`` block, half of them
    passing the fixture's checker (a ``#``) and half failing it, so that gating on failing turns guides some turns
    and not others (with every turn failing, ``tg_all_turns`` is ``tg``)."""
    from repro.sft import SFTConfig, sft_train
    from repro.tokenizer import ChatEncoder

    setup = F.setup()
    enc = ChatEncoder(setup.tokenizer)
    replies = ("<think>\nlook at calc.py\n</think>\n\n# Summary: fixed", "<think>\nlook at calc.py\n</think>\n\nok. fixed it")
    examples = []
    for i in range(8):
        reply = replies[i % 2]
        e = enc.encode([{"role": "system", "content": "You are a coding agent."},
                        {"role": "user", "content": f"Fix bug {i} in calc.py"},
                        {"role": "assistant", "content": reply}], [])
        examples.append((e.ids, e.act))
    cfg = SFTConfig(train_tasks="unused", epochs=25, lr=1e-2, warmup_steps=2, batch_tokens=64, pack_tokens=512,
                    torch_threads=1)
    sft_train(setup.model, examples, cfg, Path("/dev/null"))
    return setup


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, torch.Tensor], dict]]:
    base = _thinking_model()
    out = {}
    root = tmp_path_factory.mktemp("arms")
    assert MINI.study_sizes is not None
    for arm in ("grpo", "tg", *MINI.study_sizes.ablations):
        setup = RLSetup(tokenizer=base.tokenizer, model=copy.deepcopy(base.model), tasks=base.tasks,
                        make_env=base.make_env, checker=base.checker, hint_text=base.hint_text)
        cfg = F.config(arm, "run.steps=1", "run.seed=1", "rollout.groups=3", "rollout.max_new_tokens=24")
        train_rl(cfg, root / arm, setup=setup)
        weights = load_file(str(root / arm / "checkpoints" / "step_1" / "model.safetensors"))
        out[arm] = (weights, F.metrics(root / arm)[0])
    return out


def test_the_mini_sft_writes_thinking() -> None:
    assert MINI.sft["think"] is True  # otherwise tg_no_think_kl trains exactly tg


def test_rollouts_think_and_the_no_think_arm_guides_fewer_tokens(runs) -> None:
    tg, no_think = runs["tg"][1], runs["tg_no_think_kl"][1]
    assert tg["guidance/kl_tokens"] > 0
    assert no_think["guidance/kl_tokens"] < tg["guidance/kl_tokens"]  # the <think> tokens left the KL term


def test_every_pair_of_arms_ends_in_different_weights(runs) -> None:
    for (a, (wa, _)), (b, (wb, _)) in itertools.combinations(runs.items(), 2):
        diff = max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)
        assert diff > 0, f"arms {a} and {b} trained the same model"
