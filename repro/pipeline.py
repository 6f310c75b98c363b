"""``tgsuite reproduce``: the mini reproduction end to end, as resumable stages.

images → train and held-out task sets → validate the held-out set in Docker → tokenizer + SFT base →
freeze the protocol (before any RL arm trains; its hash goes into every later manifest) → RL arms × seeds →
evaluate the base and every checkpoint on the held-out repositories → analyze → HTML report with the verdict.

Each stage is skipped on re-run when its inputs are unchanged (``repro.stages``); times per stage are printed and
recorded in ``<out>/pipeline.json``. Every number in the report comes from the runs made here: nothing is simulated.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repro.pipeline_presets import Preset
from repro.stages import StageRunner, atomic_write_json, canonical_hash

log = logging.getLogger(__name__)

PLANS_DIR = Path(__file__).resolve().parent.parent / "protocols" / "plans"


def _paths(out: Path) -> dict[str, Path]:
    return {
        "train_tasks": out / "tasks" / "train",
        "heldout_tasks": out / "tasks" / "heldout",
        "sft": out / "sft",
        "frozen": out / "protocol" / "frozen.json",
        "train": out / "train",
        "eval": out / "eval",
        "analysis": out / "analysis" / "analysis.json",
        "report": out / "report",
    }


def _stage_images(preset: Preset) -> dict[str, Any]:
    if preset.eval_sandbox != "docker":
        return {"image": None}
    from harness.images import connect, ensure_base_image, image_digest

    client = connect()
    tag = ensure_base_image(client)
    return {"image": tag, "digest": image_digest(client, tag)}


def _stage_tasks(out: Path, split: str, repos: int, per_repo: int, seed: int) -> dict[str, Any]:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    summary = make_mini(out, split=split, repos=repos, tasks_per_repo=per_repo, seed=seed,  # type: ignore[arg-type]
                        overwrite=True)
    ts = load_task_set(out)
    return {"paths": {"tasks": str(out / "tasks.jsonl")}, "sha256": ts.sha256, "name": ts.name, "n": summary.tasks}


def _stage_validate(task_dir: Path, preset: Preset, sha256: str) -> dict[str, Any]:
    from harness.validate import load_validation, validate_task_set

    report = load_validation(task_dir)
    if (report is None or report.task_set_sha256 != sha256 or report.runs != preset.validate_runs
            or report.sandbox != preset.eval_sandbox):
        report = validate_task_set(task_dir, runs=preset.validate_runs, sandbox=preset.eval_sandbox,
                                   workers=preset.workers, progress=True)
    else:
        log.info("reusing %s/validation.json (same task set, runs and sandbox)", task_dir)
    if report.rejected:
        reasons = "; ".join(f"{r.instance_id}: {r.reason}" for r in report.rejected[:5])
        raise RuntimeError(f"{len(report.rejected)} held-out instance(s) failed validation ({reasons}). Every "
                           f"generated held-out instance must validate; see {task_dir}/validation.json")
    return {"paths": {"validation": str(task_dir / "validation.json")}, "n_valid": len(report.valid_ids())}


def _stage_sft(paths: dict[str, Path], preset: Preset) -> dict[str, Any]:
    from repro.sft import SFTConfig, run_sft

    cfg = SFTConfig(train_tasks=str(paths["train_tasks"]), heldout_tasks=None, seed=preset.task_seed,
                    workers=preset.workers, **preset.sft)
    report = run_sft(cfg, paths["sft"])
    return {"paths": {"model": report.model_dir}, "report": report.model_dump(mode="json")}


def _stage_freeze(paths: dict[str, Path], preset: Preset, heldout: dict[str, Any]) -> dict[str, Any]:
    from protocols.freeze import freeze_plan, with_task_set
    from protocols.load import load_plan

    proto = with_task_set(load_plan(PLANS_DIR / preset.plan), name=heldout["name"], sha256=heldout["sha256"])
    rec = freeze_plan(proto, out=paths["frozen"], overwrite=True)
    return {"paths": {"frozen": str(paths["frozen"])}, "sha256": rec.sha256, "frozen_at": rec.frozen_at}


def _stage_train(run_dir: Path, paths: dict[str, Path], preset: Preset, arm: str, seed: int,
                 protocol_hash: str | None = None) -> dict[str, Any]:
    from repro.config import load_config
    from repro.train import train_rl

    sets = [f"{k}={json.dumps(v)}" for k, v in preset.rl.items()]
    sets += [f"run.seed={seed}", f"model.init=\"{paths['sft'] / 'model'}\"",
             f"tasks.path=\"{paths['train_tasks']}\""]
    cfg = load_config(arm=arm, sets=sets)
    if run_dir.exists():  # the stage re-runs because its inputs changed or it never finished: start clean
        shutil.rmtree(run_dir)
    info = train_rl(cfg, run_dir, argv=["tgsuite", "reproduce", "--preset", preset.name], protocol_hash=protocol_hash)
    return {"paths": {"checkpoint": info.path}, "checkpoint": info.model_dump(mode="json")}


def _eval_policy(model_dir: str, name: str, preset: Preset) -> Any:
    """A sampling policy over the checkpoint, its engine batching the concurrent episodes' turns; close
    ``policy.engine`` when done."""
    from transformers import AutoModelForCausalLM

    from repro.batching import BatchingEngine
    from repro.sampler import KVSampler, SamplerPolicy
    from repro.tokenizer import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = load_tokenizer(model_dir)
    engine = BatchingEngine(KVSampler(model, prefix_cache=2 * preset.eval_concurrency),
                            max_batch=preset.eval_concurrency)
    pol = SamplerPolicy(engine, tok, name=name, max_new_tokens=preset.eval_max_new_tokens,
                        temperature=preset.eval_temperature)
    pol.spec = f"hf:{model_dir}"  # type: ignore[attr-defined]
    return pol


def _stage_eval(run_dir: Path, heldout: Path, arms: dict[str, str], preset: Preset, protocol_hash: str | None,
                excluded: dict[str, list[str]], feedback: str | None = None) -> dict[str, Any]:
    """Evaluate checkpoints ``arms`` (runner arm -> model dir) on the held-out set; ``feedback`` is a
    ``harness.feedback.parse_feedback`` spec given to every arm (None = no hints)."""
    from harness.feedback import parse_feedback
    from harness.interfaces import EpisodeLimits
    from harness.metrics import metrics_for
    from harness.runner import run_eval
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set

    ts = load_task_set(heldout)
    policies = {name: _eval_policy(d, name, preset) for name, d in arms.items()}
    limits = EpisodeLimits(max_turns=preset.eval_max_turns)
    from harness.run_control import sandbox_run_id

    with contextlib.ExitStack() as stack, TaskSandboxFactory(ts, kind=preset.eval_sandbox,
                                                             run_id=sandbox_run_id(run_dir)) as fac:
        for pol in policies.values():  # our sampling policies own a batching engine thread; stop it after
            close = getattr(getattr(pol, "engine", None), "close", None)
            if close is not None:
                stack.callback(close)
        fac.preflight()
        results = run_eval(ts, policies, list(range(preset.eval_episodes)), run_dir, sandbox_factory=fac,
                           workers=preset.eval_concurrency, order="arm", limits=limits, run_seed=preset.task_seed,
                           protocol_hash=protocol_hash, excluded_tests=excluded, progress=True,
                           metrics_for=metrics_for(ts),
                           feedback={n: parse_feedback(feedback) for n in arms} if feedback else None,
                           argv=["tgsuite", "reproduce", "--preset", preset.name])
    scored = [r for r in results if r.scored]
    return {"paths": {"manifest": str(run_dir / "manifest.json")}, "finished_at": _now(), "n": len(results),
            "scored": len(scored),
            "resolved": sum(r.resolved for r in scored), "behaviour_ok": sum(r.behaviour_ok for r in scored)}


def _stage_analyze(paths: dict[str, Path], run_dirs: list[Path], exploratory: Any = None) -> dict[str, Any]:
    from evalsuite.analyze import analyze

    result = analyze(paths["frozen"], [str(d) for d in run_dirs], exploratory=exploratory)
    atomic_write_json(paths["analysis"], json.loads(result.model_dump_json()))
    return {"paths": {"analysis": str(paths["analysis"])}, "decision": result.decision.verdict,
            "reasons": list(result.decision.reasons)}


def _stage_report(paths: dict[str, Path], run_dirs: list[Path], training: dict[str, dict[str, str]]) -> dict[str, Any]:
    from reports.build import build_report

    summary = build_report(paths["analysis"], out_dir=paths["report"], protocol=paths["frozen"],
                           run_dirs=[str(d) for d in run_dirs], training_metrics=training)
    return {"paths": {"index": str(paths["report"] / "index.html")}, "summary": json.loads(summary.model_dump_json())}


def reproduce(preset: Preset, out_dir: str | Path, *, force: frozenset[str] = frozenset(),
              studies: frozenset[str] = frozenset(), echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the whole reproduction into ``out_dir``; returns the pipeline record.

    ``studies`` selects the exploratory studies of ``repro.pipeline_studies`` (noisy feedback, can-do vs does-do,
    equal compute, ablations); they run after the main evaluation and are reported, never part of the decision."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    paths = _paths(out)
    runner = StageRunner(out, force=force, echo=echo)
    p = preset.model_dump(mode="json")
    img = runner.run("images", {"sandbox": preset.eval_sandbox}, lambda: _stage_images(preset))
    train_ts = runner.run("tasks_train", {k: p[k] for k in ("task_seed", "train_repos", "train_tasks_per_repo")},
                          lambda: _stage_tasks(paths["train_tasks"], "train", preset.train_repos,
                                               preset.train_tasks_per_repo, preset.task_seed))
    held_ts = runner.run("tasks_heldout",
                         {k: p[k] for k in ("task_seed", "heldout_repos", "heldout_tasks_per_repo")},
                         lambda: _stage_tasks(paths["heldout_tasks"], "heldout", preset.heldout_repos,
                                              preset.heldout_tasks_per_repo, preset.task_seed))
    runner.run("validate", {"tasks": held_ts["sha256"], "runs": preset.validate_runs, "image": img.get("digest"),
                            "sandbox": preset.eval_sandbox}, lambda: _stage_validate(paths["heldout_tasks"], preset, held_ts["sha256"]))
    sft = runner.run("sft", {"tasks": train_ts["sha256"], "sft": preset.sft, "seed": preset.task_seed},
                     lambda: _stage_sft(paths, preset))
    plan_sha = canonical_hash((PLANS_DIR / preset.plan).read_text())
    frozen = runner.run("protocol", {"plan": plan_sha, "tasks": held_ts["sha256"]},
                        lambda: _stage_freeze(paths, preset, held_ts))
    ckpts: dict[str, str] = {"base": sft["paths"]["model"]}
    ckpt_records: dict[str, Any] = {"base": sft}
    training: dict[str, dict[str, str]] = {}
    for arm in preset.arms:
        for seed in preset.seeds:
            run_dir = paths["train"] / arm / f"s{seed}"
            rec = runner.run(f"train_{arm}_s{seed}",
                             {"sft": sft["report"]["model_dir"], "sft_inputs": canonical_hash(sft["report"]),
                              "rl": preset.rl, "arm": arm, "seed": seed, "protocol": frozen["sha256"]},
                             lambda a=arm, s=seed, d=run_dir: _stage_train(d, paths, preset, a, s, frozen["sha256"]))
            ckpts[f"{arm}@s{seed}"] = rec["paths"]["checkpoint"]
            ckpt_records[f"{arm}@s{seed}"] = rec
            training.setdefault(arm, {})[str(seed)] = str(run_dir)
    eval_inputs = {"ckpts": {k: canonical_hash(v) for k, v in sorted(ckpt_records.items())},
                   "tasks": held_ts["sha256"], "protocol": frozen["sha256"],
                   "eval": {k: p[k] for k in p if k.startswith("eval_")}}
    excluded = _excluded_tests(paths["heldout_tasks"])
    base_dir = paths["eval"] / "base"
    arms_dir = paths["eval"] / "arms"
    ev_base = runner.run("eval_base", {**eval_inputs, "which": "base"},
               lambda: _stage_eval(base_dir, paths["heldout_tasks"], {"base": ckpts["base"]}, preset,
                                   frozen["sha256"], excluded))
    ev_arms = runner.run("eval_arms", {**eval_inputs, "which": "arms"},
               lambda: _stage_eval(arms_dir, paths["heldout_tasks"], {k: v for k, v in ckpts.items() if k != "base"},
                                   preset, frozen["sha256"], excluded))
    exploratory = None
    if studies:
        from repro.pipeline_studies import StudyContext, run_studies

        ctx = StudyContext(preset=preset, paths=paths, protocol_sha256=frozen["sha256"],
                           heldout_sha256=held_ts["sha256"], sft_report=sft["report"], ckpts=ckpts, excluded=excluded)
        exploratory = run_studies(runner, ctx, set(studies))
    ex_hash = canonical_hash(exploratory.model_dump(mode="json")) if exploratory is not None else None
    analysis = runner.run("analyze", {"eval": canonical_hash(ev_arms), "protocol": frozen["sha256"],
                                      "code": "analyze@2", "exploratory": ex_hash},
                          lambda: _stage_analyze(paths, [arms_dir], exploratory))
    runner.run("report", {"analysis": canonical_hash(analysis), "eval": canonical_hash([ev_arms, ev_base]),
                          "training": canonical_hash(ckpt_records), "code": "report@4"},
               lambda: _stage_report(paths, [arms_dir, base_dir], training))
    record = {"preset": p, "out": str(out), "decision": analysis["decision"], "studies": sorted(studies),
              "stages": runner.timings(),
              "report": str(paths["report"] / "index.html"), "protocol_sha256": frozen["sha256"]}
    atomic_write_json(out / "pipeline.json", record)
    return record


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="seconds")


def _excluded_tests(task_dir: Path) -> dict[str, list[str]]:
    from harness.episode_grading import excluded_tests_of

    return excluded_tests_of(task_dir)
