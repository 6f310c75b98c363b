"""The KL-direction study (issue #34, item 2): which divergence, at which λ, makes targeted guidance teach the
guided behaviour at the mini size. Exploratory: it chooses the ``tg`` arm's defaults before the main run and never
enters a decision. One command: ``benchmarks/kl_direction_study.py`` (docs/METHOD.md, "The KL-direction study").

What it runs, as resumable stages of a ``tgsuite.pipeline.stage_runner.StageRunner`` in ``out`` (a re-run skips what is
done; changing an input re-runs what depends on it):

1. the preset's training task set (``tasks_train``: the set the main run trains on) and a DEV held-out set
   (``tasks_dev``: the preset's held-out design at ``dev_task_seed``, never the preregistered held-out seed);
2. ``probe_contexts``: the scripted expert (``harness.policies.scripted``) solves the dev tasks in local sandboxes,
   without hints (plain summaries); each finished episode is cut where its finish message starts
   (``repro.finish_probe``), once unprompted and once with the hint spliced where the teacher sees it;
3. one RL run per cell: arm ``tg`` with ``guidance.direction`` × ``guidance.lam`` × seed, and arm ``grpo`` (λ = 0)
   per seed as the reference, each from the start model with the preset's RL settings (``Preset.rl``) and
   ``run.log_grad_split = true`` (``grad/norm_pg``, ``grad/norm_kl`` per step), through
   ``tgsuite.pipeline.stages.stage_train``;
4. ``probe_<model>``: P(heading) (``repro.finish_probe.probe_headings``) of the start model and of every run's
   final checkpoint at every context, unprompted and hinted;
5. the tables and curves (``tgsuite.pipeline.kl_tables``): ``out/kl_direction.json`` and ``out/kl_direction.md``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tgsuite.pipeline import kl_tables
from tgsuite.pipeline.kl_tables import cell_label
from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.records import Paths, TaskSetOutputs, TrainOutputs
from tgsuite.pipeline.stage_runner import StageRunner, atomic_write_json, canonical_hash
from tgsuite.pipeline.stages import stage_tasks, stage_train

Direction = Literal["reverse", "forward", "jsd"]


class KLStudySpec(BaseModel):
    """The study's grid and sizes (the RL settings themselves come from the preset)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: str = Field(description="the model RL starts from: a model folder (HF layout with its tokenizer) or a "
                       "shipped init such as sft:mini")
    directions: tuple[Direction, ...] = ("reverse", "forward", "jsd")
    lambdas: tuple[float, ...] = (0.03, 0.1, 0.3)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int | None = Field(None, ge=1, description="RL steps per run; None = the preset's run.steps")
    reference: bool = Field(True, description="also train grpo (λ = 0) per seed, the reference row")
    dev_task_seed: int = Field(1, description="task seed of the dev held-out set the probe contexts come from")
    probe_contexts: int = Field(40, ge=1, description="expert episodes run on the dev held-out set (one per task, "
                                "in order); each finished one gives a finish context")
    window: int | None = Field(None, ge=1, description="last-window steps of the summary tables; None = half the "
                               "steps (at least 1)")

    @field_validator("lambdas")
    @classmethod
    def _lams(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or min(v) <= 0:
            raise ValueError(f"lambdas {v}: give one or more λ > 0 (λ = 0 is the grpo reference, reference = true)")
        if len({f"{x:g}" for x in v}) != len(v):
            raise ValueError(f"lambdas {v}: each λ once (runs are named by λ, e.g. forward_lam0.1)")
        return v

    @field_validator("directions", "seeds")
    @classmethod
    def _nonempty(cls, v: tuple[Any, ...]) -> tuple[Any, ...]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"{v}: give at least one value, each once")
        return v


def cells(spec: KLStudySpec) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, arm, RL overrides) of every cell; the grpo reference last."""
    out = [(cell_label(d, lam), "tg", {"guidance.direction": d, "guidance.lam": float(lam)})
           for d in spec.directions for lam in spec.lambdas]
    return out + ([("grpo", "grpo", {})] if spec.reference else [])


def start_fingerprint(start: str) -> dict[str, str]:
    """sha256 of the start model's weights and config (a retrained start re-runs everything trained from it)."""
    from repro.checkpoint import file_sha256
    from repro.pretrain.ship import resolve_init

    path = resolve_init(start)
    files = sorted([*path.glob("*.safetensors"), path / "config.json"])
    missing = [str(f) for f in files if not f.is_file()]
    if missing or len(files) < 2:
        raise ValueError(f"--start {start}: {path} is not a model folder (needs config.json and *.safetensors; "
                         f"missing {missing or ['*.safetensors']}); give a checkpoint or SFT model folder")
    return {"path": str(path), **{f.name: file_sha256(f) for f in files}}


def _dev_stage(out: Path, preset: Preset, seed: int) -> TaskSetOutputs:
    """The dev held-out set: the preset's held-out design (the stratified primary set, without its generalization
    tier) at ``seed`` instead of the preregistered seed; without a design, the unstratified generator."""
    dest = out / "tasks" / "dev_heldout"
    if preset.heldout is None:
        return stage_tasks(dest, "heldout", preset.heldout_repos, preset.heldout_tasks_per_repo, seed)
    from tgsuite.pipeline.heldout import train_signatures_of, write_heldout

    design = preset.heldout.model_copy(update={"dev_seed": seed})
    sigs = train_signatures_of(out / "tasks" / "train", repos=preset.train_repos,
                               tasks_per_repo=preset.train_tasks_per_repo, seed=preset.task_seed)
    return write_heldout(design, sigs, dest, None, dev=True)


def _contexts_stage(out: Path, preset: Preset, spec: KLStudySpec, model_dir: Path) -> dict[str, Any]:
    """Expert episodes on the dev held-out set → finish contexts (``repro.finish_probe``), written as JSON."""
    from harness.tasks import load_task_set
    from harness.tools import tool_schemas
    from repro.config import load_config
    from repro.finish_probe import finish_context, finish_turn
    from repro.rl_setup import hint_source
    from repro.sft_expert import collect_expert_trajectories
    from repro.tokenizer import ChatEncoder, load_tokenizer

    trajs = collect_expert_trajectories(out / "tasks" / "dev_heldout", episodes=spec.probe_contexts, hint_share=0.0,
                                        think=bool(preset.sft.get("think", True)), seed=spec.dev_task_seed,
                                        workers=preset.workers, test_view=str(preset.sft.get("test_view", "read")))
    encoder = ChatEncoder(load_tokenizer(model_dir))
    hint = hint_source(load_config(arm="tg", overrides=dict(preset.rl)))  # the training hint (the teacher's view)
    tasks = {t.instance_id: t for t in load_task_set(out / "tasks" / "dev_heldout").instances}
    contexts = [finish_context(t.instance_id, t.messages, encoder, tool_schemas(),
                               hint(tasks[t.instance_id], 0, random.Random(f"kl-probe:{spec.dev_task_seed}:{i}")))
                for i, t in enumerate(trajs) if finish_turn(t.messages) is not None]
    if not contexts:
        raise RuntimeError(f"none of {len(trajs)} expert episodes on {out}/tasks/dev_heldout ended with a finish "
                           "message; the probe has no context (check the task set and the expert)")
    path = out / "probes" / "contexts.json"
    atomic_write_json(path, [c.to_json() for c in contexts])
    return {"paths": {"contexts": str(path)}, "episodes": spec.probe_contexts, "finished": len(trajs),
            "contexts": len(contexts)}


def _probe_stage(model_dir: str, contexts_path: Path, dest: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from repro.finish_probe import FinishContext, probe_headings
    from repro.tokenizer import load_tokenizer

    contexts = [FinishContext.from_json(d) for d in json.loads(contexts_path.read_text())]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    result = {"model": model_dir, **probe_headings(model, load_tokenizer(model_dir), contexts)}
    atomic_write_json(dest, result)
    return {"paths": {"probe": str(dest)}, "unprompted_mean": result["unprompted"]["mean"],
            "hinted_mean": result["hinted"]["mean"]}


def _weights_key(path: str) -> str:
    from repro.checkpoint import read_info

    try:
        return read_info(Path(path)).sha256
    except (FileNotFoundError, ValueError):
        return hashlib.sha256(str(path).encode()).hexdigest()


def run_kl_study(preset: Preset, spec: KLStudySpec, out_dir: str | Path, *, force: frozenset[str] = frozenset(),
                 echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the study into ``out_dir``; returns the study record (also ``out/kl_direction.json``)."""
    held_seed = preset.heldout.seed if preset.heldout is not None else preset.task_seed
    if spec.dev_task_seed == held_seed:
        raise ValueError(f"dev_task_seed = {spec.dev_task_seed} is the preset's held-out task seed: no tuning choice "
                         "may be measured on the preregistered held-out set; choose another --dev-task-seed")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runner = StageRunner(out, force=force, echo=echo)
    start = start_fingerprint(spec.start)
    steps = spec.steps or int(preset.rl.get("run.steps", 0)) or None
    rl: dict[str, Any] = {"run.log_grad_split": True, **({"run.steps": steps} if spec.steps else {})}
    base = preset.with_rl(rl)
    p = preset.model_dump(mode="json")
    train_ts = runner.run("tasks_train", {k: p[k] for k in ("task_seed", "train_repos", "train_tasks_per_repo")},
                          lambda: stage_tasks(out / "tasks" / "train", "train", preset.train_repos,
                                              preset.train_tasks_per_repo, preset.task_seed), TaskSetOutputs)
    dev_ts = runner.run("tasks_dev", {"seed": spec.dev_task_seed, "repos": preset.heldout_repos,
                                      "per_repo": preset.heldout_tasks_per_repo, "design": p["heldout"],
                                      "train": train_ts.sha256},
                        lambda: _dev_stage(out, preset, spec.dev_task_seed), TaskSetOutputs)
    ctx = runner.run("probe_contexts", {"tasks": dev_ts.sha256, "n": spec.probe_contexts, "start": start,
                                        "sft": p["sft"], "rl": p["rl"], "code": "finish_probe@1"},
                     lambda: _contexts_stage(out, preset, spec, Path(start["path"])))
    contexts_path = Path(ctx["paths"]["contexts"])
    paths = Paths.under(out).model_copy(update={"sft_model": Path(start["path"])})  # RL reads sft_model, train_tasks
    models: dict[str, str] = {"start": start["path"]}
    runs: dict[str, dict[int, str]] = {}
    for label, arm, extra in cells(spec):
        for seed in spec.seeds:
            cell = base.with_rl(extra)
            run_dir = out / "train" / label / f"s{seed}"
            run = runner.run(f"train_{label}_s{seed}", {"start": start, "tasks": train_ts.sha256,
                                                         "rl": cell.model_dump(mode="json")["rl"], "arm": arm,
                                                         "seed": seed},
                             lambda d=run_dir, c=cell, a=arm, s=seed: stage_train(d, paths, c, a, s, None),
                             TrainOutputs)
            runs.setdefault(label, {})[seed] = str(run_dir)
            models[f"{label}_s{seed}"] = run.paths.checkpoint
    probes: dict[str, str] = {}
    for name, model_dir in models.items():
        dest = out / "probes" / f"{name}.json"
        rec = runner.run(f"probe_{name}", {"model": _weights_key(model_dir) if name != "start" else start,
                                           "contexts": canonical_hash(json.loads(contexts_path.read_text())),
                                           "code": "finish_probe@2"},
                         lambda m=model_dir, d=dest: _probe_stage(m, contexts_path, d))
        probes[name] = rec["paths"]["probe"]
    window = spec.window or max(1, (steps or 1) // 2)
    result = kl_tables.build(spec.directions, spec.lambdas, spec.seeds, runs, probes, window)
    record = {"spec": spec.model_dump(mode="json"), "preset": preset.name, "rl": base.model_dump(mode="json")["rl"],
              "start": start, "contexts": ctx, "window": window, "stages": runner.timings(), **result}
    atomic_write_json(out / "kl_direction.json", record)
    (out / "kl_direction.md").write_text(kl_tables.markdown(record))
    return record
