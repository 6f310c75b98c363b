"""The launch check of ``cluster.*`` against torchrun, and the pure splits of repro.distributed (no process group;
the multi-rank runs are in test_train_fsdp.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import _rl_fixtures as F
import pytest

from repro.compute import merge_ledgers
from repro.config import ConfigError, load_config
from repro.distributed import Launch, check_launch, micro_batches, read_launch, split_streams
from repro.train import train_rl
from repro.trainer_step import TrajBatch

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "configs" / "paper" / "qwen3_coder_30b_a3b_tg.toml"
ONE, TWO = Launch(1, 0, 0), Launch(2, 1, 1)


def _cfg(*sets: str):  # type: ignore[no-untyped-def]
    return load_config(arm="tg", sets=list(sets))


def test_read_launch_from_torchrun_variables() -> None:
    assert read_launch({}) == ONE
    assert read_launch({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}) == TWO
    with pytest.raises(ConfigError, match="torchrun"):
        read_launch({"WORLD_SIZE": "two"})


@pytest.mark.parametrize(("sets", "launch", "match"), [
    (["cluster.fsdp=true", "cluster.trainer_gpus=2"], ONE, r"torchrun --nproc-per-node 2"),
    (["cluster.fsdp=true", "cluster.trainer_gpus=4"], TWO, r"one of 2 .*trainer_gpus = 2"),
    ([], TWO, r"WORLD_SIZE=2 but cluster.fsdp = false"),
    (["cluster.trainer_gpus=8"], ONE, r"trainer_gpus = 8 but cluster.fsdp = false"),
    (["cluster.fsdp=true", "cluster.trainer_gpus=2", "async.enabled=true"], TWO, r"async"),
    (["cluster.fsdp=true", "cluster.trainer_gpus=2", "rollout.engine=vllm"], TWO, r"colocated vLLM is not implemented"),
    (["cluster.fsdp=true", "cluster.trainer_gpus=2", "model.lora.enabled=true"], TWO, r"LoRA under FSDP"),
    (["cluster.fsdp=true", "cluster.trainer_gpus=2", "run.log_grad_split=true"], TWO, r"log_grad_split"),
    (["cluster.fsdp=true", "cluster.trainer_gpus=2", "rollout.groups=3"], TWO, r"sampling_streams = 2 must divide"),
    (["rollout.sampling_streams=3"], ONE, r"must divide rollout.groups = 2"),
])
def test_check_launch_refuses_a_launch_the_cluster_keys_do_not_describe(sets: list[str], launch: Launch,
                                                                        match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_launch(_cfg(*sets), launch)


def test_check_launch_accepts_matching_launches_and_warns_about_unused_inference_gpus() -> None:
    assert check_launch(_cfg(), ONE) == []
    assert check_launch(_cfg("cluster.fsdp=true", "cluster.trainer_gpus=2", "rollout.sampling_streams=4",
                             "rollout.groups=4"), TWO) == []
    # external vLLM servers under FSDP: rank 0 pushes the gathered weights (tests/repro/test_vllm_http_fsdp.py)
    assert check_launch(_cfg("cluster.fsdp=true", "cluster.trainer_gpus=2", "rollout.engine=vllm_http"), TWO) == []
    warn = check_launch(_cfg("cluster.inference_gpus=8"), ONE)
    assert len(warn) == 1 and "inference_gpus = 8 is not used" in warn[0]


def test_a_paper_config_with_the_hf_sampler_refuses_to_train_in_one_process(tmp_path: Path) -> None:
    cfg = load_config(path=PAPER, sets=["rollout.engine=hf_sampler"])
    with pytest.raises(ConfigError, match=r"torchrun --nproc-per-node 8 -m tgsuite train rl"):
        train_rl(cfg, tmp_path / "run", setup=F.setup())
    assert not (tmp_path / "run").exists()  # refused before anything was written
    cfg = load_config(path=PAPER, sets=["rollout.engine=hf_sampler", "cluster.fsdp=false"])
    with pytest.raises(ConfigError, match=r"trainer_gpus = 8 but cluster.fsdp = false"):
        train_rl(cfg, tmp_path / "run", setup=F.setup())


def test_python_m_tgsuite_is_the_console_script() -> None:
    proc = subprocess.run([sys.executable, "-m", "tgsuite", "train", "rl", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "--resume" in proc.stdout


def _traj(n: int, tag: int) -> TrajBatch:
    return TrajBatch(ids=[tag] * (n + 1), act_pos=list(range(1, n + 1)), y=[tag] * n, mu=[0.0] * n, adv=1.0,
                     m_pg=[1.0] * n, m_kl=[1.0] * n, views=[])


def test_micro_batches_share_the_batch_and_pad_with_zero_weight_fillers() -> None:
    trajs = [_traj(3, i) for i in range(5)]
    ranks = [micro_batches(trajs, 2, r, 2) for r in range(2)]
    assert [len(b) for b, _ in ranks] == [2, 2]  # same number of FSDP passes on every rank
    real = [t for b, fill in ranks for mb in b[:len(b) - fill] for t in mb]
    assert [t.ids[0] for t in real] == [0, 1, 2, 3, 4]  # every trajectory once, in order
    (b1, fill1) = ranks[1]
    assert fill1 == 1 and len(b1[-1]) == 1
    filler = b1[-1][0]
    assert sum(filler.m_pg) == 0 and sum(filler.m_kl) == 0 and filler.views == []
    assert sum(trajs[0].m_pg) == 3  # the original is untouched
    assert micro_batches([], 2, 0, 2) == ([], 0)


def test_split_streams_is_contiguous_and_merge_ledgers_sums_work() -> None:
    assert split_streams([4, 5, 6, 7], 2) == [[4, 5], [6, 7]]
    assert split_streams([4, 5], 1) == [[4, 5]]
    snap = lambda w, t: {"wall_s": {"trainer": w}, "tokens": {"trainer": t}, "flops": {"trainer": 2.0 * t},  # noqa: E731
                         "peak_rss_bytes": t, "flops_total": 0.0}
    merged = merge_ledgers([snap(1.0, 10), snap(3.0, 5)])
    assert merged["tokens"] == {"trainer": 15} and merged["wall_s"] == {"trainer": 3.0}
    assert merged["flops_total"] == 30.0 and merged["peak_rss_bytes"] == 10


def test_the_dry_run_plan_reads_the_planning_only_cluster_keys() -> None:
    from tgsuite.commands.train import format_plan

    text = format_plan(load_config(path=PAPER))
    assert "on 8 inference GPU(s), weight sync nccl" in text and "of 141 GB" in text
