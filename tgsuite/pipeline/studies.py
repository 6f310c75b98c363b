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
  are written to ``<out>/studies/studies.json`` (``Exploratory`` has no ablation field).
- ``hint_probes``: side effects of fixed hints ("explain your change", "ask before editing" on an approved task) on
  the can-do models, paired with their plain episodes: edit, resolved and blocked rates (``tgsuite.pipeline.probes``).
- ``behaviour_tiers``: format / style / tension tiers (``tool_args@v1``, ``markdown@v1``, ``ask_first@v1``): GRPO
  and TG per tier from a base taught all three, on the UNSEEN held-out repositories (``tgsuite.pipeline.tiers``).

Every study checkpoint is evaluated in one resumable run directory, ``<out>/eval/studies/study_eval_plain-<hash>`` (no
hints), and the can-do corrective answers in ``<out>/eval/studies/study_eval_corrective-<hash>``. Runner arm names are ``<label>_s<seed>`` (``base``
for the SFT base). Nothing here is simulated: every number comes from these runs. Entry point: :func:`run_studies`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import pandas as pd

from tgsuite.pipeline.probes import run_hint_probes
from tgsuite.pipeline.stages import StageRunner, atomic_write_json, canonical_hash
from tgsuite.pipeline.study_context import (
    HINT_QUALITY,
    NOISY_MIXES,
    STUDY_SIZES,
    StudyContext,
    StudyModel,
    StudySizes,
    StudyStages,
    default_stages,
    eval_models,
    mix_score,
)
from tgsuite.pipeline.tiers import run_behaviour_tiers

if TYPE_CHECKING:
    from evalsuite.schema import (
        CanDoResult,
        CanDoRow,
        CheckpointEval,
        EqualComputeResult,
        Exploratory,
        NoisyFeedbackResult,
    )

__all__ = ["HINT_QUALITY", "NOISY_MIXES", "STUDY_SIZES", "StudyContext", "StudyModel", "StudySizes", "StudyStages",
           "default_stages", "eval_models", "mix_score"]

log = logging.getLogger(__name__)

StudyName = Literal["noisy_feedback", "can_do", "equal_compute", "ablations", "hint_probes", "behaviour_tiers"]
STUDIES: tuple[str, ...] = get_args(StudyName)
ENDPOINTS = ("behaviour_ok", "code_ok", "joint_ok")


def mix_label(mix: dict[str, float]) -> str:
    """Readable label of a training mix, e.g. ``train:correct=0.75,wrong=0.25``."""
    return "train:" + ",".join(f"{k}={mix[k]:g}" for k in sorted(mix))


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


def noisy_frame(frame: pd.DataFrame, mixes: dict[str, dict[str, float]]
                ) -> tuple[pd.DataFrame, dict[tuple[str, str], str]]:
    """Episodes for ``noisy_feedback_study``: one series per mix (arm ``tg[<mix>]``) holding the all-correct TG
    episodes (kind ``correct``) and the mix's (kind ``wrong=<score>``). Returns the frame and
    {(series, kind): display label} (two mixes may share a score, so the label depends on the series)."""
    parts, display = [], {}
    for name, mix in sorted(mixes.items()):
        kind, series = f"wrong={mix_score(mix):g}", f"tg[{name}]"
        display[(series, "correct")] = "train:correct=1"
        display[(series, kind)] = mix_label(mix)
        for label, k in (("tg", "correct"), (f"tg_mix_{name}", kind)):
            sub = frame[frame["label"] == label]
            parts.append(sub.assign(arm=series, feedback_kind=k))
    cols = ["arm", "feedback_kind", *ENDPOINTS]
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    return out, display


def study_frame(run_dir: Path, models: dict[str, StudyModel]) -> pd.DataFrame:
    """Scored episodes (highest attempt) of the study models in ``run_dir``, with label and training seed."""
    from evalsuite.outcomes import load_run

    rows = []
    for r in load_run(run_dir).results:
        m = models.get(r.arm)
        if m is None or not r.scored:
            continue
        rows.append({"runner_arm": r.arm, "label": m.label, "seed": m.seed, "instance_id": r.instance_id,
                     "repo": r.cluster or r.repo, "episode_seed": r.seed, "behaviour_ok": r.behaviour_ok,
                     "code_ok": r.resolved, "joint_ok": r.joint_ok, "hinted": r.feedback_kind is not None})
    cols = ["runner_arm", "label", "seed", "instance_id", "repo", "episode_seed", *ENDPOINTS, "hinted"]
    return pd.DataFrame(rows, columns=cols)


def can_do_rows(plain: pd.DataFrame, corrective: pd.DataFrame) -> list[CanDoRow]:
    """Pair plain and corrective answers on the same (model, instance, episode seed); unpaired states are dropped."""
    from evalsuite.schema import CanDoRow

    key = ["runner_arm", "instance_id", "episode_seed"]
    both = plain.merge(corrective, on=key, suffixes=("_p", "_c"))
    return [CanDoRow(arm=r["label_p"], state_id=f"{r['instance_id']}/train_s{r['seed_p']}/ep{r['episode_seed']}",
                     repo=str(r["repo_p"]), plain_behaviour_ok=bool(r["behaviour_ok_p"]),
                     plain_code_ok=bool(r["code_ok_p"]), corrective_behaviour_ok=bool(r["behaviour_ok_c"]),
                     corrective_code_ok=bool(r["code_ok_c"]))
            for r in both.to_dict("records")]


def can_do_result(plain: pd.DataFrame, corrective: pd.DataFrame, spec: str) -> list[CanDoResult]:
    """``can_do_study`` on the paired states, each arm noting in how many states the corrective hint was given
    (a ``before_finish`` hint reaches only episodes whose model tries to finish)."""
    from evalsuite.studies import can_do_study

    res = can_do_study(can_do_rows(plain, corrective))
    out = []
    for r in res:
        sub = corrective[corrective["label"] == r.arm]
        note = (f"corrective prompt {spec!r} was delivered in {int(sub['hinted'].sum())} of {len(sub)} corrective "
                "episodes; where it was not, both answers had the same prompt")
        out.append(r.model_copy(update={"notes": [*r.notes, note]}))
    return out


def checkpoint_eval(model: StudyModel, frame: pd.DataFrame, arm: str, tuning_trials: int) -> CheckpointEval:
    """A ``CheckpointEval`` row: the run's compute ledger (checkpoint.json) and its held-out successes."""
    from evalsuite.schema import CheckpointEval
    from repro.checkpoint import read_info

    info = read_info(Path(model.path))
    c = info.compute
    tokens, wall = c.get("tokens", {}), c.get("wall_s", {})
    sub = frame[frame["runner_arm"] == model.runner_arm]
    if sub.empty:
        raise ValueError(f"equal compute: no scored held-out episode for {model.runner_arm} ({model.path}); "
                         "check <out>/eval/studies/study_eval_plain-* for infra errors and re-run")
    return CheckpointEval(arm=arm, seed=model.seed, step=info.step, rollout_tokens=int(tokens.get("rollout", 0)),
                          teacher_forward_tokens=int(tokens.get("teacher", 0)),
                          trainer_tokens=int(tokens.get("trainer", 0)), flops=float(c.get("flops_total", 0.0)),
                          wall_s=float(sum(wall.values())),
                          peak_memory_bytes=int(c.get("peak_cuda_bytes") or c.get("peak_rss_bytes") or 0),
                          tuning_trials=tuning_trials, successes={e: int(sub[e].sum()) for e in ENDPOINTS},
                          n=len(sub))


def rates_by_label(frame: pd.DataFrame, labels: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per label: Wilson rate per endpoint, episodes pooled over seeds (descriptive)."""
    from evalsuite.describe import rate_ci

    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        sub = frame[frame["label"] == label]
        out[label] = {e: rate_ci(sub[e].astype(float), e).model_dump(mode="json") for e in ENDPOINTS}
        out[label]["seeds"] = sorted(int(s) for s in sub["seed"].unique())
    return out


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
    if studies & {"can_do", "hint_probes"}:
        labels.update(sizes.can_do_labels)
    models = [_main_model(ctx, lab, s) for lab in sorted(labels) for s in ((-1,) if lab == "base" else sizes.seeds)]
    return {m.runner_arm: m for m in models}


def _train(runner: StageRunner, ctx: StudyContext, label: str, arm: str, seed: int,
           extra: dict[str, Any]) -> StudyModel:
    """Train one study run with ``StudyContext.stages.train`` (the preset's RL settings plus ``extra``)."""
    run_dir = ctx.paths["train"] / "studies" / label / f"s{seed}"
    preset = ctx.preset.with_rl(extra)
    inputs = {"sft": ctx.sft_report.get("model_dir"), "sft_inputs": canonical_hash(ctx.sft_report),
              "rl": preset.rl, "arm": arm, "seed": seed, "protocol": ctx.protocol_sha256, "label": label}
    rec = runner.run(f"study_train_{label}_s{seed}", inputs,
                     lambda: ctx.stages.train(run_dir, ctx.paths, preset, arm, seed, ctx.protocol_sha256))
    return StudyModel(f"{label}_s{seed}", label, seed, rec["paths"]["checkpoint"])


def mix_overrides(mix: dict[str, float]) -> dict[str, Any]:
    """Dotted TrainConfig overrides for TG trained with a hint mix (``repro.wiring.hint_source``)."""
    return {"guidance.feedback": "mixture", **{f"guidance.feedback_mix.{k}": float(v) for k, v in mix.items()}}


def _equal_compute_steps(ctx: StudyContext, sizes: StudySizes) -> int:
    from repro.checkpoint import read_info

    tg = [read_info(Path(_main_model(ctx, "tg", s).path)) for s in sizes.seeds]
    grpo = [read_info(Path(_main_model(ctx, "grpo", s).path)) for s in sizes.seeds]
    steps = max(i.step for i in grpo)
    return matched_steps([float(i.compute.get("flops_total", 0.0)) for i in tg],
                         [float(i.compute.get("flops_total", 0.0)) for i in grpo], steps)


def _train_studies(runner: StageRunner, ctx: StudyContext, sizes: StudySizes, studies: set[str]) -> tuple[dict[str, StudyModel], int | None]:
    jobs: list[tuple[str, str, dict[str, Any]]] = []
    if "noisy_feedback" in studies:
        jobs += [(f"tg_mix_{name}", "tg", mix_overrides(mix)) for name, mix in sorted(sizes.noisy_mixes.items())]
    eqc_steps = _equal_compute_steps(ctx, sizes) if "equal_compute" in studies else None
    if eqc_steps is not None:
        jobs.append(("grpo_eqc", "grpo", {"run.steps": eqc_steps}))
    if "ablations" in studies:
        jobs += [(arm, arm, {}) for arm in sizes.ablations]
    models = [_train(runner, ctx, label, arm, seed, extra) for label, arm, extra in jobs for seed in sizes.seeds]
    return {m.runner_arm: m for m in models}, eqc_steps


# ----------------------------------------------------------------------------------------------------------------
# Analyses and the entry point
# ----------------------------------------------------------------------------------------------------------------


def noisy_result(frame: pd.DataFrame, mixes: dict[str, dict[str, float]]) -> NoisyFeedbackResult:
    """``noisy_feedback_study`` over the mix series, with the kinds relabelled as the training mixes they are."""
    from evalsuite.studies import noisy_feedback_study

    df, display = noisy_frame(frame, mixes)
    res = noisy_feedback_study(df)
    rows = [r.model_copy(update={"feedback_kind": display[(r.arm, r.feedback_kind)]}) for r in res.rows]
    notes = ["hint mixes are TRAINING conditions; every episode was evaluated without hints",
             "each series tg[<mix>] holds the main tg runs (all hints correct) and one mix; the same tg episodes "
             "appear in every series", "'wrong share' is the mix's hint-quality score (correct 0, irrelevant 0.5, "
             "wrong 1), e.g. half correct + half irrelevant = 0.25"]
    return res.model_copy(update={"rows": rows, "notes": [*res.notes, *notes]})


def equal_compute_result(frame: pd.DataFrame, models: dict[str, StudyModel], steps: int,
                         trials: int) -> EqualComputeResult:
    """TG vs GRPO-with-matched-steps at the larger of their final FLOPs (every seed's final checkpoint enters)."""
    from evalsuite.studies import equal_compute_study

    evals = [checkpoint_eval(m, frame, m.label, trials) for m in models.values()
             if m.label in ("tg", "grpo", "grpo_eqc")]
    budget = max(e.flops for e in evals if e.arm in ("tg", "grpo_eqc"))
    res = equal_compute_study(evals, treatment="tg", baseline="grpo_eqc", budget=budget)
    notes = [f"grpo_eqc = GRPO trained for {steps} steps, chosen from the runs' ledgers so that its estimated FLOPs "
             "match TG's (rollout + teacher forward + trainer); grpo = the main GRPO arm, shown for reference",
             f"achieved FLOPs ratio tg / grpo_eqc = {res.ratios.get('flops', float('nan')):.3f} (whole steps, "
             "rounded up: GRPO gets at least TG's estimated FLOPs)",
             "FLOPs are estimates: 2·N per forward token, 6·N per trained token, attention term excluded",
             f"tuning trials: {trials} per arm; no arm's hyperparameters were tuned in this pipeline",
             "wall time = the sum of the ledger's phases; peak memory = the training process's peak (CUDA allocated "
             "on GPU, else RSS), which includes earlier stages run in the same process"]
    return res.model_copy(update={"notes": [*res.notes, *notes]})


def run_studies(runner: StageRunner, ctx: StudyContext, studies: set[str]) -> Exploratory:
    """Train, evaluate and analyse the selected ``studies``; returns the ``evalsuite.schema.Exploratory`` that
    ``evalsuite.analyze.analyze(..., exploratory=...)`` takes. Call after the main eval stage; every train and eval
    step is a resumable stage of ``runner``. Also writes ``<out>/studies/studies.json`` (models, run directories,
    ablation rates, the reason a study's analysis could not run)."""
    from evalsuite.rates import StatsInputError
    from evalsuite.schema import Exploratory

    unknown = sorted(set(studies) - set(STUDIES))
    if unknown:
        raise ValueError(f"unknown studies {unknown}; use any of {list(STUDIES)} (see parse_studies)")
    if not studies:
        return Exploratory()
    sizes = ctx.study_sizes()
    models = _main_models(ctx, sizes, studies)
    trained, eqc_steps = _train_studies(runner, ctx, sizes, studies)
    models.update(trained)
    dirs = {"plain": eval_models(runner, ctx, "study_eval_plain", models, None)} if models else {}  # none: tiers only
    frame = study_frame(dirs["plain"], models) if models else pd.DataFrame(columns=["label", *ENDPOINTS])
    out: dict[str, Any] = {"noisy_feedback": None, "equal_compute": None, "can_do_vs_does_do": []}
    errors: dict[str, str] = {}
    if "can_do" in studies:
        cd = {k: m for k, m in models.items() if m.label in sizes.can_do_labels}
        dirs["corrective"] = eval_models(runner, ctx, "study_eval_corrective", cd, sizes.corrective)
    analyses = {
        "noisy_feedback": lambda: noisy_result(frame, sizes.noisy_mixes),
        "equal_compute": lambda: equal_compute_result(frame, models, eqc_steps or 0, sizes.tuning_trials),
        "can_do": lambda: can_do_result(frame[frame["label"].isin(sizes.can_do_labels)],
                                        study_frame(dirs["corrective"], models), sizes.corrective),
        "hint_probes": lambda: run_hint_probes(runner, ctx, sizes, models, dirs),
        "behaviour_tiers": lambda: run_behaviour_tiers(runner, ctx),
    }
    for name, fn in analyses.items():
        if name in studies:
            try:
                out["can_do_vs_does_do" if name == "can_do" else name] = fn()
            except StatsInputError as exc:
                log.warning("study %s: analysis not possible: %s", name, exc)
                errors[name] = str(exc)
    ex = Exploratory(**out)
    ablations = rates_by_label(frame, ["tg", *sizes.ablations]) if "ablations" in studies else {}
    record = {"studies": sorted(studies), "sizes": sizes.model_dump(mode="json"), "equal_compute_steps": eqc_steps,
              "models": {k: vars(m) for k, m in sorted(models.items())},
              "run_dirs": {k: str(v) for k, v in dirs.items()},
              "ablations": ablations, "errors": errors, "exploratory": ex.model_dump(mode="json")}
    atomic_write_json(ctx.paths["eval"].parent / "studies" / "studies.json", record)
    return ex
