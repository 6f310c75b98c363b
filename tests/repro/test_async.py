"""Async pipeline: bounded staleness, drop accounting, and S = 0 == synchronous."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import _rl_fixtures as F
import pytest
import torch

from repro.async_producer import AsyncProducer, StalenessStats, WeightStore, take_fresh
from repro.train import train_rl


def _fake_producer(store: WeightStore, *, lead: int, qsize: int, per_step: int, delay: float = 0.0):
    produced: list[tuple[int, int]] = []

    def produce(item: int, version: int, state: dict[str, torch.Tensor]) -> int:
        produced.append((item, version))
        time.sleep(delay)
        return item

    return AsyncProducer(produce, store, items_per_step=per_step, start_item=0, start_step=0, max_lead=lead,
                         queue_size=qsize), produced


def _drive(lead: int, s_max: int, qsize: int, steps: int = 6, per_step: int = 2, train_s: float = 0.02):
    store = WeightStore()
    store.publish(0, {"w": torch.zeros(1)})
    prod, produced = _fake_producer(store, lead=lead, qsize=qsize, per_step=per_step)
    prod.start()
    stats = StalenessStats()
    seen = []
    try:
        for step in range(steps):
            got = take_fresh(prod, per_step, step, s_max, stats)
            seen.append([(g.item, g.version) for g in got])
            time.sleep(train_s)  # "training"
            store.publish(step + 1, {"w": torch.full((1,), float(step + 1))})
    finally:
        prod.stop()
    return stats, seen, produced


def test_lead_zero_is_lockstep() -> None:
    stats, seen, _ = _drive(lead=0, s_max=0, qsize=2)
    assert stats.dropped == 0 and dict(stats.hist) == {0: 12}
    for step, batch in enumerate(seen):
        assert [v for _, v in batch] == [step, step]
        assert [i for i, _ in batch] == [2 * step, 2 * step + 1]


def test_staleness_bounded_by_lead_without_drops() -> None:
    stats, seen, _ = _drive(lead=1, s_max=1, qsize=4)
    assert stats.dropped == 0
    assert set(stats.hist) <= {0, 1}
    for step, batch in enumerate(seen):
        assert all(step - v <= 1 for _, v in batch)


def test_samples_beyond_bound_are_dropped_and_counted() -> None:
    # a producer allowed 3 steps ahead with a large queue against S_max = 0: old groups must be dropped
    stats, seen, produced = _drive(lead=3, s_max=0, qsize=16, train_s=0.05)
    assert stats.dropped > 0
    assert dict(stats.hist) == {0: 12}
    for step, batch in enumerate(seen):
        assert all(v == step for _, v in batch)
    consumed_items = [i for batch in seen for i, _ in batch]
    assert len(set(consumed_items)) == len(consumed_items)
    assert stats.consumed + stats.dropped <= len(produced)


def test_producer_errors_surface() -> None:
    store = WeightStore()
    store.publish(0, {})

    def boom(item: int, version: int, state: dict) -> int:
        raise ValueError("env exploded")

    prod = AsyncProducer(boom, store, items_per_step=1, start_item=0, start_step=0, max_lead=0, queue_size=1).start()
    with pytest.raises(RuntimeError, match="producer thread failed"):
        take_fresh(prod, 1, 0, 0, StalenessStats())
    prod.stop()


def test_weight_store_wait_and_close() -> None:
    store = WeightStore()
    out = {}

    def waiter() -> None:
        out["got"] = store.wait_for(2)

    t = threading.Thread(target=waiter)
    t.start()
    store.publish(1, {"w": torch.ones(1)})
    time.sleep(0.05)
    assert t.is_alive()
    store.publish(2, {"w": torch.ones(1) * 2})
    t.join(2)
    assert out["got"][0] == 2 and float(out["got"][1]["w"]) == 2.0
    store.close()
    assert store.wait_for(10) is None


def test_async_s0_reproduces_synchronous_loss_stream(tmp_path: Path) -> None:
    common = ["rollout.max_new_tokens=8", "run.steps=3"]
    train_rl(F.config("tg", *common), tmp_path / "sync", setup=F.setup())
    train_rl(F.config("tg", *common, "async.enabled=true", "async.max_staleness=0"), tmp_path / "async",
             setup=F.setup())
    a, b = F.metrics(tmp_path / "sync"), F.metrics(tmp_path / "async")
    for ra, rb in zip(a, b, strict=True):
        assert ra["loss/total"] == rb["loss/total"] and ra["reward/total"] == rb["reward/total"]
    assert b[-1]["async/dropped_groups"] == 0


def test_async_staleness_one_runs_and_bounds(tmp_path: Path) -> None:
    cfg = F.config("tg", "rollout.max_new_tokens=8", "run.steps=3", "async.enabled=true", "async.max_staleness=1")
    train_rl(cfg, tmp_path / "a1", setup=F.setup())
    rows = F.metrics(tmp_path / "a1")
    hist = rows[-1]["async/staleness_hist"]
    assert set(hist) <= {"0", "1"} and sum(hist.values()) == rows[-1]["async/consumed_groups"] == 6
    # the engine's version stamps on the samples (RolloutSample.version) give the same staleness as the producer's
    per_step = [r["rollout/staleness_max"] for r in rows]
    assert per_step == [r["rollout/staleness_mean"] for r in rows]
    assert {str(k): 2 * per_step.count(k) for k in set(per_step)} == hist
