"""The TensorBoard tracker behind ``run.tracker``: scalars mirror metrics.jsonl, resume purges, a missing package is
an error (not a silent fall-back), and the RL loop writes event files when the config key asks for them."""

from __future__ import annotations

import sys
from pathlib import Path

import _rl_fixtures as F
import pytest

from repro.config import ConfigError
from repro.track import MetricsWriter, read_metrics

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed (pip install 'tgsuite[tensorboard]')")


def _scalars(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_mirror_the_jsonl_and_skip_nulls(tmp_path: Path) -> None:
    w = MetricsWriter(tmp_path / "metrics.jsonl", tensorboard=True)
    w.log(1, {"loss/total": 0.5, "kl/mean": float("nan"), "guidance/on": True})
    w.log(2, {"loss/total": 0.25, "kl/mean": 0.1, "guidance/on": False})
    w.close()
    got = _scalars(tmp_path / "tb")
    assert got["loss/total"] == [(1, 0.5), (2, 0.25)]
    assert [s for s, _ in got["kl/mean"]] == [2] and "guidance/on" not in got  # null and bools are not scalars
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["kl/mean"] is None


def test_resume_purges_events_after_the_checkpoint(tmp_path: Path) -> None:
    w = MetricsWriter(tmp_path / "metrics.jsonl", tensorboard=True)
    for step in range(1, 5):
        w.log(step, {"loss/total": float(step)})
    w.close()
    w = MetricsWriter(tmp_path / "metrics.jsonl", resume_from_step=2, tensorboard=True)
    w.log(3, {"loss/total": 30.0})
    w.close()
    assert _scalars(tmp_path / "tb")["loss/total"] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_missing_tensorboard_is_an_error_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import now raises ImportError
    with pytest.raises(RuntimeError, match=r"tgsuite\[tensorboard\].*run.tracker = 'jsonl'"):
        MetricsWriter(tmp_path / "metrics.jsonl", tensorboard=True)


def test_config_key_turns_it_on_in_the_rl_loop(tmp_path: Path) -> None:
    from repro.train import train_rl

    with pytest.raises(ConfigError, match="tracker"):
        F.config("grpo", "run.tracker=wandb")
    cfg = F.config("grpo", "rollout.max_new_tokens=8", "run.steps=1", "rollout.groups=1", "run.tracker=tensorboard")
    train_rl(cfg, tmp_path / "r", setup=F.setup())
    got = _scalars(tmp_path / "r" / "tb")
    row = read_metrics(tmp_path / "r" / "metrics.jsonl")[0]
    assert got["loss/total"] == [(row["step"], pytest.approx(row["loss/total"]))]
    assert not (tmp_path / "plain").exists()
    train_rl(F.config("grpo", "rollout.max_new_tokens=8", "run.steps=1", "rollout.groups=1"), tmp_path / "plain",
             setup=F.setup())
    assert not (tmp_path / "plain" / "tb").exists()  # the default (jsonl) writes no event files
