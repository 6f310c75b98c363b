"""``run_pretrain``: set-up once (tokenizer, model, optimizer, probes; or all of it from the latest checkpoint),
then one linear loop over the curriculum's steps.

Run directory::

    OUT/config.json            the PretrainConfig (a resume refuses a different recipe)
    OUT/tokenizer/             the BPE tokenizer trained at step 0 (synthetic documents + world sample)
    OUT/world/                 stage B's task set and expert episodes (repro.pretrain.world)
    OUT/metrics.jsonl          one line per step: loss, loss/<kind>, lr, grad_norm, tokens, tokens/s
    OUT/probes.jsonl           one ProbeScores per probe
    OUT/checkpoints/step_<n>/  HF layout (fp32 weights) + tokenizer + trainer_state.pt (optimizer, step, tokens,
                               wall time); the last one only
    OUT/pretrain_state.json    PretrainState (readable without torch)

Exact resume: the batch of step ``s`` is a pure function of (config, s) (``repro.pretrain.mixture``), weights are
saved in float32 with the AdamW moments, and the learning rate is a function of the step, so stopping after any
checkpoint and resuming gives the run an uninterrupted one would (tested on the nano recipe, bit for bit on one
thread). A checkpoint is written every ``checkpoint_every_s`` seconds, at the end of every stage, at the end, and
when SIGINT or SIGTERM arrives (after the step in flight).
"""

from __future__ import annotations

import json
import logging
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from repro.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint, write_json_atomic
from repro.models import build_model, count_params
from repro.packing import pack, packed_token_logprobs
from repro.precision import autocast, master_weights_ok
from repro.pretrain.mixture import WorldSampler, step_batch
from repro.pretrain.probes import ProbeSet, probe_set, run_probes
from repro.pretrain.schema import PretrainConfig, PretrainState, ProbeScores
from repro.tokenizer import ChatEncoder, load_tokenizer, train_tokenizer

log = logging.getLogger(__name__)


class PretrainError(ValueError):
    """A run directory that cannot be resumed as asked (the message says why and what to do)."""


@dataclass
class Setup:
    cfg: PretrainConfig
    out: Path
    tok: Any
    enc: ChatEncoder
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    probes: ProbeSet
    step: int = 0
    tokens_seen: int = 0
    wall_s: float = 0.0
    history: list[ProbeScores] = field(default_factory=list)
    world: WorldSampler | None = None


def lr_at(cfg: PretrainConfig, step: int) -> float:
    """Within the phase of ``step`` (``PretrainConfig.phases``): linear warm-up, constant, then a linear decay over
    the phase's last ``decay_frac`` (the first phase uses the config's lr and schedule, a restart phase its own)."""
    start, end, r = [ph for ph in cfg.phases() if ph[0] <= step][-1]
    peak, warm, decay, floor = (cfg.lr, cfg.warmup_steps, cfg.decay_frac, cfg.min_lr_ratio) if r is None else \
        (r.lr, r.warmup_steps, r.decay_frac, r.min_lr_ratio)
    i, total = step - start, end - start
    if i < warm:
        return peak * (i + 1) / warm
    decay_start = total - int(decay * total)
    if i < decay_start:
        return peak
    frac = (i - decay_start + 1) / max(1, total - decay_start)
    return peak * (1 - (1 - floor) * min(1.0, frac))


def restarts_at(cfg: PretrainConfig, step: int) -> bool:
    """Whether step ``step`` opens a restart phase (weights rounded to bf16, a fresh AdamW; ``schema.Restart``)."""
    return any(r is not None and a == step for a, _, r in cfg.phases())


def _tokenizer(cfg: PretrainConfig, out: Path) -> Any:
    path = out / "tokenizer"
    if (path / "tokenizer.json").is_file():
        return load_tokenizer(path)
    from repro.pretrain import synthetic, world

    probe = train_tokenizer(["a"], vocab_size=300, min_frequency=1)  # its chat template renders the texts
    texts = []
    rng = random.Random(f"tokenizer:{cfg.seed}")
    for i in range(cfg.tokenizer_docs):
        kind = ("episode", "kv", "line")[i % 3]
        d = synthetic.make_doc(kind, rng, "train", lo_id=0, hi_id=1)
        texts.append(probe.apply_chat_template(list(d.messages), tokenize=False))
    if any("world" in s.mix for s in cfg.stages):
        texts += world.sample_texts(cfg.world, out / "world", max(8, cfg.tokenizer_docs // 4), seed=cfg.seed)
    tok = train_tokenizer(texts, vocab_size=cfg.vocab_size, split=cfg.tokenizer_split)
    tok.save_pretrained(path)
    return tok


def _optimizer(cfg: PretrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


def setup(cfg: PretrainConfig, out_dir: str | Path, *, model: torch.nn.Module | None = None) -> Setup:
    """Everything the loop needs, built once: fresh, or restored from ``OUT/checkpoints``' latest step
    (``model``: the float32 weights to start a directory without checkpoints from, e.g. a shipped base's)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    if cfg_path.is_file():
        old = PretrainConfig.model_validate_json(cfg_path.read_text())
        if old.recipe_sha256() != cfg.recipe_sha256():
            raise PretrainError(f"{cfg_path}: this run directory was started with another recipe "
                                f"({old.recipe_sha256()[:12]} vs {cfg.recipe_sha256()[:12]}). Fix: pass the same "
                                "preset and overrides, or a new --out directory.")
    write_json_atomic(cfg_path, cfg.model_dump_json(indent=2))
    torch.set_num_threads(cfg.torch_threads)
    tok = _tokenizer(cfg, out)
    enc = ChatEncoder(tok)
    ckpt = latest_checkpoint(out)
    if ckpt is not None and model is not None:
        raise PretrainError(f"{out} already has checkpoints; it resumes from them, not from other weights.")
    if ckpt is None and model is None:
        model = build_model(cfg.model, len(tok), seed=cfg.seed, pad_token_id=tok.pad_token_id,
                            eos_token_id=tok.eos_token_id)
    elif ckpt is not None:
        from transformers import Qwen3ForCausalLM

        model = Qwen3ForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32)
        model.config._attn_implementation = "sdpa"
    model.train()
    master_weights_ok(model, cfg.precision)
    opt = _optimizer(cfg, model)
    s = Setup(cfg, out, tok, enc, model, opt, probe_set(enc, seed=cfg.seed, n=cfg.probe_docs))
    if ckpt is not None:
        st = load_trainer_state(ckpt)
        opt.load_state_dict(st["optimizer"])
        s.step, s.tokens_seen, s.wall_s = st["step"], st["tokens_seen"], st["wall_s"]
        s.history = [ProbeScores.model_validate(p) for p in st["probes"]]
        log.info("resumed %s at step %d (%d tokens seen)", out, s.step, s.tokens_seen)
    log.info("pretrain %s: %.2fM parameters, vocab %d, %d steps", cfg.model, count_params(model) / 1e6, len(tok),
             cfg.total_steps)
    return s


def _kind_losses(lp: torch.Tensor, where: torch.Tensor, cu: tuple[int, ...], kinds: list[str]) -> dict[str, float]:
    """Mean target NLL per document kind (``loss/<kind>``), from each target's document."""
    names = sorted(set(kinds))
    doc_kind = torch.tensor([names.index(k) for k in kinds])
    of_target = doc_kind[torch.bucketize(where, torch.tensor(cu[1:]), right=True)]
    nll = -lp.detach()
    return {f"loss/{k}": float(nll[of_target == i].mean()) for i, k in enumerate(names) if (of_target == i).any()}


def train_step(s: Setup) -> dict[str, float]:
    """One optimizer step on the batch of ``s.step``; returns its metrics."""
    cfg = s.cfg
    stage = cfg.stage_at(s.step)
    if "world" in stage.mix and s.world is None:
        from repro.pretrain.world import world_sampler

        s.world = world_sampler(cfg.world, s.out / "world", s.enc)
    if restarts_at(cfg, s.step):
        _restart(s)
    sb = step_batch(cfg, s.step, s.enc, s.world)
    batch = pack([(d.ids, d.act) for d in sb.docs])
    lr = lr_at(cfg, s.step)
    for g in s.opt.param_groups:
        g["lr"] = lr
    with autocast(cfg.precision):
        lp, where = packed_token_logprobs(s.model, batch)
    n = int(where.numel())
    (-lp.sum() / max(1, n)).backward()
    gnorm = float(torch.nn.utils.clip_grad_norm_(s.model.parameters(), cfg.grad_clip))
    s.opt.step()
    s.opt.zero_grad(set_to_none=True)
    m = {"step": s.step, "stage": stage.name, "loss": float(-lp.detach().sum() / max(1, n)), "lr": lr,
         "grad_norm": gnorm, "tokens": batch.n_tokens, "targets": n}
    m |= _kind_losses(lp, where, batch.cu_seqlens, sb.kinds)
    return m


def _restart(s: Setup) -> None:
    """Open a restart phase: the weights as a bf16 export holds them, back in float32, and a fresh AdamW (the
    step's own batch follows; a resume from the checkpoint at this step does the same again)."""
    with torch.no_grad():
        for p in s.model.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    s.opt = _optimizer(s.cfg, s.model)
    log.info("step %d opens stage %s: weights rounded to bf16, fresh AdamW", s.step, s.cfg.stage_at(s.step).name)


def save_state(s: Setup) -> None:
    state = {"optimizer": s.opt.state_dict(), "step": s.step, "tokens_seen": s.tokens_seen, "wall_s": s.wall_s,
             "probes": [p.model_dump() for p in s.history]}
    save_checkpoint(s.out, s.step, model=s.model, tokenizer=s.tok, trainer_state=state,
                    config_sha256=s.cfg.recipe_sha256(), arm="pretrain", seed=s.cfg.seed, compute={}, keep=1)
    _write_state(s)


def _write_state(s: Setup) -> None:
    done = s.step >= s.cfg.total_steps
    st = PretrainState(recipe_sha256=s.cfg.recipe_sha256(), step=s.step, tokens_seen=s.tokens_seen,
                       wall_s=round(s.wall_s, 1), stage=s.cfg.stage_at(min(s.step, s.cfg.total_steps - 1)).name,
                       probes=s.history, status="done" if done else "running")
    write_json_atomic(s.out / "pretrain_state.json", st.model_dump_json(indent=2))


def _probe(s: Setup) -> ProbeScores:
    p = run_probes(s.model, s.probes, step=s.step, tokens_seen=s.tokens_seen, precision=s.cfg.precision)
    s.history.append(p)
    with (s.out / "probes.jsonl").open("a") as f:
        f.write(p.model_dump_json() + "\n")
    log.info("probe step %d (%.2fM tokens): induction %.3f path %.3f old %.3f", p.step, p.tokens_seen / 1e6,
             p.induction, p.path_exact, p.old_exact)
    return p


def train(s: Setup, *, max_steps: int | None = None, stop_after_s: float | None = None,
          on_step: Callable[[dict[str, float]], None] | None = None) -> PretrainState:
    """The loop: from ``s.step`` to the end of the curriculum (or ``max_steps`` more steps, or ``stop_after_s``
    seconds), checkpointing as the module docstring says. Returns the state written last."""
    cfg, stop = s.cfg, {"sig": None}
    end = cfg.total_steps if max_steps is None else min(cfg.total_steps, s.step + max_steps)

    def handler(signum: int, _frame: object) -> None:
        stop["sig"] = signum

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if _main_thread() else {}
    t_start, last_ckpt = time.perf_counter(), time.perf_counter()
    try:
        with (s.out / "metrics.jsonl").open("a") as mf:
            while s.step < end and stop["sig"] is None:
                if s.step % cfg.probe_every == 0 and not any(p.step == s.step for p in s.history):
                    _probe(s)
                t0 = time.perf_counter()
                m = train_step(s)
                dt = time.perf_counter() - t0
                s.step += 1
                s.tokens_seen += int(m["tokens"])
                s.wall_s += dt
                m |= {"tokens_seen": s.tokens_seen, "tokens_per_s": m["tokens"] / dt, "wall_s": round(s.wall_s, 2)}
                mf.write(json.dumps(m) + "\n")
                mf.flush()
                if on_step:
                    on_step(m)
                stage_end = s.step == cfg.total_steps or cfg.stage_at(s.step).name != m["stage"]
                if stage_end:
                    _probe(s)
                timed_out = stop_after_s is not None and time.perf_counter() - t_start >= stop_after_s
                if stage_end or time.perf_counter() - last_ckpt >= cfg.checkpoint_every_s or timed_out:
                    save_state(s)
                    last_ckpt = time.perf_counter()
                if timed_out:
                    break
        if latest_checkpoint(s.out) is None or _ckpt_step(s) != s.step:
            save_state(s)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    return PretrainState.model_validate_json((s.out / "pretrain_state.json").read_text())


def _ckpt_step(s: Setup) -> int:
    ck = latest_checkpoint(s.out)
    return -1 if ck is None else int(ck.name.split("_")[1])


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run_pretrain(cfg: PretrainConfig, out_dir: str | Path, *, max_steps: int | None = None,
                 stop_after_s: float | None = None) -> PretrainState:
    """``setup`` then ``train`` (see the module docstring)."""
    return train(setup(cfg, out_dir), max_steps=max_steps, stop_after_s=stop_after_s)


