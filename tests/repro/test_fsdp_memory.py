"""What FSDP2 keeps per rank (issue 40), on 2 gloo ranks against one process: the training state (fp32 master
weights, gradients and AdamW moments, counted from the tensors' local storage) per rank is half of one process's,
the ranks built and sharded their models one after another (``repro.distributed.wait_turn`` / ``end_turn``), and
under ``bf16-mixed`` the layers compute with bf16 weights gathered from fp32 shards
(``MixedPrecisionPolicy(param_dtype=bfloat16)``), which are freed after each layer's forward: the bf16 weights
autograd holds until the backward are at most one layer's, where one process holds a bf16 cast of every layer. The state is counted rather than read from the allocator: the
CPU has no per-process peak-allocation counter, and the resident set of a small model is mostly the interpreter."""

from __future__ import annotations

import json
from pathlib import Path

from torchrun_helper import run_workers

WORKER = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
sys.path[:0] = [os.environ["TESTS_DIR"], os.path.join(os.environ["TESTS_DIR"], "repro"),
                os.path.dirname(os.environ["TESTS_DIR"])]
torch.set_num_threads(1)
dist.init_process_group("gloo")
from test_fsdp_memory import step_state
from repro.distributed import DistContext, Launch, end_turn, wait_turn
rank, world = dist.get_rank(), dist.get_world_size()
ctx = DistContext(Launch(world, rank, rank), torch.device("cpu"), owned=False)
out = step_state(ctx)
got = [None] * world
dist.all_gather_object(got, out)
if rank == 0:
    json.dump(got, open(os.environ["OUT"], "w"))
dist.barrier()
dist.destroy_process_group()
from repro.distributed import exit_process
exit_process(0)
'''


def local_bytes(t) -> int:  # type: ignore[no-untyped-def]
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def step_state(ctx) -> dict:  # type: ignore[no-untyped-def]
    """Build (in this rank's turn), shard, one bf16-mixed step of the tg_ema_teacher loss; the state it holds."""
    import time

    import _rl_fixtures as F
    import torch
    from test_train_step import _groups, _hint

    from repro.distributed import end_turn, wait_turn
    from repro.precision import autocast
    from repro.tokenizer import ChatEncoder
    from repro.trainer_step import LossRoot, build_batch, collate

    cfg = F.config("tg_ema_teacher", "model.precision=bf16-mixed")
    wait_turn(ctx)
    t0 = time.time()
    s = F.setup(seed=0)
    root = LossRoot(s.model, cfg)
    if ctx is not None:
        ctx.shard(root, cfg.model.precision)
    t1 = time.time()
    end_turn(ctx)
    seen: list[torch.dtype] = []
    s.model.model.layers[0].mlp.register_forward_pre_hook(lambda m, a: seen.append(m.up_proj.weight.dtype))
    enc = ChatEncoder(s.tokenizer)
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    world = 1 if ctx is None else ctx.world
    rank = 0 if ctx is None else ctx.rank
    mine = plan.trajs[rank::world]
    saved: list[torch.Tensor] = []  # what autograd keeps for the backward, recorded as the forward saves it

    def keep(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    shapes = {tuple(p.shape) for p in F.setup(seed=0).model.parameters() if p.dim() == 2}  # unsharded weight shapes
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), autocast(cfg.model.precision):
        loss, _ = root(collate(mine, 0), plan.n_pg, plan.n_kl)
    # weight matrices still held (storage not freed) between the forward and the backward
    held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved
            if t.dtype == torch.bfloat16 and t.dim() == 2 and tuple(t.shape) in shapes and t.untyped_storage().nbytes()}
    layer = sum(2 * p.numel() for p in s.model.model.layers[0].parameters() if p.dim() == 2)  # DTensor: global
    (loss * world).backward()
    opt = torch.optim.AdamW([p for p in s.model.parameters() if p.requires_grad], lr=1e-3)
    opt.step()
    params = sum(local_bytes(p) for p in root.parameters())
    grads = sum(local_bytes(p.grad) for p in root.parameters() if p.grad is not None)
    moments = sum(local_bytes(v) for st in opt.state.values() for v in st.values() if torch.is_tensor(v) and v.dim())
    masters = sorted({str((p.to_local() if hasattr(p, "to_local") else p).dtype) for p in root.parameters()})
    return {"params": params, "grads": grads, "moments": moments, "turn": [t0, t1], "masters": masters,
            "compute_dtype": str(seen[0]), "weights_held_for_backward": sum(held.values()),
            "layer_bf16_bytes": layer}


def test_two_ranks_each_hold_half_the_training_state_of_one_process(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    run_workers(WORKER, tmp_path, {"OUT": str(out)})
    ranks = json.loads(out.read_text())
    single = step_state(None)
    total = single["params"] + single["grads"] + single["moments"]
    assert single["compute_dtype"] == "torch.float32"  # one process: fp32 weights, bf16 only inside autocast's matmuls
    for r in ranks:
        mine = r["params"] + r["grads"] + r["moments"]
        # half of one process's state, plus at most the padding of each sharded tensor to an even row count
        assert 0.45 * total < mine < 0.55 * total, (mine, total)
        assert r["masters"] == ["torch.float32"] and r["compute_dtype"] == "torch.bfloat16"
        # bf16 weight matrices autograd holds between forward and backward: one process keeps autocast's bf16 cast
        # of every layer's weights; an FSDP rank at most one layer's gathered weights (the last layer, where the
        # backward starts; measured 51,200 B, one layer 73,728 B, against 131,072 B for the 2 layers in one process)
        held, one = r["weights_held_for_backward"], r["layer_bf16_bytes"]
        assert held <= one and held < single["weights_held_for_backward"] / 2, (held, one, single)
    assert sum(r["params"] for r in ranks) >= single["params"]
    # rank 1 built and sharded its model only after rank 0 had finished
    assert ranks[0]["turn"][1] <= ranks[1]["turn"][0]
