"""Self-distillation: selection, the soft-target loss, a distill stage and the distill -> RL -> distill loop."""

from __future__ import annotations

import copy
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch

from repro.config import ConfigError
from repro.distill import DistillExample, distill_loss, read_examples, select_best, train_distill, train_loop


class _S:
    def __init__(self, tid: str, reward: float, act: list[int]) -> None:
        self.instance_id, self.reward, self.ids, self.act = tid, reward, list(range(len(act))), act


def test_select_best_per_task() -> None:
    pool = [_S("a", 0.1, [0, 1]), _S("a", 0.9, [0, 1]), _S("a", 0.5, [0, 1]), _S("b", -1.0, [0, 1]),
            _S("c", 2.0, [0, 0])]
    best = select_best(pool, top_k=2, min_reward=0.0)
    assert [(e.instance_id, e.reward) for e in best] == [("a", 0.9), ("a", 0.5)]  # b below min, c has no act tokens


def test_soft_target_loss_properties() -> None:
    s = F.setup()
    model = s.model
    teacher = copy.deepcopy(model).eval()
    ids = torch.randint(3, 300, (40,))
    act = torch.zeros(40, dtype=torch.long)
    act[20:] = 1
    # own distribution at τ = 1 with no hard term: zero loss and zero gradient (why the config forbids it)
    loss, st = distill_loss(model, teacher, ids, act, tau=1.0, hard_weight=0.0)
    loss.backward()
    assert abs(float(loss.detach())) < 1e-6 and st["n"] == 20
    assert max(float(p.grad.abs().max()) for p in model.parameters() if p.grad is not None) < 1e-6
    model.zero_grad()
    # sharpened targets: positive loss, non-zero gradient, the teacher untouched
    loss, _ = distill_loss(model, teacher, ids, act, tau=0.5, hard_weight=0.0)
    loss.backward()
    assert float(loss) > 0 and any(p.grad is not None and float(p.grad.abs().max()) > 0 for p in model.parameters())
    assert all(p.grad is None for p in teacher.parameters())
    # chunking does not change the value
    a, _ = distill_loss(model, teacher, ids, act, tau=0.5, hard_weight=0.3, chunk=3)
    b, _ = distill_loss(model, teacher, ids, act, tau=0.5, hard_weight=0.3, chunk=256)
    assert float(a) == pytest.approx(float(b), rel=1e-5)


def test_distill_stage_from_pool(tmp_path: Path) -> None:
    cfg = F.config("tg", "rollout.max_new_tokens=8", "distill.pool_rollouts=3", "distill.pool_tasks=2",
                   "distill.steps=2", "distill.batch=2", "distill.min_reward=-1.0")
    info = train_distill(cfg, tmp_path / "d", setup=F.setup())
    ex = read_examples(tmp_path / "d" / "examples.jsonl")
    assert len(ex) == 2 and info.step == 2
    rows = F.metrics(tmp_path / "d")
    assert len(rows) == 2 and rows[0]["loss/distill_kl"] > 0
    with pytest.raises(ConfigError, match="min_reward"):
        train_distill(F.config("tg", "distill.min_reward=99", "distill.pool_tasks=1", "distill.pool_rollouts=2",
                               "rollout.max_new_tokens=4"), tmp_path / "d2", setup=F.setup())


def test_loop_feeds_rl_best_back(tmp_path: Path) -> None:
    cfg = F.config("tg", "rollout.max_new_tokens=8", "run.steps=1", "rollout.groups=1", "distill.rounds=1",
                   "distill.pool_rollouts=2", "distill.pool_tasks=1", "distill.steps=1", "distill.min_reward=-1.0")
    info = train_loop(cfg, tmp_path / "loop", setup=F.setup())
    best = read_examples(tmp_path / "loop" / "round_0" / "rl" / "best.jsonl")
    final = read_examples(tmp_path / "loop" / "final_distill" / "examples.jsonl")
    assert best and [e.ids for e in final] == [e.ids for e in best]
    assert Path(info.path).parent.parent.name == "final_distill"
    assert isinstance(best[0], DistillExample) and best[0].step == 1
