"""The RL training loop (GRPO / targeted guidance), one linear function: :func:`train_rl`.

Per step (METHOD §6.13): take ``groups`` groups of ``group_size`` rollouts (synchronously, or from the async
producer with bounded staleness), score them, build masks / advantages / hint-spliced teacher views
(``repro.trainer_step.build_batch``), run the micro-batches through :class:`repro.trainer_step.LossRoot` (teacher
forward under no_grad, student forward, chunked log-probs and KL), clip, AdamW step, update an EMA teacher
(``guidance.teacher``, :mod:`repro.teacher`), publish the new weights
(version += 1), log one metrics line, checkpoint when due.

One process or many (torchrun + FSDP2), the code is the same: it trains through a :class:`repro.runtime.Runtime`
(``repro.distributed.init`` returns a ``LocalRuntime`` or a ``DistContext``) and asks it wherever one process and many
differ (which rollouts this rank samples, gradient scaling, reductions, checkpoints). :func:`start_run` builds what
the loop needs (an :class:`RLRun`: model, teacher, optimizer, rollout sources, resume); :func:`run_loop` runs the
steps.

Run directory (ARCHITECTURE §4): ``config.toml`` (resolved), ``manifest.json``, ``metrics.jsonl``, ``best.jsonl``
(:mod:`repro.rl_record`), ``checkpoints/step_<n>/`` (``Runtime.save_checkpoint``). ``resume=True`` continues from
the newest checkpoint; synchronous runs resume exactly.

What plugs in (:class:`RLSetup`): tokenizer, model, tasks, an environment factory, a turn checker, a hint source
and a sampler factory. :func:`repro.rl_setup.default_setup` builds them from the harness for real runs; tests pass
small stand-ins.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.schema import TaskInstance
from protocols.provenance import git_state, package_versions, utc_now
from repro import checkpoint as ck
from repro import distributed, lora
from repro.async_producer import AsyncProducer, StalenessStats, WeightStore, clone_for_producer, take_fresh
from repro.compute import ComputeLedger, count_params, forward_flops, merge_ledgers, train_flops
from repro.config import ConfigError, TrainConfig, load_saved
from repro.precision import autocast, master_weights_ok
from repro.rl_metrics import rollout_metrics, version_metrics
from repro.rl_record import RunRecord
from repro.rl_setup import RLSetup, check_engine_choice, default_setup
from repro.rollout import (
    RolloutSample,
    RolloutSettings,
    group_seed,
    run_groups,
)
from repro.runtime import ONE_PROCESS, Runtime
from repro.tokenizer import ChatEncoder
from repro.track import progress
from repro.trainer_step import BatchPlan, LossRoot, build_batch, collate, reduce_stats

logger = logging.getLogger(__name__)

class TaskStream:
    """Item i → task: a seeded permutation per epoch (single epoch in the paper)."""

    def __init__(self, tasks: list[TaskInstance], seed: int, shuffle: bool, epochs: int) -> None:
        if not tasks:
            raise ConfigError("tasks: the task list is empty; check tasks.path and tasks.split")
        self.tasks, self.seed, self.shuffle, self.epochs = tasks, seed, shuffle, epochs
        self._warned = False

    def __getitem__(self, item: int) -> TaskInstance:
        n = len(self.tasks)
        epoch, i = divmod(item, n)
        if epoch >= self.epochs and not self._warned:
            logger.warning("task stream passed tasks.epochs=%d (item %d of %d tasks); reusing tasks", self.epochs,
                           item, n)
            self._warned = True
        order = list(range(n))
        if self.shuffle:
            random.Random(self.seed * 7919 + epoch).shuffle(order)
        return self.tasks[order[i]]


def _lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    o, total = cfg.optim, cfg.run.steps

    def f(step: int) -> float:
        if o.warmup_steps and step < o.warmup_steps:
            return (step + 1) / o.warmup_steps
        if o.schedule == "cosine":
            frac = (step - o.warmup_steps) / max(1, total - o.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        return 1.0

    return f


def _check_run_dir(out: Path, cfg: TrainConfig, resume: bool) -> Path | None:
    saved = out / "config.toml"
    if not resume:
        if ck.list_checkpoints(out) or (out / "metrics.jsonl").exists():
            raise ConfigError(f"{out}: already holds a training run; pass --resume to continue it or choose a new "
                              "--out directory")
        return None
    latest = ck.latest_checkpoint(out)
    if latest is None:
        raise ConfigError(f"--resume: {out}/checkpoints has no step_<n> checkpoint; run without --resume first or "
                          "set run.checkpoint_every")
    if saved.exists():
        old = load_saved(saved).to_dict()
        new = cfg.to_dict()
        for key in ("steps", "progress", "checkpoint_every", "keep_checkpoints"):
            old["run"].pop(key, None)
            new["run"].pop(key, None)
        if old != new:
            diff = [f"{s}.{k}" for s in new for k in new[s] if old.get(s, {}).get(k) != new[s][k]]
            raise ConfigError(f"--resume: {saved} differs from the requested config in {diff}; resume with the same "
                              "settings (only run.steps / checkpoint_every may change)")
    return latest


class _Sources:
    """Where groups come from: produced inline (sync) or by the async producer thread."""

    def __init__(self, cfg: TrainConfig, setup: RLSetup, stream: TaskStream, ledger: ComputeLedger,
                 flop_params: int, start_item: int, start_step: int, rt: Runtime, copy: nn.Module | None) -> None:
        self.cfg, self.setup, self.stream, self.ledger, self.flop_params = cfg, setup, stream, ledger, flop_params
        self.rt, self.copy = rt, copy  # this process's place; the unsharded sampling copy (Runtime.sampling_copy)
        if copy is None:  # sampling without a copy of its own: FSDP + vllm_http pushes this run's weights first
            rt.publish(setup.model, None, setup.engine_factory, start_step)
        self.streams = cfg.rollout.sampling_streams or rt.world
        self.encoder = ChatEncoder(setup.tokenizer)
        self.next_item = start_item
        self.stats = StalenessStats()
        r = cfg.rollout
        self.settings = RolloutSettings(r.group_size, r.max_turns, r.max_new_tokens, r.max_context_tokens,
                                        r.temperature, r.top_p, cfg.guidance.hint_in_rollout, r.env_workers)
        self.producer: AsyncProducer | None = None
        self.store: WeightStore | None = None
        if cfg.async_.enabled:
            lead = cfg.async_.max_staleness if cfg.async_.max_lead is None else cfg.async_.max_lead
            self.store = WeightStore()
            self.store.publish(start_step, setup.model.state_dict())
            twin = clone_for_producer(setup.model)
            loaded = {"v": None}

            def produce(batch: int, version: int, state: dict[str, torch.Tensor]) -> list[list[RolloutSample]]:
                if loaded["v"] != version:
                    twin.load_state_dict(state)
                    loaded["v"] = version
                return self._batch(twin, batch * cfg.rollout.groups, version)

            # one work item = one step's batch of `groups` groups, sampled in one lock-step batch
            qsize = cfg.async_.queue_groups or (lead + 1)
            self.producer = AsyncProducer(produce, self.store, items_per_step=1,
                                          start_item=start_item // cfg.rollout.groups, start_step=start_step,
                                          max_lead=lead, queue_size=qsize).start()

    def _batch(self, model: torch.nn.Module, first_item: int, version: int) -> list[list[RolloutSample]]:
        """The step's groups: ``self.streams`` chunks, one ``run_groups`` call (and sampling generator) each; under
        FSDP this rank samples its share of the chunks and the groups of all ranks are gathered in chunk order."""
        s, g = self.setup, self.cfg.rollout.groups
        items = list(range(first_item, first_item + g))
        hint_src = (lambda inst, turn, rng: s.hint_text(inst, turn, rng)) if self.settings.hint_in_rollout else None
        chunks = distributed.split_streams(items, self.streams)
        per = len(chunks) // self.rt.world  # this rank's share of the chunks (one process: all of them)
        groups: list[list[RolloutSample]] = []
        for chunk in chunks[self.rt.rank * per:(self.rt.rank + 1) * per]:
            engine = s.engine_factory(model, s.tokenizer.pad_token_id)
            engine.set_version(version)  # the stamp every sample of this batch carries (RolloutSample.version)
            groups += run_groups(instances=[self.stream[i] for i in chunk], items=chunk,
                                 make_env=s.make_env, engine=engine, encoder=self.encoder, tokenizer=s.tokenizer,
                                 tools=s.tools, checker=s.checker, settings=self.settings, run_seed=self.cfg.run.seed,
                                 reward_weights=self.cfg.reward, hint_source=hint_src, ledger=self.ledger,
                                 flop_params=self.flop_params)
        return [grp for part in self.rt.gather(groups) for grp in part]

    def take(self, step: int) -> list[list[RolloutSample]]:
        g = self.cfg.rollout.groups
        if self.producer is None:
            was_training = self.setup.model.training
            self.setup.model.eval()
            with sampler_threads(self.cfg.rollout.sampler_threads):
                groups = self._batch(self.setup.model if self.copy is None else self.copy, self.next_item, step)
            self.setup.model.train(was_training)
            self.next_item += g
            self.stats.consumed += 1
            self.stats.hist[0] += 1
            return groups
        got = take_fresh(self.producer, 1, step, self.cfg.async_.max_staleness, self.stats)[0]
        self.next_item = (got.item + 1) * g
        return got.payload

    def published(self, version: int) -> None:
        if self.store is not None:
            self.store.publish(version, self.setup.model.state_dict())
        self.rt.publish(self.setup.model, self.copy, self.setup.engine_factory, version)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()


@contextlib.contextmanager
def sampler_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` while rollouts sample (0: unchanged), restored after. With one thread the
    sampler leaves the other core to the episodes' tool calls and grading, which run beside it (rollout.env_workers);
    an OpenMP team of two waits on whichever core a tool process holds."""
    if n <= 0:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _hint_ids_fn(setup: RLSetup, encoder: ChatEncoder, seed: int) -> Callable[[RolloutSample, int], list[int]]:
    by_id = {t.instance_id: t for t in setup.tasks}

    def hint_ids(sample: RolloutSample, turn: int) -> list[int]:
        rng = random.Random(group_seed(seed, sample.item, 1000 + 97 * sample.index + turn))
        return encoder.hint_ids(setup.hint_text(by_id[sample.instance_id], turn, rng))

    return hint_ids


def optimizer_step(root: LossRoot, cfg: TrainConfig, plan: BatchPlan, opt: torch.optim.Optimizer, pad_id: int,
                   ledger: ComputeLedger, flop_params: int,
                   rt: Runtime = ONE_PROCESS) -> tuple[dict[str, Any], float]:
    """One optimizer step over the plan's micro-batches; returns the step's metrics and the teacher forwards'
    wall time (seconds, counted in the ``teacher`` ledger phase and taken out of the ``trainer`` phase). Each rank
    runs its share (``repro.distributed.micro_batches``; one process: all of them) and the metrics are reduced over
    the ranks."""
    opt.zero_grad(set_to_none=True)
    parts, total, n_tok, n_teacher, teacher_s = [], 0.0, 0, 0, 0.0
    split: dict[str, list[torch.Tensor]] = {}
    mbs = cfg.optim.micro_batch
    device = next(root.parameters()).device
    batches, n_fill = distributed.micro_batches(plan.trajs, mbs, rt.rank, rt.world)
    for i, trajs in enumerate(batches):
        mb = collate(trajs, pad_id, padding_free=cfg.optim.padding_free).to(device)
        with root.student_attention(mb):  # forward and backward: checkpointed layers recompute in the backward
            with autocast(cfg.model.precision, device.type):
                loss, terms = root(mb, plan.n_pg, plan.n_kl)
            if cfg.run.log_grad_split and loss.requires_grad:
                _backward_split(root, {k: t for k, t in (("pg", terms.pg), ("kl", terms.kl)) if t is not None},
                                split)
            else:
                rt.backward(loss)
        if i >= len(batches) - n_fill:
            continue  # a zero-weight filler (repro.distributed.micro_batches): no tokens, no statistics
        parts.append(terms.stats)
        teacher_s += terms.teacher_s
        total += float(loss.detach())
        n_tok += mb.n_tokens
        n_teacher += mb.n_teacher_tokens if cfg.guidance.lam > 0 else 0
    total = rt.sum(total)[0]
    parts = [p for part in rt.gather(parts) for p in part]
    norms = {f"grad/norm_{k}": float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g)
                                                                                   for g in v]))) for k, v in split.items()}
    params = [p for p in root.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip) if params else 0.0
    grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # a DTensor under FSDP
    opt.step()
    root.after_optimizer_step()  # EMA teacher: θ_T ← (1−r)·θ_T + r·θ (repro.teacher); nothing for live / fixed
    ledger.add("trainer", tokens=n_tok, flops=train_flops(flop_params, n_tok))
    ledger.add("teacher", wall_s=teacher_s, tokens=n_teacher, flops=forward_flops(flop_params, n_teacher))
    return {"loss/total": total, "grad/norm": grad_norm, **norms, **reduce_stats(parts)}, teacher_s


def _backward_split(root: LossRoot, terms: dict[str, torch.Tensor], acc: dict[str, list[torch.Tensor]]) -> None:
    """Backward each loss term separately (one extra backward) to log ‖∇L_GRPO‖ and λ‖∇L_KL‖ (METHOD §6.11);
    the parameter gradients are their sum, exactly as with one backward of the total."""
    params = [p for p in root.parameters() if p.requires_grad]
    live = [(k, t) for k, t in terms.items() if t.requires_grad]
    for i, (key, term) in enumerate(live):
        grads = torch.autograd.grad(term, params, retain_graph=i + 1 < len(live), allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]
        if key not in acc:
            acc[key] = [torch.zeros_like(p) for p in params]
        for a, g, p in zip(acc[key], grads, params, strict=True):
            a.add_(g)
            p.grad = g.clone() if p.grad is None else p.grad + g


def train_rl(cfg: TrainConfig, out_dir: str | Path, *, setup: RLSetup | None = None, resume: bool = False,
             argv: list[str] | None = None, protocol_hash: str | None = None) -> ck.CheckpointInfo:
    """Run (or resume) RL training; returns the final checkpoint's :class:`repro.checkpoint.CheckpointInfo`.

    Under torchrun with ``cluster.fsdp = true`` every rank runs this function (``repro.distributed``); rank 0
    writes the run directory's files."""
    check_engine_choice(cfg, None if setup is None else setup.engine_factory)
    rt = distributed.init(cfg)  # checks cluster.* against the launch; one process: a LocalRuntime
    try:
        run = start_run(cfg, Path(out_dir), rt, setup=setup, resume=resume, argv=argv, protocol_hash=protocol_hash)
        info = run_loop(run)
    except BaseException:
        rt.close(failed=True)
        raise
    rt.close()
    return info


@dataclass(frozen=True)
class RLRun:
    """What :func:`start_run` builds and :func:`run_loop` steps: the model in its loss root (student, teacher),
    the optimizer and LR schedule, the rollout sources, the ledger and the run record, from step ``step0``."""

    cfg: TrainConfig
    out: Path
    rt: Runtime
    setup: RLSetup
    root: LossRoot
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    ledger: ComputeLedger
    sources: _Sources
    record: RunRecord
    manifest: ck.TrainManifest
    hint_ids: Callable[[RolloutSample, int], list[int]]
    flop_params: int
    step0: int


def start_run(cfg: TrainConfig, out: Path, rt: Runtime, *, setup: RLSetup | None, resume: bool,
              argv: list[str] | None, protocol_hash: str | None) -> RLRun:
    """Start-up: check the run directory, build (or take) the setup, the model and its teacher, shard them, build
    the optimizer and schedule, load the newest checkpoint when resuming, write config and manifest, start the
    rollout sources."""
    record = RunRecord(out, writes=rt.main)
    record.create()
    latest = _check_run_dir(out, cfg, resume)
    rt.barrier()  # every rank has checked the run directory before rank 0 writes into it
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    setup, root, copy, params = _build_model(cfg, rt, setup, latest, record)
    o = cfg.optim
    opt = torch.optim.AdamW(lora.trainable_parameters(root.lm), lr=o.lr, betas=tuple(o.betas),
                            weight_decay=o.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg))
    ledger = ComputeLedger()
    step0, next_item, dropped0 = 0, 0, 0
    if latest is not None:
        step0, next_item, dropped0 = _resume(rt, latest, root, opt, sched, ledger)
    encoder = ChatEncoder(setup.tokenizer)
    stream = TaskStream(setup.tasks, cfg.run.seed, cfg.tasks.shuffle, cfg.tasks.epochs)
    record.open(step0 if latest is not None else None, tensorboard=cfg.run.tracker == "tensorboard")
    manifest = _manifest(cfg, out, rt, argv=argv, params=params, step0=step0, protocol_hash=protocol_hash,
                         teacher_copy=root.teacher_lm is not None)
    record.write_manifest(manifest)
    sources = _Sources(cfg, setup, stream, ledger, params["flop_params"], next_item, step0, rt, copy)
    sources.stats.dropped = dropped0
    return RLRun(cfg=cfg, out=out, rt=rt, setup=setup, root=root, opt=opt, sched=sched, ledger=ledger,
                 sources=sources, record=record, manifest=manifest, hint_ids=_hint_ids_fn(setup, encoder, cfg.run.seed),
                 flop_params=params["flop_params"], step0=step0)


def _build_model(cfg: TrainConfig, rt: Runtime, setup: RLSetup | None, latest: Path | None,
                 record: RunRecord) -> tuple[RLSetup, LossRoot, nn.Module | None, dict[str, int]]:
    """The setup (built once, from the latest checkpoint's weights when resuming), the trained model in its loss
    root, the sampling copy (``Runtime.sampling_copy``) and the parameter counts. Ranks build one after another
    and shard before the next one builds (``Runtime.wait_turn``)."""
    rt.wait_turn()
    if setup is None:
        setup = default_setup(cfg, init_override=latest)
    model = lora.prepare(rt.place(setup.model), cfg.model.lora, seed=cfg.run.seed)  # [model.lora]
    distributed.activation_checkpointing(model, cfg.model.activation_checkpointing)
    if latest is not None and setup.init_from != latest:
        ck.load_weights(model, latest)
    model.train()
    master_weights_ok(model, cfg.model.precision)
    record.write_config(cfg)
    root = LossRoot(model, cfg)  # a fresh ema/fixed teacher copy: resuming loads its saved state (Runtime)
    params = count_params(model)
    if root.teacher_lm is not None:
        params["teacher_copy"] = count_params(root.teacher_lm)["total"]  # ema/fixed: memory only, FLOPs unchanged
    copy = rt.sampling_copy(model, cfg.rollout.engine)  # before the shards: the unsharded weights
    rt.shard(root, cfg.model.precision)
    rt.end_turn()
    return setup, root, copy, params


def _resume(rt: Runtime, latest: Path, root: LossRoot, opt: torch.optim.Optimizer,
            sched: torch.optim.lr_scheduler.LambdaLR, ledger: ComputeLedger) -> tuple[int, int, int]:
    """Load the checkpoint's teacher copy, optimizer, schedule, RNG states and ledger; return the step, the task
    stream's next item and the async counter ``dropped`` it was saved at."""
    state = rt.load_checkpoint(latest, root=root, opt=opt)
    sched.load_state_dict(state["scheduler"])
    ck.restore_rng(state["rng"], {})
    ledger.load(state["compute"])
    return state["step"], state["next_item"], state.get("dropped", 0)


def _manifest(cfg: TrainConfig, out: Path, rt: Runtime, *, argv: list[str] | None, params: dict[str, int],
              step0: int, protocol_hash: str | None, teacher_copy: bool) -> ck.TrainManifest:
    git_commit, git_dirty = git_state()
    created = utc_now()
    return ck.TrainManifest(
        kind="rl", run_dir=str(out), created_at=created, updated_at=created, argv=list(argv or []),
        git_commit=git_commit, git_dirty=git_dirty, packages=package_versions(),
        host={"threads": torch.get_num_threads(), **rt.manifest_host()}, arm=cfg.run.arm, seed=cfg.run.seed,
        config=cfg.to_dict(), config_sha256=cfg.sha256(), model_params=params, steps_done=step0,
        protocol_hash=protocol_hash,
        notes=["exact resume holds for synchronous runs (async.enabled = false or async.max_lead = 0)",
               "FLOPs are 2N/6N estimates per token; attention's quadratic term is excluded"]
        + ([f"teacher = {cfg.guidance.teacher}: one frozen parameter copy (model_params.teacher_copy) in memory, saved "
            "as teacher.safetensors per checkpoint; teacher FLOPs unchanged"] if teacher_copy else [])
        + rt.manifest_notes(),
    )


def run_loop(run: RLRun) -> ck.CheckpointInfo:
    """The steps from ``run.step0`` to ``run.steps``, a checkpoint when due and after the last; then the final
    manifest. Returns the last checkpoint's info."""
    cfg = run.cfg
    info: ck.CheckpointInfo | None = None
    bar = progress(cfg.run.steps, run.step0, cfg.run.progress and run.rt.main, desc=f"rl {cfg.run.arm}")
    try:
        for step in range(run.step0, cfg.run.steps):
            metrics, groups = rl_step(run, step)
            run.record.step(step + 1, metrics, groups, arm=cfg.run.arm, gates=cfg.guidance.lam > 0)
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward/total']:.3f}", loss=f"{metrics['loss/total']:.4f}")
            last = step + 1 == cfg.run.steps
            if last or (cfg.run.checkpoint_every and (step + 1) % cfg.run.checkpoint_every == 0):
                with run.ledger.phase("checkpoint"):
                    info = _save(run, step + 1)
    finally:
        bar.close()
        run.sources.close()
        run.record.close()
    run.record.finish(run.manifest, cfg.run.steps, merge_ledgers(run.rt.gather(run.ledger.snapshot())))
    return info if info is not None else ck.read_info(ck.latest_checkpoint(run.out))


def rl_step(run: RLRun, step: int) -> tuple[dict[str, Any], list[list[RolloutSample]]]:
    """One step: the groups, the batch plan, the optimizer step, the schedule, the new weights published; returns
    the step's metrics and groups."""
    cfg = run.cfg
    t_step = time.perf_counter()
    groups = run.sources.take(step)
    plan = build_batch(groups, cfg, run.hint_ids)
    t_train = time.perf_counter()
    metrics, teacher_s = optimizer_step(run.root, cfg, plan, run.opt, run.setup.tokenizer.pad_token_id, run.ledger,
                                        run.flop_params, run.rt)
    run.ledger.add("trainer", wall_s=time.perf_counter() - t_train - teacher_s)
    run.sched.step()
    run.sources.published(step + 1)
    metrics.update(rollout_metrics(groups))
    metrics.update(version_metrics(groups, step))
    metrics.update(plan.stats)
    metrics.update(run.sources.stats.as_metrics(cfg.rollout.groups))
    metrics["optim/lr"] = run.sched.get_last_lr()[0]
    metrics["time/step_s"] = time.perf_counter() - t_step
    metrics["policy/version"] = step + 1
    return metrics, groups


def _save(run: RLRun, step: int) -> ck.CheckpointInfo:
    cfg, sources = run.cfg, run.sources
    state = {"scheduler": run.sched.state_dict(), "step": step, "next_item": sources.next_item,
             "dropped": sources.stats.dropped}
    return run.rt.save_checkpoint(run.out, step, root=run.root, opt=run.opt, copy=sources.copy,
                                  tokenizer=run.setup.tokenizer, state=state, ledger=run.ledger.snapshot(),
                                  config_sha256=cfg.sha256(), arm=cfg.run.arm, seed=cfg.run.seed,
                                  keep=cfg.run.keep_checkpoints)
