"""The reproduction's exploratory studies as resumable stages of ``tgsuite reproduce`` (issue #7, item 3).

Studies (select any subset with :func:`parse_studies`; every one is labelled exploratory in the report):

- ``noisy_feedback``: TG trained with imperfect hints (``guidance.feedback = "mixture"``): half correct and half
  irrelevant, and a quarter wrong. Each mix is compared with the main TG runs (all hints correct) on the held-out
  set, evaluated WITHOUT hints; ``evalsuite.studies.noisy_feedback_study`` gives Wilson CIs per mix and a trend
  test. The two mixes are two separate series (each ``correct`` vs one mix), because on the study's hint-quality
  scale (correct 0, irrelevant 0.5, wrong 1) both mixes score 0.25 and would otherwise be pooled.
- ``can_do``: the same held-out states answered by the same checkpoint with the plain prompt and with the
  corrective hint (``correct@before_finish``: the requirement's reminder, given when the model tries to finish);
  paired rows for ``evalsuite.studies.can_do_study`` (Tango CI, exact McNemar).
- ``equal_compute``: GRPO retrained with more steps so that its estimated FLOPs (rollout + trainer) match TG's
  (rollout + teacher forward + trainer), read from the training runs' compute ledgers (``repro.compute``); TG is
  compared with that run at matched FLOPs (``equal_compute_study``), with wall time, peak memory and tuning trials
  reported per arm. No arm is tuned in this pipeline: each runs once with the preset's settings (1 trial per arm).
- ``ablations``: extra arms from ``repro/configs/arms.toml`` (``tg_all_turns``, ``tg_no_fmt_reward``,
  ``tg_no_think_kl``, the λ sweep) trained × seeds and evaluated like the main arms; per-arm rates with Wilson CIs
  are written to ``<out>/studies/studies.json`` and to ``Exploratory.label_rates`` (the report's table), beside
  the main ``tg`` runs as the reference.
- ``production_loop``: the production recipe's loop (``repro.distill.train_loop``: self-distillation on the SFT
  model's own best trajectories with soft labels — the full distribution at ``distill.target_temperature`` —, RL
  with ``StudySizes.loop_arm`` under the preset's RL settings, re-distillation on RL's best trajectories) × seeds,
  against RL alone (the main ``loop_arm`` runs) on the same held-out set; per-label rates in
  ``Exploratory.label_rates``. The loop spends more compute than RL alone (two distillation stages and their pools).
- ``hint_probes``: side effects of fixed hints ("explain your change", "ask before editing" on an approved task) on
  the can-do models, paired with their plain episodes: edit, resolved and blocked rates (``tgsuite.pipeline.probes``).
- ``behaviour_tiers``: format / style / tension tiers (``tool_args@v1``, ``markdown@v1``, ``ask_first@v1``): GRPO
  and TG per tier from a base taught all three, on the UNSEEN held-out repositories (``tgsuite.pipeline.tiers``).

Study checkpoints are evaluated without hints in resumable run directories ``<out>/eval/studies/study_eval_plain-<hash>``
and the can-do corrective answers in ``<out>/eval/studies/study_eval_corrective-<hash>``; a model is evaluated once
per setting (``study_context.eval_models``: the main evaluation's episodes of the SFT base and the arms' checkpoints
are read, not run again, and a later study reads an earlier study's). Runner arm names are ``<label>_s<seed>``
(``base`` for the SFT base). The tables and study results are built from those run directories by ``evalsuite.study_tables``
(this module trains, evaluates and reads the checkpoints' compute ledgers). Nothing here is simulated: every number
comes from these runs. Entry point: :func:`run_studies`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import pandas as pd

from evalsuite.study_tables import (
    ENDPOINTS,
    can_do_result,
    equal_compute_result,
    label_rates,
    noisy_result,
    rates_by_label,
    study_frame,
    successes,
)
from tgsuite.pipeline.presets import RLOverrides
from tgsuite.pipeline.probes import run_hint_probes
from tgsuite.pipeline.records import TrainOutputs
from tgsuite.pipeline.sizes import NOISY_MIXES, StudySizes
from tgsuite.pipeline.stage_runner import StageRunner, atomic_write_json, canonical_hash
from tgsuite.pipeline.study_context import (
    StudyContext,
    StudyModel,
    StudyStages,
    default_stages,
    eval_models,
    study_arms,
)
from tgsuite.pipeline.tiers import run_behaviour_tiers

if TYPE_CHECKING:
    from evalsuite.schema import CheckpointEval, Exploratory

__all__ = ["NOISY_MIXES", "StudyContext", "StudyModel", "StudySizes", "StudyStages", "default_stages", "eval_models"]

log = logging.getLogger(__name__)

StudyName = Literal["noisy_feedback", "can_do", "equal_compute", "ablations", "production_loop", "hint_probes",
                    "behaviour_tiers"]
STUDIES: tuple[str, ...] = get_args(StudyName)


def parse_studies(spec: str) -> set[str]:
    """``--studies`` value: ``all``, ``none`` or a comma list of names in ``STUDIES`` (e.g. ``can_do,hint_probes``)."""
    spec = spec.strip()
    if spec in ("", "none"):
        return set()
    if spec == "all":
        return set(STUDIES)
    names = {s.strip() for s in spec.split(",") if s.strip()}
    bad = sorted(names - set(STUDIES))
    if bad:
        raise ValueError(f"--studies: unknown study {', '.join(bad)}; use all, none or a comma list of "
                         f"{','.join(STUDIES)} (e.g. --studies noisy_feedback,can_do)")
    return names


def matched_steps(treatment_flops: Iterable[float], baseline_flops: Iterable[float], baseline_steps: int) -> int:
    """Steps that give the baseline the treatment's mean FLOPs, assuming its FLOPs grow linearly with steps."""
    t, b = list(treatment_flops), list(baseline_flops)
    if not t or not b or min(b) <= 0 or baseline_steps < 1:
        raise ValueError("matched_steps needs positive baseline FLOPs from at least one run of each arm "
                         "(read from checkpoint.json 'compute.flops_total'); did the training runs finish?")
    ratio = (sum(t) / len(t)) / (sum(b) / len(b))
    return max(baseline_steps, math.ceil(baseline_steps * ratio - 1e-9))


def checkpoint_eval(model: StudyModel, frame: pd.DataFrame, arm: str, tuning_trials: int) -> CheckpointEval:
    """A ``CheckpointEval`` row: the run's compute ledger (checkpoint.json) and its held-out successes."""
    from evalsuite.schema import CheckpointEval
    from repro.checkpoint import read_info

    info = read_info(Path(model.path))
    c = info.compute
    tokens, wall = c.get("tokens", {}), c.get("wall_s", {})
    wins, n = successes(frame, model.runner_arm, model.path)
    return CheckpointEval(arm=arm, seed=model.seed, step=info.step, rollout_tokens=int(tokens.get("rollout", 0)),
                          teacher_forward_tokens=int(tokens.get("teacher", 0)),
                          trainer_tokens=int(tokens.get("trainer", 0)), flops=float(c.get("flops_total", 0.0)),
                          wall_s=float(sum(wall.values())),
                          peak_memory_bytes=int(c.get("peak_cuda_bytes") or c.get("peak_rss_bytes") or 0),
                          tuning_trials=tuning_trials, successes=wins, n=n)


# ----------------------------------------------------------------------------------------------------------------
# Stages
# ----------------------------------------------------------------------------------------------------------------


def _main_model(ctx: StudyContext, label: str, seed: int) -> StudyModel:
    if label == "base":
        return StudyModel("base", "base", -1, ctx.ckpts["base"])
    key = f"{label}@s{seed}"
    if key not in ctx.ckpts:
        raise ValueError(f"study needs checkpoint {key}, which the main pipeline did not train (it has "
                         f"{', '.join(sorted(ctx.ckpts))}); give StudySizes.seeds a subset of the preset's seeds "
                         f"{list(ctx.preset.seeds)} and can_do_labels a subset of its arms {list(ctx.preset.arms)}")
    return StudyModel(f"{label}_s{seed}", label, seed, ctx.ckpts[key])


def _main_models(ctx: StudyContext, sizes: StudySizes, studies: set[str]) -> dict[str, StudyModel]:
    labels: set[str] = set()
    if studies & {"noisy_feedback", "ablations", "equal_compute"}:
        labels.add("tg")
    if "equal_compute" in studies:
        labels.add("grpo")
    if "production_loop" in studies:
        labels.add(sizes.loop_arm)
    if studies & {"can_do", "hint_probes"}:
        labels.update(sizes.can_do_labels)
    models = [_main_model(ctx, lab, s) for lab in sorted(labels) for s in ((-1,) if lab == "base" else sizes.seeds)]
    return {m.runner_arm: m for m in models}


def _train(runner: StageRunner, ctx: StudyContext, label: str, arm: str, seed: int,
           extra: RLOverrides) -> StudyModel:
    """Train one study run with ``StudyContext.stages.train`` (the preset's RL settings plus ``extra``)."""
    run_dir = ctx.paths.train / "studies" / label / f"s{seed}"
    preset = ctx.preset.with_rl(extra)
    inputs = {"sft": ctx.sft_report.model_dir, "sft_inputs": canonical_hash(ctx.sft_report),
              "rl": preset.rl, "arm": arm, "seed": seed, "protocol": ctx.protocol_sha256, "label": label}
    rec = runner.run(f"study_train_{label}_s{seed}", inputs,
                     lambda: ctx.stages.train(run_dir, ctx.paths, preset, arm, seed, ctx.protocol_sha256), TrainOutputs)
    return StudyModel(f"{label}_s{seed}", label, seed, rec.paths.checkpoint)


def _train_loop(runner: StageRunner, ctx: StudyContext, sizes: StudySizes, seed: int) -> StudyModel:
    """One production-loop run (``StudyContext.stages.loop``) from the SFT model."""
    run_dir = ctx.paths.train / "studies" / "loop" / f"s{seed}"
    inputs = {"sft": ctx.sft_report.model_dir, "sft_inputs": canonical_hash(ctx.sft_report),
              "rl": ctx.preset.rl, "loop": sizes.loop, "arm": sizes.loop_arm, "seed": seed,
              "protocol": ctx.protocol_sha256, "label": "loop"}
    rec = runner.run(f"study_train_loop_s{seed}", inputs,
                     lambda: ctx.stages.loop(run_dir, ctx.paths, ctx.preset, sizes.loop_arm, seed,
                                             ctx.protocol_sha256, loop=sizes.loop), TrainOutputs)
    return StudyModel(f"loop_s{seed}", "loop", seed, rec.paths.checkpoint)


def mix_overrides(mix: dict[str, float]) -> RLOverrides:
    """Dotted TrainConfig overrides for TG trained with a hint mix (``repro.rl_setup.hint_source``)."""
    return {"guidance.feedback": "mixture", **{f"guidance.feedback_mix.{k}": float(v) for k, v in mix.items()}}


def _equal_compute_steps(ctx: StudyContext, sizes: StudySizes) -> int:
    from repro.checkpoint import read_info

    tg = [read_info(Path(_main_model(ctx, "tg", s).path)) for s in sizes.seeds]
    grpo = [read_info(Path(_main_model(ctx, "grpo", s).path)) for s in sizes.seeds]
    steps = max(i.step for i in grpo)
    return matched_steps([float(i.compute.get("flops_total", 0.0)) for i in tg],
                         [float(i.compute.get("flops_total", 0.0)) for i in grpo], steps)


def _train_studies(runner: StageRunner, ctx: StudyContext, sizes: StudySizes, studies: set[str]) -> tuple[dict[str, StudyModel], int | None]:
    jobs: list[tuple[str, str, RLOverrides]] = []
    if "noisy_feedback" in studies:
        jobs += [(f"tg_mix_{name}", "tg", mix_overrides(mix)) for name, mix in sorted(sizes.noisy_mixes.items())]
    eqc_steps = _equal_compute_steps(ctx, sizes) if "equal_compute" in studies else None
    if eqc_steps is not None:
        jobs.append(("grpo_eqc", "grpo", {"run.steps": eqc_steps}))
    if "ablations" in studies:
        jobs += [(arm, arm, {}) for arm in sizes.ablations]
    models = [_train(runner, ctx, label, arm, seed, extra) for label, arm, extra in jobs for seed in sizes.seeds]
    if "production_loop" in studies:
        models += [_train_loop(runner, ctx, sizes, seed) for seed in sizes.seeds]
    return {m.runner_arm: m for m in models}, eqc_steps


# ----------------------------------------------------------------------------------------------------------------
# Analyses and the entry point
# ----------------------------------------------------------------------------------------------------------------


def equal_compute_evals(frame: pd.DataFrame, models: dict[str, StudyModel], trials: int) -> list[CheckpointEval]:
    """The ``CheckpointEval`` rows of the equal-compute study: tg, grpo and grpo_eqc models."""
    return [checkpoint_eval(m, frame, m.label, trials) for m in models.values()
            if m.label in ("tg", "grpo", "grpo_eqc")]


def run_studies(runner: StageRunner, ctx: StudyContext, studies: set[str]) -> Exploratory:
    """Train, evaluate and analyse the selected ``studies``; returns the ``evalsuite.schema.Exploratory`` that
    ``evalsuite.analyze.analyze(..., exploratory=...)`` takes. Call after the main eval stage; every train and eval
    step is a resumable stage of ``runner``; a model is evaluated only when no earlier evaluation under the same
    settings has its episodes (``study_context.eval_models``). Also writes ``<out>/studies/studies.json`` (models,
    where each model's episodes are, ablation rates, the reason a study's analysis could not run)."""
    from evalsuite.rates import StatsInputError
    from evalsuite.schema import Exploratory
    from harness.rundir import RunDirError

    unknown = sorted(set(studies) - set(STUDIES))
    if unknown:
        raise ValueError(f"unknown studies {unknown}; use any of {list(STUDIES)} (see parse_studies)")
    if not studies:
        return Exploratory()
    sizes = ctx.study_sizes()
    models = _main_models(ctx, sizes, studies)
    trained, eqc_steps = _train_studies(runner, ctx, sizes, studies)
    models.update(trained)
    episodes = {"plain": eval_models(runner, ctx, "study_eval_plain", models, None)} if models else {}  # none: tiers only
    frame = study_frame(episodes["plain"], study_arms(models)) if models else pd.DataFrame(columns=["label", *ENDPOINTS])
    out: dict[str, Any] = {"noisy_feedback": None, "equal_compute": None, "can_do_vs_does_do": []}
    errors: dict[str, str] = {}
    if "can_do" in studies:
        cd = {k: m for k, m in models.items() if m.label in sizes.can_do_labels}
        episodes["corrective"] = eval_models(runner, ctx, "study_eval_corrective", cd, sizes.corrective)
    analyses = {
        "noisy_feedback": lambda: noisy_result(frame, sizes.noisy_mixes),
        "equal_compute": lambda: equal_compute_result(equal_compute_evals(frame, models, sizes.tuning_trials),
                                                      eqc_steps or 0, sizes.tuning_trials),
        "can_do": lambda: can_do_result(frame[frame["label"].isin(sizes.can_do_labels)],
                                        study_frame(episodes["corrective"], study_arms(models)), sizes.corrective),
        "ablations": lambda: label_rates(frame, "ablations", sizes.ablations, "tg"),
        "production_loop": lambda: label_rates(frame, "production_loop", ["loop"], sizes.loop_arm),
        "hint_probes": lambda: run_hint_probes(runner, ctx, sizes, models, episodes),
        "behaviour_tiers": lambda: run_behaviour_tiers(runner, ctx),
    }
    out["label_rates"] = []
    for name, fn in analyses.items():
        if name in studies:
            try:
                if name in ("ablations", "production_loop"):
                    out["label_rates"] += fn()
                else:
                    out["can_do_vs_does_do" if name == "can_do" else name] = fn()
            except (StatsInputError, RunDirError) as exc:
                log.warning("study %s: analysis not possible: %s", name, exc)
                errors[name] = str(exc)
    ex = Exploratory(**out)
    ablations = rates_by_label(frame, ["tg", *sizes.ablations]) if "ablations" in studies else {}
    record = {"studies": sorted(studies), "sizes": sizes.model_dump(mode="json"), "equal_compute_steps": eqc_steps,
              "models": {k: vars(m) for k, m in sorted(models.items())},
              "episodes": {k: {arm: {"run_dir": str(e.run_dir), "arm": e.arm} for arm, e in sorted(v.items())}
                           for k, v in episodes.items()},
              "ablations": ablations, "errors": errors, "exploratory": ex.model_dump(mode="json")}
    atomic_write_json(ctx.paths.eval.parent / "studies" / "studies.json", record)
    return ex
