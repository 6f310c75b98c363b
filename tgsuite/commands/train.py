"""tgsuite train sft|rl|distill|loop|pretrain|arms: train the model (SFT, RL with GRPO or targeted guidance, self-distillation)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tgsuite.commands.common import CLIError

EPILOG = """\
Worked example (the CPU mini reproduction):
  tgsuite tasks make-mini --out tasks/train --split train --repos 40 --tasks-per-repo 4
  tgsuite tasks make-mini --out tasks/heldout --split heldout --repos 10 --tasks-per-repo 3
  tgsuite train sft --train-tasks tasks/train --heldout-tasks tasks/heldout --out runs/sft
  tgsuite train sft --preset mini --out runs/sft-mini --ship assets/sft/mini   # rebuild the shipped SFT coder
  tgsuite train rl --arm tg --out runs/rl-tg --set model.init=sft:mini --set tasks.path=tasks/train
  tgsuite train rl --arm tg --out runs/rl-tg --set model.init=runs/sft/model --set tasks.path=tasks/train
  tgsuite train rl --arm grpo --out runs/rl-grpo --set model.init=runs/sft/model --set tasks.path=tasks/train
  tgsuite train rl --out runs/rl-tg --resume --set run.steps=16  # continue (config read from the run)
  tgsuite train arms                                              # list the arm presets
  tgsuite train distill --dataset data/filtered --out runs/distill --set model.init=runs/sft/model
      # self-distillation on logged trajectories (tgsuite data import / data filter)
  tgsuite train loop --arm tg --out runs/loop --set model.init=runs/sft/model --set tasks.path=tasks/train \
      --set distill.rounds=2                                      # distill -> RL -> distill -> RL
  tgsuite train rl --config configs/paper/qwen3_coder_30b_a3b_tg.toml --out /tmp/x --dry-run

Config layering: repro/configs/base.toml < --arm preset < --config FILE < --set KEY=VALUE (repeatable).
Every run directory holds config.toml, manifest.json, metrics.jsonl and checkpoints/step_<n>/.
"""


def _common(p: argparse.ArgumentParser, *, out: bool = True) -> None:
    p.add_argument("--arm", help="arm preset (see `tgsuite train arms`), e.g. tg, grpo, tg_all_turns")
    p.add_argument("--config", type=Path, help="a TOML file with overrides (same sections as base.toml)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one value, e.g. --set guidance.lam=0.3 (repeatable)")
    if out:
        p.add_argument("--out", type=Path, required=True, help="run directory to write")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("train", help="train: pretraining, SFT, RL (GRPO / targeted guidance), self-distillation",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="train_command", metavar="STAGE")
    rl = sub.add_parser("rl", help="RL with GRPO or targeted guidance (an arm preset)", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(rl)
    rl.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    rl.add_argument("--dry-run", action="store_true", help="validate the config and print the memory/compute plan")
    rl.set_defaults(func=_rl)
    ds = sub.add_parser("distill", help="self-distillation on the model's own best trajectories", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(ds)
    ds.add_argument("--from-best", type=Path, help="best.jsonl of an RL run (default: sample a fresh pool)")
    ds.add_argument("--dataset", type=Path, help="a dataset directory from `tgsuite data filter` (logged "
                    "trajectories; same as --set distill.dataset=DIR)")
    ds.set_defaults(func=_distill)
    lp = sub.add_parser("loop", help="distill -> RL -> distill for distill.rounds rounds", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(lp)
    lp.set_defaults(func=_loop)
    sft = sub.add_parser("sft", help="supervised fine-tuning on scripted expert trajectories (+ tokenizer)",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sft.add_argument("--train-tasks", help="task-set directory of the train split (expert episodes are collected)")
    sft.add_argument("--dataset", help="a dataset directory from `tgsuite data filter`: train on its logged "
                     "trajectories instead of expert episodes")
    sft.add_argument("--heldout-tasks", help="held-out task-set directory (evaluation after training)")
    sft.add_argument("--preset", choices=("nano", "mini"), default="mini",
                     help="model size; without --train-tasks / --dataset: the reproduction preset whose whole SFT "
                          "recipe to run (mini: the coder shipped in assets/sft/mini; nano: the smoke preset's), its "
                          "train task set made in OUT/tasks/train")
    sft.add_argument("--out", type=Path, required=True)
    sft.add_argument("--ship", type=Path, metavar="DEST", help="with a preset recipe: export the model with its "
                     "manifest to DEST (e.g. assets/sft/mini; repro.sft_ship)")
    sft.add_argument("--heldout-run", type=Path, metavar="RUN_DIR", help="with --ship: a `tgsuite eval` run of this "
                     "model whose aggregate.json the manifest records")
    sft.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                     help="override an SFT setting, e.g. --set episodes=40 or --set lora.enabled=true (fields of "
                          "repro.sft.SFTConfig)")
    sft.set_defaults(func=_sft)
    from tgsuite.commands.train_pretrain import add_parser as add_pretrain

    add_pretrain(sub)
    arms = sub.add_parser("arms", help="list the arm presets and what each overrides", epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    arms.set_defaults(func=_arms)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _config(args: argparse.Namespace) -> Any:
    from repro.config import ConfigError, load_config

    try:
        return load_config(arm=args.arm, path=args.config, sets=args.sets)
    except ConfigError as exc:
        raise CLIError(str(exc)) from exc


def _run(fn: Any, *a: Any, **kw: Any) -> Any:
    from repro.config import ConfigError

    try:
        return fn(*a, **kw)
    except ConfigError as exc:
        raise CLIError(str(exc)) from exc


def _rl(args: argparse.Namespace) -> int:
    saved = args.out / "config.toml"
    if args.resume and args.config is None and saved.is_file():
        args.config = saved  # resume with the run's own resolved config; --set may still change run.steps
    cfg = _config(args)
    if args.dry_run:
        print(format_plan(cfg))
        return 0
    from repro.pretrain.ship import BaseIntegrityError
    from repro.train import train_rl

    try:
        info = _run(train_rl, cfg, args.out, resume=args.resume, argv=sys.argv)
    except BaseIntegrityError as exc:  # model.init = sft:<name> / base:<name> missing or altered
        raise CLIError(str(exc)) from exc
    print(f"done: {info.path} (step {info.step}); metrics in {args.out / 'metrics.jsonl'}")
    return 0


def _distill(args: argparse.Namespace) -> int:
    from repro.distill import read_examples, train_distill

    if args.dataset is not None:
        if args.from_best:
            raise CLIError("give --from-best or --dataset, not both")
        args.sets = [*args.sets, f'distill.dataset="{args.dataset}"']
    cfg = _config(args)
    examples = _run(read_examples, args.from_best) if args.from_best else None
    if examples is not None:
        examples = [e for e in examples if e.reward >= cfg.distill.min_reward]
    info = _run(train_distill, cfg, args.out, examples=examples, argv=sys.argv)
    print(f"done: {info.path}")
    return 0


def _loop(args: argparse.Namespace) -> int:
    from repro.distill import train_loop

    info = _run(train_loop, _config(args), args.out, argv=sys.argv)
    print(f"done: {info.path}")
    return 0


def _sft(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from repro.config import deep_merge, dotted_to_tree, parse_set
    from repro.sft import SFTConfig, run_sft

    if args.train_tasks is None and args.dataset is None:
        return _sft_recipe(args)
    if args.ship is not None or args.heldout_run is not None:
        raise CLIError("--ship and --heldout-run go with a preset recipe (no --train-tasks / --dataset): tgsuite "
                       "train sft --preset mini --out DIR --ship assets/sft/mini")
    fields: dict[str, Any] = {"train_tasks": args.train_tasks, "dataset": args.dataset,
                              "heldout_tasks": args.heldout_tasks, "preset": args.preset}
    for item in args.sets:  # dotted keys reach nested settings: --set lora.enabled=true
        key, value = _run(parse_set, item)
        fields = deep_merge(fields, dotted_to_tree({key: value}))
    try:
        cfg = SFTConfig(**fields)
    except ValidationError as exc:
        known = ", ".join(sorted(SFTConfig.model_fields))
        raise CLIError(f"tgsuite train sft --set: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}; "
                       f"valid keys: {known}") from exc
    from repro.pretrain.ship import BaseIntegrityError

    try:
        report = run_sft(cfg, args.out)
    except BaseIntegrityError as exc:   # init = base:<name> missing or altered
        raise CLIError(str(exc)) from exc
    print(report.model_dump_json(indent=2))
    return 0


def _sft_recipe(args: argparse.Namespace) -> int:
    """``--preset`` without task sets: the reproduction preset's whole SFT recipe (tgsuite.pipeline.sft_coder)."""
    from repro.config import parse_set
    from repro.pretrain.ship import BaseIntegrityError
    from tgsuite.pipeline.presets import MINI, SMOKE
    from tgsuite.pipeline.sft_coder import build_sft_coder

    preset = {"mini": MINI, "nano": SMOKE}[args.preset]
    overrides = dict(_run(parse_set, item) for item in args.sets)
    if args.heldout_run is not None and args.ship is None:
        raise CLIError("--heldout-run is recorded in the manifest --ship writes; add --ship DEST")
    try:
        record = build_sft_coder(preset, args.out, overrides=overrides, ship=args.ship, heldout_run=args.heldout_run)
    except (BaseIntegrityError, FileNotFoundError) as exc:
        raise CLIError(str(exc)) from exc
    print(json.dumps(record, indent=2))
    return 0


def _arms(args: argparse.Namespace) -> int:
    from repro.config import arm_names, arm_overrides

    for name in arm_names():
        over = {k: v for k, v in arm_overrides(name).items() if k != "run.arm"}
        print(f"{name:20s} " + ", ".join(f"{k}={json.dumps(v)}" for k, v in over.items()))
    return 0


def format_plan(cfg: Any) -> str:
    """The --dry-run report: validated config summary plus the memory/compute plan (pure arithmetic)."""
    from repro.compute import lora_param_count, plan, plan_shape

    shape, shape_note = plan_shape(cfg)
    r, c, lo = cfg.rollout, cfg.cluster, cfg.model.lora
    n_lora = lora_param_count(shape, lo.r, lo.target_modules) if lo.enabled else 0
    copy = cfg.guidance.teacher != "live" and cfg.guidance.lam and not lo.enabled  # LoRA: no teacher copy
    p = plan(shape, trainer_gpus=c.trainer_gpus, trajectories_per_step=r.groups * r.group_size,
             tokens_per_trajectory=c.tokens_per_trajectory, failing_fraction=c.failing_fraction if cfg.guidance.lam
             else 0.0, steps=cfg.run.steps, teacher_copy_bytes_per_param=4.0 if copy else 0.0, lora_params=n_lora)
    lines = [
        f"config OK: arm {cfg.run.arm}, {cfg.run.steps} steps x {r.groups} groups x {r.group_size} rollouts, "
        f"lambda {cfg.guidance.lam}, engine {r.engine}, sandbox {r.sandbox}, async {cfg.async_.enabled} "
        f"(S_max {cfg.async_.max_staleness})",
        f"model: {cfg.model.name or cfg.model.preset} ({shape_note})",
        f"parameters: {p['params_total'] / 1e9:.2f} B total, {p['params_per_layer'] / 1e6:.1f} M per layer, "
        f"{p['params_active_flop'] / 1e9:.2f} B active (matmul FLOPs)",
        *memory_lines(cfg, shape, p),
        f"per step: {p['tokens_per_step'] / 1e6:.2f} M tokens (estimate {c.tokens_per_trajectory} per trajectory), "
        f"{p['flops_per_step']:.3g} FLOP (6N per trained token + 2N teacher pass on {c.failing_fraction:.0%} of "
        "tokens when lambda > 0)",
        f"whole run: {p['flops_total']:.3g} FLOP",
    ]
    lines += [f"NOTE: `train rl` would refuse this config as it is: {why}" for why in refusals(cfg)]
    return "\n".join(lines)


def refusals(cfg: Any) -> list[str]:
    """What ``train rl`` would refuse in this config when launched as ``cluster`` describes (the launch check of
    ``repro.distributed`` and the engine's settings), so the plan never reads as a runnable run when it is not."""
    from repro.config import ConfigError
    from repro.distributed import Launch, check_launch
    from repro.rl_setup import check_engine_choice

    out = []
    for check in (lambda: check_launch(cfg, Launch(cfg.cluster.trainer_gpus if cfg.cluster.fsdp else 1, 0, 0)),
                  lambda: check_engine_choice(cfg, None)):
        try:
            check()
        except ConfigError as exc:
            out.append(str(exc))
    return out


def memory_lines(cfg: Any, shape: Any, p: dict[str, float]) -> list[str]:
    """Per-GPU memory of the plan: trainer state, activations of one micro-batch, the rollout engine (SCALE.md §4)."""
    from repro.compute import activation_plan, engine_plan

    r, c, gb = cfg.rollout, cfg.cluster, 1e9
    a = activation_plan(shape, micro_batch_tokens=cfg.optim.micro_batch * c.tokens_per_trajectory,
                        chunk_rows=cfg.guidance.chunk_size, dtype_bytes=2 if cfg.model.precision == "bf16-mixed" else 4)
    colocated = c.inference_gpus == 0
    concurrency = c.rollout_concurrency or r.groups * r.group_size
    e = engine_plan(weights_bytes=p["bf16_weights_bytes"], kv_bytes_per_token=p["kv_bytes_per_token"],
                    gpus=c.trainer_gpus if colocated else c.inference_gpus, tp=c.inference_tp,
                    concurrency=concurrency, tokens_per_sequence=c.tokens_per_trajectory)
    state = (p["train_state_bytes_per_gpu"] + p["teacher_copy_bytes_per_gpu"]) / gb
    ckpt = cfg.model.activation_checkpointing  # what the trainer does (repro.distributed.activation_checkpointing)
    acts = ((a["activations_checkpointed_bytes"] if ckpt else a["activations_bytes"]) + a["loss_chunk_bytes"]) / gb
    trainer_total = state + acts + (e["engine_bytes_per_gpu"] / gb if colocated else 0.0)
    teacher = (f" + fp32 {cfg.guidance.teacher} teacher copy (4 B/param)" if p["teacher_copy_bytes_per_gpu"] else "")
    lo = cfg.model.lora
    state_kind = (f"LoRA r={lo.r} on {','.join(lo.target_modules)}: {p['params_trainable'] / 1e6:.1f} M trainable "
                  "params (16 B/param) + frozen fp32 base (4 B/param)" if lo.enabled
                  else "fp32 master + grad + AdamW (16 B/param)")
    free_for_kv = c.gpu_memory_gb * gb * 0.9 - e["engine_weights_bytes_per_gpu"] - ((state + acts) * gb if colocated
                                                                                    else 0.0)
    fit = max(0.0, free_for_kv) * c.inference_tp / (c.tokens_per_trajectory * p["kv_bytes_per_token"])
    place = (f"colocated on the {c.trainer_gpus} trainer GPU(s)" if colocated else f"on {c.inference_gpus} inference GPU(s)")

    def over(x: float) -> str:
        return "  <-- does not fit" if x > 0.9 * c.gpu_memory_gb else ""

    return [
        f"trainer: {c.trainer_gpus} GPU(s); {state_kind}{teacher} sharded = {state:.1f} GB/GPU of "
        f"{c.gpu_memory_gb:.0f} GB" + ("  <-- does not fit: shard wider or offload the optimizer"
                                      if state > 0.85 * c.gpu_memory_gb else ""),
        f"activations: micro-batch of {a['micro_batch_tokens']:.0f} tokens ({cfg.optim.micro_batch} x "
        f"{c.tokens_per_trajectory}), {a['activation_bytes_per_token_layer'] / 1024:.1f} KiB per token per layer ({cfg.model.precision}): "
        f"{a['activations_bytes'] / gb:.1f} GB without activation checkpointing, "
        f"{a['activations_checkpointed_bytes'] / gb:.1f} GB with it; + {a['loss_chunk_bytes'] / gb:.2f} GB for one "
        f"loss chunk of {cfg.guidance.chunk_size} rows x vocab {shape.vocab} (fp32 student + teacher)",
        f"rollout engine ({r.engine}) {place}, weight sync {c.weight_sync}: {e['engine_replicas']:.0f} replica(s) "
        f"of TP {c.inference_tp}, bf16 "
        f"weights {e['engine_weights_bytes_per_gpu'] / gb:.1f} GB/GPU, KV cache {p['kv_bytes_per_token'] / 1024:.0f} "
        f"KiB/token: {concurrency} sequences x {c.tokens_per_trajectory} tokens = "
        f"{e['engine_kv_bytes_per_gpu'] / gb:.1f} GB/GPU ({e['engine_sequences_per_replica']:.0f} per replica); "
        f"{e['engine_bytes_per_gpu'] / gb:.1f} GB/GPU in all" + over(e["engine_bytes_per_gpu"] / gb)
        + f"; at 0.9 of a GPU{' beside the trainer' if colocated else ''} a replica holds ~{fit:.0f} such sequences",
        "trainer GPU total (state + "
        + ("checkpointed activations (model.activation_checkpointing = true)" if ckpt else
           "activations without checkpointing (model.activation_checkpointing = false)") + " + loss chunk"
        + (" + colocated engine" if colocated else "") + f"): {trainer_total:.1f} GB of {c.gpu_memory_gb:.0f} GB"
        + over(trainer_total),
    ]
