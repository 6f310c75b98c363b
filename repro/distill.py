"""Self-distillation: fine-tune the model on its own best trajectories with soft targets, and the K-round loop.

``train_distill`` picks, per task, the ``distill.top_k`` highest-reward trajectories (reward ≥ ``distill.min_reward``)
from a pool — either sampled now with the current model (``distill.pool_rollouts`` per task over
``distill.pool_tasks`` tasks), read from an imported dataset (``distill.dataset``: logged trajectories after
``tgsuite data filter``, rewarded with ``[reward]``'s weights, ``repro.dataset_io``) or handed in (RL's best
trajectories, ``best.jsonl`` of an RL run) — and trains on the
policy-generated tokens of those trajectories with

    L = hard_weight · CE(y_t) + (1 − hard_weight) · KL(q_τ ‖ p_θ),    q_τ = softmax(z_T / τ)

where z_T are the logits of a frozen copy of the model taken at the start of the stage (its own token
distributions) and τ = ``distill.target_temperature``. With τ = 1 and hard_weight = 0 the target equals the
student at the start and the gradient is zero; the config rejects that combination. τ < 1 sharpens the model's own
distribution on its best trajectories. The KL is computed from hidden states in activation-checkpointed chunks, so
[T, V] logits never exist for a whole sequence.

``train_loop`` runs distill → RL → distill … for ``distill.rounds`` rounds: round r distils (round 0 from a fresh
pool, later rounds from the previous RL stage's ``best.jsonl``), then runs RL from the distilled checkpoint; a final
distill stage closes the loop. Each stage is its own run directory under ``out_dir``.
"""

from __future__ import annotations

import copy
import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from protocols.provenance import git_state, package_versions, utc_now
from repro import checkpoint as ck
from repro.compute import ComputeLedger, count_params, train_flops
from repro.config import ConfigError, TrainConfig, to_toml
from repro.precision import autocast
from repro.rl_setup import RLSetup, default_setup
from repro.rollout import RolloutSettings, run_groups
from repro.runtime import train_device
from repro.schema import DistillExample
from repro.tokenizer import ChatEncoder
from repro.track import MetricsWriter, progress
from repro.train import TaskStream, train_rl

logger = logging.getLogger(__name__)


def select_best(samples: Sequence[DistillExample], top_k: int, min_reward: float) -> list[DistillExample]:
    """The ``top_k`` highest-reward samples per task with reward ≥ ``min_reward`` (stable on ties)."""
    by_task: dict[str, list[DistillExample]] = {}
    for s in samples:
        by_task.setdefault(s.instance_id, []).append(s)
    out = []
    for tid in sorted(by_task):
        ranked = sorted(by_task[tid], key=lambda s: -s.reward)
        out += [DistillExample(instance_id=tid, reward=s.reward, ids=list(s.ids), act=list(s.act))
                for s in ranked[:top_k] if s.reward >= min_reward and sum(s.act) > 0]
    return out


def read_examples(path: Path) -> list[DistillExample]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such file; pass the best.jsonl written by `tgsuite train rl`")
    return [DistillExample.model_validate_json(ln) for ln in p.read_text().splitlines() if ln.strip()]


def write_examples(path: Path, examples: list[DistillExample]) -> None:
    Path(path).write_text("".join(e.model_dump_json() + "\n" for e in examples))


def _soft_ce_chunk(hs: torch.Tensor, w: torch.Tensor, target_logp: torch.Tensor, y: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    logp = F.log_softmax((hs @ w.T).float(), dim=-1)
    kl = (target_logp.exp() * (target_logp - logp)).sum(-1)
    ce = -logp.gather(-1, y[:, None]).squeeze(-1)
    return kl, ce


def distill_loss(student: torch.nn.Module, teacher: torch.nn.Module, ids: torch.Tensor, act: torch.Tensor, *,
                 tau: float, hard_weight: float, chunk: int = 256) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-mean loss over act tokens of one sequence (see the module docstring)."""
    rows = torch.nonzero(act, as_tuple=True)[0]
    rows = rows[rows > 0]
    if rows.numel() == 0:
        return torch.zeros((), requires_grad=True), {"kl": 0.0, "ce": 0.0, "n": 0}
    h = student.model(input_ids=ids[None], use_cache=False).last_hidden_state[0]
    with torch.no_grad():
        ht = teacher.model(input_ids=ids[None], use_cache=False).last_hidden_state[0][rows - 1]
        wt = teacher.get_output_embeddings().weight
    w = student.get_output_embeddings().weight
    y = ids[rows]
    kls, ces = [], []
    for s in range(0, rows.numel(), chunk):
        with torch.no_grad():
            tgt = F.log_softmax((ht[s:s + chunk] @ wt.T).float() / tau, dim=-1)
        kl, ce = checkpoint(_soft_ce_chunk, h[rows[s:s + chunk] - 1], w, tgt, y[s:s + chunk], use_reentrant=False)
        kls.append(kl)
        ces.append(ce)
    kl, ce = torch.cat(kls).mean(), torch.cat(ces).mean()
    loss = hard_weight * ce + (1.0 - hard_weight) * kl
    return loss, {"kl": float(kl.detach()), "ce": float(ce.detach()), "n": int(rows.numel())}


def _pool(cfg: TrainConfig, setup: RLSetup) -> list[DistillExample]:
    """``distill.pool_rollouts`` rollouts of each of the first ``distill.pool_tasks`` tasks, as candidates."""
    d, r = cfg.distill, cfg.rollout
    settings = RolloutSettings(d.pool_rollouts, r.max_turns, r.max_new_tokens, r.max_context_tokens, r.temperature,
                               r.top_p, env_workers=r.env_workers)
    stream = TaskStream(setup.tasks, cfg.run.seed + 7, cfg.tasks.shuffle, cfg.tasks.epochs)
    encoder, samples = ChatEncoder(setup.tokenizer), []
    setup.model.eval()
    for item in range(min(d.pool_tasks, len(setup.tasks))):
        samples += run_groups(instances=[stream[item]], items=[item], make_env=setup.make_env,
                              engine=setup.engine_factory(setup.model, setup.tokenizer.pad_token_id),
                              encoder=encoder, tokenizer=setup.tokenizer, tools=setup.tools, checker=setup.checker,
                              settings=settings, run_seed=cfg.run.seed + 7, reward_weights=cfg.reward)[0]
    return [DistillExample(instance_id=s.instance_id, reward=s.reward, ids=s.encoded.ids, act=s.encoded.act)
            for s in samples]


def _fit(model: torch.nn.Module, teacher: torch.nn.Module, examples: list[DistillExample],
         opt: torch.optim.Optimizer, cfg: TrainConfig, ledger: ComputeLedger, out: Path) -> None:
    """``distill.steps`` optimizer steps over seeded shuffles of ``examples``; one metrics line per step."""
    d = cfg.distill
    rng = random.Random(cfg.run.seed)
    order: list[int] = []
    writer = MetricsWriter(out / "metrics.jsonl", tensorboard=cfg.run.tracker == "tensorboard")
    flop_params = count_params(model)["flop_params"]
    dev = next(model.parameters()).device
    bar = progress(d.steps, 0, cfg.run.progress, desc="distill")
    for step in range(d.steps):
        batch = []
        for _ in range(min(d.batch, len(examples))):
            if not order:
                order = list(range(len(examples)))
                rng.shuffle(order)
            batch.append(examples[order.pop()])
        opt.zero_grad(set_to_none=True)
        stats = {"kl": 0.0, "ce": 0.0, "n": 0}
        with ledger.phase("trainer"):
            for ex in batch:
                with autocast(cfg.model.precision, dev.type):
                    loss, st = distill_loss(model, teacher, torch.tensor(ex.ids, device=dev),
                                            torch.tensor(ex.act, device=dev),
                                            tau=d.target_temperature, hard_weight=d.hard_weight,
                                            chunk=cfg.guidance.chunk_size)
                (loss / len(batch)).backward()
                stats = {k: stats[k] + st[k] / (len(batch) if k != "n" else 1) for k in stats}
            gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip))
            opt.step()
        ntok = sum(len(ex.ids) for ex in batch)
        ledger.add("trainer", tokens=ntok, flops=train_flops(flop_params, ntok))
        writer.log(step + 1, {"loss/distill_kl": stats["kl"], "loss/distill_ce": stats["ce"],
                              "distill/act_tokens": stats["n"], "grad/norm": gn, "distill/examples": len(examples),
                              "distill/mean_reward": sum(e.reward for e in examples) / len(examples)})
        bar.update(1)
    bar.close()
    writer.close()


def _no_lora(cfg: TrainConfig) -> None:
    if cfg.model.lora.enabled:
        raise ConfigError("model.lora.enabled: self-distillation (`train distill` / `train loop`) with LoRA adapters is "
                          "not implemented (its teacher is a full copy of the model); set model.lora.enabled = false")


def train_distill(cfg: TrainConfig, out_dir: str | Path, *, setup: RLSetup | None = None,
                  examples: list[DistillExample] | None = None, argv: list[str] | None = None) -> ck.CheckpointInfo:
    """One self-distillation stage; returns the checkpoint it writes (``checkpoints/step_<distill.steps>``)."""
    _no_lora(cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if ck.list_checkpoints(out):
        raise ConfigError(f"{out}: already holds a distill run; choose a new --out directory")
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    if setup is None:
        from repro.dataset_io import model_setup

        setup = model_setup(cfg) if examples is None and cfg.distill.dataset else default_setup(cfg)
    setup.model.to(train_device(cfg.model.device))  # model.device: the pool's rollouts and the fit run there
    ledger = ComputeLedger()
    if examples is None and cfg.distill.dataset:  # an imported, filtered dataset (repro.dataset_io)
        from repro.dataset_io import distill_examples

        pool, _ = distill_examples(cfg.distill.dataset, setup.tokenizer, setup.tools, cfg.reward)
        examples = select_best(pool, cfg.distill.top_k, cfg.distill.min_reward)
    elif examples is None:
        with ledger.phase("rollout"):
            examples = select_best(_pool(cfg, setup), cfg.distill.top_k, cfg.distill.min_reward)
    write_examples(out / "examples.jsonl", examples)
    if not examples:
        raise ConfigError("distill: no trajectory reached distill.min_reward (or none had generated tokens); lower "
                          "distill.min_reward or raise distill.pool_rollouts")
    (out / "config.toml").write_text(to_toml(cfg))
    model = setup.model
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    model.train()
    d = cfg.distill
    opt = torch.optim.AdamW(model.parameters(), lr=d.lr, betas=tuple(cfg.optim.betas),
                            weight_decay=cfg.optim.weight_decay)
    _fit(model, teacher, examples, opt, cfg, ledger, out)
    info = ck.save_checkpoint(out, d.steps, model=model, tokenizer=setup.tokenizer,
                              trainer_state={"optimizer": opt.state_dict(), "step": d.steps, "rng": ck.rng_state({})},
                              config_sha256=cfg.sha256(), arm=cfg.run.arm, seed=cfg.run.seed,
                              compute=ledger.snapshot())
    git_commit, git_dirty = git_state()
    now = utc_now()
    ck.write_manifest(out, ck.TrainManifest(
        kind="distill", run_dir=str(out), created_at=now, updated_at=now, argv=list(argv or []), git_commit=git_commit,
        git_dirty=git_dirty, packages=package_versions(), arm=cfg.run.arm, seed=cfg.run.seed, config=cfg.to_dict(),
        config_sha256=cfg.sha256(), model_params=count_params(model), steps_done=d.steps, status="done",
        compute=ledger.snapshot(), checkpoints=[info.path],
        summary={"examples": len(examples), "mean_reward": sum(e.reward for e in examples) / len(examples)}))
    return info


def train_loop(cfg: TrainConfig, out_dir: str | Path, *, setup: RLSetup | None = None,
               argv: list[str] | None = None) -> ck.CheckpointInfo:
    """distill → RL → … → distill for ``distill.rounds`` rounds (see the module docstring)."""
    _no_lora(cfg)
    out = Path(out_dir)
    if setup is None:
        setup = default_setup(cfg)
    examples: list[DistillExample] | None = None
    info: ck.CheckpointInfo | None = None
    for r in range(cfg.distill.rounds):
        info = train_distill(cfg, out / f"round_{r}" / "distill", setup=setup, examples=examples, argv=argv)
        ck.load_weights(setup.model, Path(info.path))
        rl_dir = out / f"round_{r}" / "rl"
        info = train_rl(cfg, rl_dir, setup=setup, argv=argv)
        ck.load_weights(setup.model, Path(info.path))
        examples = read_examples(rl_dir / "best.jsonl")
        examples = [e for e in examples if e.reward >= cfg.distill.min_reward]
    info = train_distill(cfg, out / "final_distill", setup=setup, examples=examples, argv=argv)
    (out / "loop.json").write_text(json.dumps({"rounds": cfg.distill.rounds, "final": info.path}, indent=2))
    return info
