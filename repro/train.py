"""The RL training loop (GRPO / targeted guidance), one linear function: :func:`train_rl`.

Per step (METHOD §6.13): take ``groups`` groups of ``group_size`` rollouts (synchronously, or from the async
producer with bounded staleness), score them, build masks / advantages / hint-spliced teacher views
(``repro.trainer_step.build_batch``), run the micro-batches through :class:`repro.trainer_step.LossRoot` (teacher
forward under no_grad, student forward, chunked log-probs and KL), clip, AdamW step, update an EMA teacher
(``guidance.teacher``, :mod:`repro.teacher`), publish the new weights
(version += 1), log one metrics line, checkpoint when due.

Run directory (ARCHITECTURE §4): ``config.toml`` (resolved), ``manifest.json``, ``metrics.jsonl``,
``checkpoints/step_<n>/``. ``resume=True`` continues from the newest checkpoint; synchronous runs resume exactly.

What plugs in (:class:`RLSetup`): tokenizer, model, tasks, an environment factory, a turn checker, a hint source
and a sampler factory. :func:`repro.wiring.default_setup` builds them from the harness for real runs; tests pass
small stand-ins.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from harness.schema import TaskInstance
from protocols.provenance import git_state, package_versions, utc_now
from repro import checkpoint as ck
from repro import dcp_checkpoint, distributed, lora
from repro.compute import ComputeLedger, count_params, forward_flops, train_flops
from repro.config import ConfigError, TrainConfig, load_saved, to_toml
from repro.distributed import DistContext
from repro.pipeline_async import AsyncProducer, StalenessStats, WeightStore, clone_for_producer, take_fresh
from repro.precision import autocast, master_weights_ok
from repro.rl_metrics import gate_summary, rollout_metrics, version_metrics
from repro.rollout import (
    RolloutSample,
    RolloutSettings,
    group_seed,
    run_groups,
)
from repro.schema import DistillExample
from repro.tokenizer import ChatEncoder
from repro.track import MetricsWriter, progress, read_metrics
from repro.trainer_step import LossRoot, build_batch, collate, reduce_stats
from repro.wiring import RLSetup, check_engine_choice, default_setup

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
                 flop_params: int, start_item: int, start_step: int, ctx: DistContext | None = None,
                 twin: torch.nn.Module | None = None) -> None:
        self.cfg, self.setup, self.stream, self.ledger, self.flop_params = cfg, setup, stream, ledger, flop_params
        self.ctx, self.twin = ctx, twin  # under FSDP: this rank's place and its unsharded sampling copy
        if ctx is not None and twin is None:  # FSDP + vllm_http: the servers start from this run's weights
            distributed.push_sharded(ctx, setup.model, setup.engine_factory, start_step)
        self.streams = cfg.rollout.sampling_streams or (1 if ctx is None else ctx.world)
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
        if self.ctx is not None:
            per = len(chunks) // self.ctx.world
            chunks = chunks[self.ctx.rank * per:(self.ctx.rank + 1) * per]
        groups: list[list[RolloutSample]] = []
        for chunk in chunks:
            engine = s.engine_factory(model, s.tokenizer.pad_token_id)
            engine.set_version(version)  # the stamp every sample of this batch carries (RolloutSample.version)
            groups += run_groups(instances=[self.stream[i] for i in chunk], items=chunk,
                                 make_env=s.make_env, engine=engine, encoder=self.encoder, tokenizer=s.tokenizer,
                                 tools=s.tools, checker=s.checker, settings=self.settings, run_seed=self.cfg.run.seed,
                                 reward_weights=self.cfg.reward, hint_source=hint_src, ledger=self.ledger,
                                 flop_params=self.flop_params)
        if self.ctx is not None:
            groups = [grp for part in self.ctx.gather(groups) for grp in part]
        return groups

    def take(self, step: int) -> list[list[RolloutSample]]:
        g = self.cfg.rollout.groups
        if self.producer is None:
            was_training = self.setup.model.training
            self.setup.model.eval()
            with sampler_threads(self.cfg.rollout.sampler_threads):
                groups = self._batch(self.setup.model if self.twin is None else self.twin, self.next_item, step)
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
        if self.ctx is not None and self.twin is not None:  # FSDP: the sampling copy gets the new weights
            self.twin.load_state_dict(self.ctx.full_state(self.setup.model))
        elif self.ctx is not None:  # FSDP + vllm_http: rank 0 pushes the gathered weights to the servers
            distributed.push_sharded(self.ctx, self.setup.model, self.setup.engine_factory, version)

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


def optimizer_step(root: LossRoot, cfg: TrainConfig, plan: Any, opt: torch.optim.Optimizer, pad_id: int,
                    ledger: ComputeLedger, flop_params: int,
                    ctx: DistContext | None = None) -> tuple[dict[str, Any], float]:
    """One optimizer step over the plan's micro-batches; returns the step's metrics and the teacher forwards'
    wall time (seconds, counted in the ``teacher`` ledger phase and taken out of the ``trainer`` phase). Under FSDP
    (``ctx``) this rank runs its share (``repro.distributed.micro_batches``) and the metrics are reduced over ranks."""
    opt.zero_grad(set_to_none=True)
    parts, total, n_tok, n_teacher, teacher_s = [], 0.0, 0, 0, 0.0
    split: dict[str, list[torch.Tensor]] = {}
    mbs = cfg.optim.micro_batch
    device = next(root.parameters()).device
    if ctx is None:
        batches, n_fill = [plan.trajs[i:i + mbs] for i in range(0, len(plan.trajs), mbs)], 0
    else:
        batches, n_fill = distributed.micro_batches(plan.trajs, mbs, ctx.rank, ctx.world)
    for i, trajs in enumerate(batches):
        mb = collate(trajs, pad_id, padding_free=cfg.optim.padding_free).to(device)
        with root.student_attention(mb):  # forward and backward: checkpointed layers recompute in the backward
            with autocast(cfg.model.precision, device.type):
                loss, terms = root(mb, plan.n_pg, plan.n_kl)
            if cfg.run.log_grad_split and loss.requires_grad:
                _backward_split(root, {k: t for k, t in (("pg", terms.pg), ("kl", terms.kl)) if t is not None},
                                split)
            elif ctx is not None:
                (loss * ctx.world).backward()  # FSDP averages gradients over ranks; the batch loss is their sum
            elif loss.requires_grad:
                loss.backward()
        if i >= len(batches) - n_fill:
            continue  # a zero-weight filler (repro.distributed.micro_batches): no tokens, no statistics
        parts.append(terms.stats)
        teacher_s += terms.teacher_s
        total += float(loss.detach())
        n_tok += mb.n_tokens
        n_teacher += mb.n_teacher_tokens if cfg.guidance.lam > 0 else 0
    if ctx is not None:
        total = ctx.sum(total)[0]
        parts = [p for part in ctx.gather(parts) for p in part]
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
    ctx = distributed.init(cfg)  # None for a single-process run; checks cluster.* against the launch
    try:
        info = _train_rl(cfg, Path(out_dir), ctx, setup=setup, resume=resume, argv=argv, protocol_hash=protocol_hash)
    except BaseException:
        if ctx is not None:
            ctx.close(failed=True)
        raise
    if ctx is not None:
        ctx.close()
    return info


def _train_rl(cfg: TrainConfig, out: Path, ctx: DistContext | None, *, setup: RLSetup | None, resume: bool,
              argv: list[str] | None, protocol_hash: str | None) -> ck.CheckpointInfo:
    main = ctx is None or ctx.main  # the process that writes the run directory
    if main:
        out.mkdir(parents=True, exist_ok=True)
    latest = _check_run_dir(out, cfg, resume)
    if ctx is not None:
        ctx.barrier()  # every rank has checked the run directory before rank 0 writes into it
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    distributed.wait_turn(ctx)  # under FSDP: ranks build and shard their CPU copies one after another
    if setup is None:  # built once, from the latest checkpoint's weights when resuming
        setup = default_setup(cfg, init_override=latest)
    # under FSDP the model stays on the CPU until ctx.shard moves it to the GPU one layer's shard at a time
    model = lora.prepare(setup.model.to(_device(cfg)) if ctx is None else setup.model, cfg.model.lora,
                         seed=cfg.run.seed)  # [model.lora]
    distributed.activation_checkpointing(model, cfg.model.activation_checkpointing)
    if latest is not None and setup.init_from != latest:
        ck.load_weights(model, latest)
    model.train()
    master_weights_ok(model, cfg.model.precision)
    if main:
        (out / "config.toml").write_text(to_toml(cfg))
    root = LossRoot(model, cfg)  # after the resume load: a fresh ema/fixed teacher copy is replaced just below
    if latest is not None and root.teacher_lm is not None and ctx is None:
        ck.load_teacher(latest, root.teacher_lm)
    params = count_params(model)
    if root.teacher_lm is not None:
        params["teacher_copy"] = count_params(root.teacher_lm)["total"]  # ema/fixed: memory only, FLOPs unchanged
    twin = None
    if ctx is not None:  # the unsharded sampling copy, then the shards (repro.distributed)
        if cfg.rollout.engine == "hf_sampler":  # vllm_http samples on servers: no copy (repro.distributed)
            twin = clone_for_producer(model).to(ctx.device)
        ctx.shard(root, cfg.model.precision)
    distributed.end_turn(ctx)
    o = cfg.optim
    opt = torch.optim.AdamW(lora.trainable_parameters(model), lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg))
    ledger, step0, next_item = ComputeLedger(), 0, 0
    dropped0 = 0
    if latest is not None:
        if ctx is not None:
            state = dcp_checkpoint.load(ctx, latest, root=root, opt=opt)
        else:
            state = ck.load_trainer_state(latest)
            if "optimizer" not in state:
                raise ConfigError(f"--resume: {latest} was written by an FSDP run (its optimizer state is in dcp/); "
                                  "resume it under torchrun with the same cluster settings")
            opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        ck.restore_rng(state["rng"], {})
        ledger.load(state["compute"])
        step0, next_item, dropped0 = state["step"], state["next_item"], state.get("dropped", 0)
    encoder = ChatEncoder(setup.tokenizer)
    stream = TaskStream(setup.tasks, cfg.run.seed, cfg.tasks.shuffle, cfg.tasks.epochs)
    writer = (MetricsWriter(out / "metrics.jsonl", resume_from_step=step0 if latest is not None else None,
                            tensorboard=cfg.run.tracker == "tensorboard") if main else None)
    if main:
        _truncate_best(out / "best.jsonl", step0 if latest is not None else 0)
    git_commit, git_dirty = git_state()
    created = utc_now()
    manifest = ck.TrainManifest(
        kind="rl", run_dir=str(out), created_at=created, updated_at=created, argv=list(argv or []),
        git_commit=git_commit, git_dirty=git_dirty, packages=package_versions(),
        host={"threads": torch.get_num_threads(), **({} if ctx is None else {"ranks": ctx.world})}, arm=cfg.run.arm, seed=cfg.run.seed, config=cfg.to_dict(),
        config_sha256=cfg.sha256(), model_params=params, steps_done=step0, protocol_hash=protocol_hash,
        notes=["exact resume holds for synchronous runs (async.enabled = false or async.max_lead = 0)",
               "FLOPs are 2N/6N estimates per token; attention's quadratic term is excluded"]
        + ([f"teacher = {cfg.guidance.teacher}: one frozen parameter copy (model_params.teacher_copy) in memory, saved "
            "as teacher.safetensors per checkpoint; teacher FLOPs unchanged"] if root.teacher_lm is not None else [])
        + ([f"FSDP2 over {ctx.world} ranks (repro.distributed); optimizer and teacher shards in checkpoints' dcp/"]
           if ctx is not None else []),
    )
    if main:
        ck.write_manifest(out, manifest)
    sources = _Sources(cfg, setup, stream, ledger, params["flop_params"], next_item, step0, ctx=ctx, twin=twin)
    sources.stats.dropped = dropped0
    hint_ids = _hint_ids_fn(setup, encoder, cfg.run.seed)
    pad_id = setup.tokenizer.pad_token_id
    info: ck.CheckpointInfo | None = None
    bar = progress(cfg.run.steps, step0, cfg.run.progress and main, desc=f"rl {cfg.run.arm}")
    try:
        for step in range(step0, cfg.run.steps):
            t_step = time.perf_counter()
            groups = sources.take(step)
            plan = build_batch(groups, cfg, hint_ids)
            t_train = time.perf_counter()
            metrics, teacher_s = optimizer_step(root, cfg, plan, opt, pad_id, ledger, params["flop_params"], ctx)
            ledger.add("trainer", wall_s=time.perf_counter() - t_train - teacher_s)
            sched.step()
            sources.published(step + 1)
            metrics.update(rollout_metrics(groups))
            metrics.update(version_metrics(groups, step))
            metrics.update(plan.stats)
            metrics.update(sources.stats.as_metrics(cfg.rollout.groups))
            metrics["optim/lr"] = sched.get_last_lr()[0]
            metrics["time/step_s"] = time.perf_counter() - t_step
            metrics["policy/version"] = step + 1
            if writer is not None:
                writer.log(step + 1, metrics)
                _append_best(out / "best.jsonl", groups, step + 1)
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward/total']:.3f}", loss=f"{metrics['loss/total']:.4f}")
            if cfg.guidance.lam > 0 and main:
                logger.info("%s step %d: %s", cfg.run.arm, step + 1, gate_summary(metrics))
            last = step + 1 == cfg.run.steps
            if last or (cfg.run.checkpoint_every and (step + 1) % cfg.run.checkpoint_every == 0):
                with ledger.phase("checkpoint"):
                    info = _save(out, step + 1, root, setup, opt, sched, sources, ledger, cfg)
    finally:
        bar.close()
        sources.close()
        if writer is not None:
            writer.close()
    compute = ledger.snapshot() if ctx is None else dcp_checkpoint.merge_ledgers(ctx.gather(ledger.snapshot()))
    if main:
        rows = read_metrics(out / "metrics.jsonl")
        summary = {k: _last_k(rows, k) for k in ("behaviour/compliance", "task/pass_rate", "reward/total")}
        ck.write_manifest(out, manifest.model_copy(update={
            "updated_at": utc_now(), "steps_done": cfg.run.steps, "status": "done", "compute": compute,
            "checkpoints": [str(p) for p in ck.list_checkpoints(out)], "summary": summary}))
    if info is None:
        info = ck.read_info(ck.latest_checkpoint(out))
    return info


def _append_best(path: Path, groups: list[list[RolloutSample]], step: int) -> None:
    """The best trajectory of each group (for self-distillation: ``tgsuite train loop``)."""
    with path.open("a") as fh:
        for grp in groups:
            s = max(grp, key=lambda x: x.reward)
            ex = DistillExample(instance_id=s.instance_id, reward=s.reward, step=step, ids=s.encoded.ids,
                                 act=s.encoded.act)
            fh.write(ex.model_dump_json() + "\n")


def _truncate_best(path: Path, step: int) -> None:
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
    path.write_text("".join(ln + "\n" for ln in keep))


def _device(cfg: TrainConfig) -> torch.device:
    want = cfg.model.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("model.device = 'cuda' but no CUDA device is visible; use model.device = 'cpu' or 'auto'")
    return torch.device(want)


def _last_k(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    from repro.track import last_k_summary

    return last_k_summary(rows, key, 32)


def _save(out: Path, step: int, root: LossRoot, setup: RLSetup, opt: torch.optim.Optimizer,
          sched: Any, sources: _Sources, ledger: ComputeLedger, cfg: TrainConfig) -> ck.CheckpointInfo:
    if sources.ctx is not None:  # FSDP: sharded model / teacher / optimizer in dcp/, the rest as below
        state = {"scheduler": sched.state_dict(), "step": step, "next_item": sources.next_item,
                 "dropped": sources.stats.dropped}
        return dcp_checkpoint.save(sources.ctx, out, step, root=root, opt=opt, full_model=sources.twin,
                                   tokenizer=setup.tokenizer, state=state, ledger=ledger.snapshot(),
                                   config_sha256=cfg.sha256(), arm=cfg.run.arm, seed=cfg.run.seed,
                                   keep=cfg.run.keep_checkpoints)
    state = {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": ck.rng_state({}),
        "compute": ledger.snapshot(),
        "step": step,
        "next_item": sources.next_item,
        "dropped": sources.stats.dropped,
    }
    return ck.save_checkpoint(out, step, model=root.lm, tokenizer=setup.tokenizer, trainer_state=state,
                              config_sha256=cfg.sha256(), arm=cfg.run.arm, seed=cfg.run.seed,
                              compute=ledger.snapshot(), keep=cfg.run.keep_checkpoints, teacher=root.teacher_lm)
