"""``rollout.engine = "vllm_http"`` under torchrun + FSDP2 (2 gloo ranks on CPU) against a fake ``vllm serve`` on
loopback: no sampling copy; rank 0 pushes the weights all ranks gathered (at the start and after every step), each
rank samples its stream over HTTP, and the run equals one process sampling the same 2 streams from its own fake
server; the checkpoint's HF weights are gathered without a copy too."""

from __future__ import annotations

import shutil
from pathlib import Path

import _rl_fixtures as F
import pytest
from torchrun_helper import run_workers
from vllm_http_fake import FakeServer

WORKER = r'''
import os, sys
import torch
import torch.distributed as dist
sys.path[:0] = [os.environ["TESTS_DIR"], os.path.join(os.environ["TESTS_DIR"], "repro"),
                os.path.dirname(os.environ["TESTS_DIR"])]
torch.set_num_threads(1)
dist.init_process_group("gloo")
from test_vllm_http_fsdp import http_run
http_run(os.environ["SERVED"], os.environ["URL"], os.environ["OUT"], dist.get_world_size())
dist.barrier()
dist.destroy_process_group()
from repro.distributed import exit_process
exit_process(0)
'''


def http_run(served: str, url: str, out: str, world: int | None) -> None:
    from test_train_fsdp import train_config, train_setup

    from repro.rl_setup import engine_factory_for
    from repro.train import train_rl

    cfg = train_config(2, world, "rollout.engine=vllm_http", f"vllm_http.weights_dir={served}",
                       f'vllm_http.urls=["{url}"]', "vllm_http.push_dtype=float32")
    setup = train_setup()
    setup.engine_factory = engine_factory_for(cfg)
    train_rl(cfg, out, setup=setup)


@pytest.mark.slow
def test_vllm_http_on_two_fsdp_ranks_equals_one_process(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    start = tmp_path / "start"
    F.setup(seed=0).model.save_pretrained(start, safe_serialization=True)
    dirs = {n: shutil.copytree(start, tmp_path / f"served_{n}") for n in ("fsdp", "single")}
    with FakeServer(dirs["fsdp"]) as srv:
        run_workers(WORKER, tmp_path, {"OUT": str(tmp_path / "fsdp"), "SERVED": str(dirs["fsdp"]), "URL": srv.url})
        assert srv.reloads == 3  # version 0 at the start, then after each of the 2 steps: rank 0 only
    with FakeServer(dirs["single"]) as srv:
        torch.set_num_threads(1)
        http_run(str(dirs["single"]), srv.url, str(tmp_path / "single"), None)
    fsdp, single = F.metrics(tmp_path / "fsdp"), F.metrics(tmp_path / "single")
    for key in ("reward/total", "rollout/response_tokens", "guidance/kl_tokens", "pg/tokens"):
        assert [r[key] for r in fsdp] == [r[key] for r in single], key  # the same rollouts
    assert all(r["loss/kl"] > 0 for r in single)
    for ra, rb in zip(single, fsdp, strict=True):
        for key in ("loss/total", "loss/kl", "grad/norm"):
            assert rb[key] == pytest.approx(ra[key], rel=1e-4, abs=1e-6), (ra["step"], key)
    # the HF-layout weights of the FSDP checkpoint were gathered without a sampling copy
    wa = load_file(str(tmp_path / "single" / "checkpoints" / "step_2" / "model.safetensors"))
    wb = load_file(str(tmp_path / "fsdp" / "checkpoints" / "step_2" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 5e-5  # measured 1.1e-5 (summation order, AdamW)
    assert (tmp_path / "fsdp" / "checkpoints" / "step_2" / "dcp").is_dir()
    # the servers of the FSDP run hold the final weights (pushed after step 2)
    served = load_file(str(dirs["fsdp"] / "model.safetensors"))
    assert max(float((served[k] - wb[k]).abs().max()) for k in served) < 1e-6
