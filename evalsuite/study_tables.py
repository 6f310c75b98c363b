"""The exploratory studies' tables, built from run directories and episode results (pure; no torch, no docker).

``tgsuite.pipeline.studies`` / ``tiers`` / ``probes`` train and evaluate the study models and call these builders;
everything that turns their run directories into frames, paired rows and study results lives here:

- :func:`study_frame` — scored episodes (highest attempt, ``harness.rundir.load_run``) of the study models, read
  from where each model's episodes are (``ArmEpisodes``: a run directory and the model's arm name there; a model's
  episodes may sit in the main evaluation's run or in an earlier study run, so a frame may read several),
  with study label and training seed; :func:`noisy_frame` / :func:`noisy_result` (noisy feedback),
  :func:`can_do_rows` / :func:`can_do_result` (plain vs corrective answers of the same states),
  :func:`equal_compute_result` (TG vs GRPO at matched FLOPs, from ``CheckpointEval`` rows the caller read from the
  checkpoints' ledgers) and :func:`rates_by_label` (the ablations' Wilson rates);
- :func:`tier_frame` / :func:`tiers_result` (behaviour tiers);
- :func:`probe_frame` / :func:`probe_pairs` / :func:`hint_probes_result` (hint side-effect probes).

A study model is named by its runner arm and given as ``StudyArms``: runner arm → (study label, training seed;
−1 for the SFT base). Episodes of other arms and unscored episodes (infrastructure errors) are left out of every
frame. The statistics themselves are in ``evalsuite.studies`` and ``evalsuite.probes``; nothing here is simulated.
Not covered: reading training checkpoints (the caller builds ``CheckpointEval`` rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from evalsuite.describe import rate_ci
from evalsuite.probes import hint_probe_study
from evalsuite.rates import StatsInputError
from evalsuite.schema import (
    BehaviourTierRow,
    BehaviourTiersResult,
    CanDoResult,
    CanDoRow,
    CheckpointEval,
    EqualComputeResult,
    HintProbeResult,
    LabelRates,
    NoisyFeedbackResult,
    ProbeInfo,
)
from evalsuite.studies import can_do_study, equal_compute_study, noisy_feedback_study
from harness.rundir import load_run

if TYPE_CHECKING:
    from harness.schema import EpisodeResult

StudyArms = Mapping[str, tuple[str, int]]  # runner arm -> (study label, training seed; -1 = the SFT base)
ENDPOINTS = ("behaviour_ok", "code_ok", "joint_ok")
HINT_QUALITY = {"correct": 0.0, "irrelevant": 0.5, "wrong": 1.0}  # the scale of evalsuite.studies.wrong_fraction
PROBE_COLUMNS = ["runner_arm", "label", "seed", "instance_id", "episode_seed", "resolved", "edited", "steps",
                 "feedback_kind"]  # fmt: skip
PROBE_KEY = ["runner_arm", "instance_id", "episode_seed"]


def mix_score(mix: dict[str, float]) -> float:
    """Expected hint-quality score of a training mix on ``evalsuite.studies``' scale (correct 0 … wrong 1)."""
    return float(sum(w * HINT_QUALITY[k] for k, w in mix.items()))


def mix_label(mix: dict[str, float]) -> str:
    """Readable label of a training mix, e.g. ``train:correct=0.75,wrong=0.25``."""
    return "train:" + ",".join(f"{k}={mix[k]:g}" for k in sorted(mix))


@dataclass(frozen=True)
class ArmEpisodes:
    """Where one study model's episodes are: a run directory and the model's arm name in that run (the main
    evaluation names a checkpoint ``tg@s10`` where a study names it ``tg_s10``)."""

    run_dir: Path
    arm: str


Sources = Mapping[str, ArmEpisodes]  # runner arm (the study's name of a model) -> where its episodes are


def whole_run(run_dir: Path, arms: Iterable[str]) -> dict[str, ArmEpisodes]:
    """``arms`` as they are named in ``run_dir`` (a run that evaluated every study model itself)."""
    return {a: ArmEpisodes(Path(run_dir), a) for a in arms}


def study_results(sources: Sources) -> Iterator[tuple[str, EpisodeResult]]:
    """(runner arm, episode) for every episode (highest attempt) of each source; each run directory is read once.

    Raises ``StatsInputError`` when two runner arms name the same arm of the same run (one set of episodes would
    count twice)."""
    by_dir: dict[Path, dict[str, str]] = {}
    for name, src in sources.items():
        names = by_dir.setdefault(Path(src.run_dir), {})
        if src.arm in names:
            raise StatsInputError(f"runner arms {names[src.arm]!r} and {name!r} both read arm {src.arm!r} of "
                                  f"{src.run_dir}; give each study model its own episodes")
        names[src.arm] = name
    for run_dir, names in sorted(by_dir.items()):
        for r in load_run(run_dir).results:
            if r.arm in names:
                yield names[r.arm], r


def study_frame(sources: Sources, arms: StudyArms) -> pd.DataFrame:
    """Scored episodes (highest attempt) of the study models ``arms`` read from ``sources``, with label and
    training seed; ``runner_arm`` is the study's name of the model whatever its name in the run."""
    rows = []
    for name, r in study_results(sources):
        if name not in arms or not r.scored:
            continue
        label, seed = arms[name]
        rows.append({"runner_arm": name, "label": label, "seed": seed, "instance_id": r.instance_id,
                     "repo": r.cluster or r.repo, "episode_seed": r.seed, "behaviour_ok": r.behaviour_ok,
                     "code_ok": r.resolved, "joint_ok": r.joint_ok, "hinted": r.feedback_kind is not None})
    cols = ["runner_arm", "label", "seed", "instance_id", "repo", "episode_seed", *ENDPOINTS, "hinted"]
    return pd.DataFrame(rows, columns=cols)


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


def noisy_result(frame: pd.DataFrame, mixes: dict[str, dict[str, float]]) -> NoisyFeedbackResult:
    """``noisy_feedback_study`` over the mix series, with the kinds relabelled as the training mixes they are."""
    df, display = noisy_frame(frame, mixes)
    res = noisy_feedback_study(df)
    rows = [r.model_copy(update={"feedback_kind": display[(r.arm, r.feedback_kind)]}) for r in res.rows]
    notes = ["hint mixes are TRAINING conditions; every episode was evaluated without hints",
             "each series tg[<mix>] holds the main tg runs (all hints correct) and one mix; the same tg episodes "
             "appear in every series", "'wrong share' is the mix's hint-quality score (correct 0, irrelevant 0.5, "
             "wrong 1), e.g. half correct + half irrelevant = 0.25"]
    return res.model_copy(update={"rows": rows, "notes": [*res.notes, *notes]})


def can_do_rows(plain: pd.DataFrame, corrective: pd.DataFrame) -> list[CanDoRow]:
    """Pair plain and corrective answers on the same (model, instance, episode seed); unpaired states are dropped."""
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
    out = []
    for r in can_do_study(can_do_rows(plain, corrective)):
        sub = corrective[corrective["label"] == r.arm]
        note = (f"corrective prompt {spec!r} was delivered in {int(sub['hinted'].sum())} of {len(sub)} corrective "
                "episodes; where it was not, both answers had the same prompt")
        out.append(r.model_copy(update={"notes": [*r.notes, note]}))
    return out


def successes(frame: pd.DataFrame, runner_arm: str, source: str) -> tuple[dict[str, int], int]:
    """Held-out successes per endpoint of one study model (``source``: its checkpoint, for the error) and its
    number of scored episodes (for a ``CheckpointEval``); a model without scored episodes is an error."""
    sub = frame[frame["runner_arm"] == runner_arm]
    if sub.empty:
        raise ValueError(f"equal compute: no scored held-out episode for {runner_arm} ({source}); "
                         "check <out>/eval/studies/study_eval_plain-* for infra errors and re-run")
    return {e: int(sub[e].sum()) for e in ENDPOINTS}, len(sub)


def equal_compute_result(evals: Sequence[CheckpointEval], steps: int, trials: int) -> EqualComputeResult:
    """TG vs GRPO-with-matched-steps (arm ``grpo_eqc``) at the larger of their final FLOPs (every seed's final
    checkpoint enters); ``evals`` may hold the main ``grpo`` arm too, shown for reference."""
    budget = max(e.flops for e in evals if e.arm in ("tg", "grpo_eqc"))
    res = equal_compute_study(list(evals), treatment="tg", baseline="grpo_eqc", budget=budget)
    notes = [f"grpo_eqc = GRPO trained for {steps} steps, chosen from the runs' ledgers so that its estimated FLOPs "
             "match TG's (rollout + teacher forward + trainer); grpo = the main GRPO arm, shown for reference",
             f"achieved FLOPs ratio tg / grpo_eqc = {res.ratios.get('flops', float('nan')):.3f} (whole steps, "
             "rounded up: GRPO gets at least TG's estimated FLOPs)",
             "FLOPs are estimates: 2·N per forward token, 6·N per trained token, attention term excluded",
             f"tuning trials: {trials} per arm; no arm's hyperparameters were tuned in this pipeline",
             "wall time = the sum of the ledger's phases; peak memory = the training process's peak (CUDA allocated "
             "on GPU, else RSS), which includes earlier stages run in the same process"]
    return res.model_copy(update={"notes": [*res.notes, *notes]})


def label_rates(frame: pd.DataFrame, study: str, labels: Sequence[str], reference: str) -> list[LabelRates]:
    """``LabelRates`` of ``reference`` (first) and each of ``labels``: Wilson rates per endpoint over the label's
    episodes pooled across seeds, with the repository-clustered SE; a label with no episodes is an error."""
    out = []
    for label in [reference, *[x for x in labels if x != reference]]:
        sub = frame[frame["label"] == label]
        if sub.empty:
            raise StatsInputError(f"study {study}: no scored held-out episodes of {label!r}; its evaluation stage "
                                  "produced none (see the run directory's results)")
        out.append(LabelRates(study=study, label=label, reference=label == reference,  # type: ignore[arg-type]
                              seeds=sorted(int(x) for x in sub["seed"].unique()),
                              rates=[rate_ci(sub[e].astype(float), e, clusters=sub["repo"]) for e in ENDPOINTS]))
    return out


def rates_by_label(frame: pd.DataFrame, labels: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per label: Wilson rate per endpoint, episodes pooled over seeds (descriptive)."""
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        sub = frame[frame["label"] == label]
        out[label] = {e: rate_ci(sub[e].astype(float), e).model_dump(mode="json") for e in ENDPOINTS}
        out[label]["seeds"] = sorted(int(s) for s in sub["seed"].unique())
    return out


def tier_frame(run_dir: Path, arms: StudyArms, trained_tier: Mapping[str, str | None],
               tiers: Sequence[str]) -> pd.DataFrame:
    """Scored episodes (highest attempt) of ``arms`` in ``run_dir``: resolved, and per tier checker whether it
    passed (``ok:<tier>``) and had an applicable turn (``applicable:<tier>``); ``trained_tier``: runner arm → the
    tier it was trained for (None: the base). An episode not judged by every tier checker is an error."""
    rows = []
    for r in load_run(run_dir).results:
        if r.arm not in arms or not r.scored:
            continue
        beh = {b.checker: b for b in r.behaviour}
        missing = [t for t in tiers if t not in beh]
        if missing:
            raise ValueError(f"{run_dir}: episode {r.arm}/{r.instance_id}/s{r.seed} was not judged by {missing}; the "
                             "tier task set must list every tier checker in 'behaviour' (re-run stage tiers_tasks)")
        label, seed = arms[r.arm]
        row: dict[str, Any] = {"runner_arm": r.arm, "label": label, "tier_trained": trained_tier[r.arm],
                               "seed": seed, "instance_id": r.instance_id, "repo": r.cluster or r.repo,
                               "resolved": r.resolved}
        for t in tiers:
            row[f"ok:{t}"] = beh[t].ok
            row[f"applicable:{t}"] = any(v != "NA" for v in beh[t].turn_verdicts)
        rows.append(row)
    cols = ["runner_arm", "label", "tier_trained", "seed", "instance_id", "repo", "resolved",
            *[f"ok:{t}" for t in tiers], *[f"applicable:{t}" for t in tiers]]
    return pd.DataFrame(rows, columns=cols)


def tiers_result(frame: pd.DataFrame, *, tiers: Sequence[str], arms: Sequence[str], levels: Mapping[str, str],
                 unseen: str, task_set: str, n_instances: int) -> BehaviourTiersResult:
    """Per tier: the base, then each arm trained for that tier; Wilson rates over the pooled episodes
    (``levels``: tier → format / style / tension; ``unseen``: the held-out template tier, for the notes)."""
    rows = []
    for tier in tiers:
        groups = [("base", frame[frame["label"] == "base"])]
        groups += [(arm, frame[(frame["label"] == arm) & (frame["tier_trained"] == tier)]) for arm in arms]
        for arm, sub in groups:
            appl = sub[sub[f"applicable:{tier}"].astype(bool)]
            rows.append(BehaviourTierRow(
                tier=tier, level=levels.get(tier, "other"), arm=arm,
                seeds=sorted(int(s) for s in sub["seed"].unique() if s >= 0),
                compliance=rate_ci(sub[f"ok:{tier}"].astype(float), "compliance", sub["repo"]),
                compliance_applicable=rate_ci(appl[f"ok:{tier}"].astype(float), "compliance (applicable)",
                                              appl["repo"]),
                resolved=rate_ci(sub["resolved"].astype(float), "resolved", sub["repo"])))
    notes = [f"evaluated on the {n_instances} held-out instances of UNSEEN repositories (template tier {unseen}: "
             "templates and names never used in training), without hints",
             "base = an SFT base whose hinted expert episodes carried one of the three tiers' reminders; grpo/tg "
             "= RL from that base with reward.checker set to the row's tier (format reward, TG gating and hints)",
             "compliance = episodes in which the tier's checker finds no failing turn; an episode with no applicable "
             "turn (e.g. no edit for ask_first@v1 and tool_args@v1) complies vacuously, so the applicable-only rate "
             "is shown too", "rates pool episodes over training seeds (descriptive, exploratory); Wilson 95% CIs"]
    return BehaviourTiersResult(rows=rows, task_set=task_set, n_instances=n_instances, notes=notes)


def probe_frame(sources: Sources, arms: StudyArms) -> pd.DataFrame:
    """Scored episodes (highest attempt) of ``arms`` read from ``sources`` with their edit count and hint kind."""
    rows = [{"runner_arm": name, "label": arms[name][0], "seed": arms[name][1],
             "instance_id": r.instance_id, "episode_seed": r.seed, "resolved": bool(r.resolved),
             "edited": r.metrics.edits >= 1, "steps": r.metrics.steps, "feedback_kind": r.feedback_kind}
            for name, r in study_results(sources) if name in arms and r.scored]  # fmt: skip
    return pd.DataFrame(rows, columns=PROBE_COLUMNS)


def probe_pairs(plain: pd.DataFrame, probed: pd.DataFrame, probe: ProbeInfo) -> tuple[pd.DataFrame, int]:
    """Rows for ``hint_probe_study``: plain and probe episodes of the same (runner arm, task, seed), labelled by
    the checkpoint's study label (seeds pooled). Returns (pairs, pairs dropped for lack of recorded metrics).

    Raises ``StatsInputError`` when a probe episode carries another hint kind than ``probe.kind`` (a run directory
    of another probe version or another study) or the plain run carries any hint."""
    other = probed["feedback_kind"].dropna()
    other = other[other != probe.kind]
    if not other.empty:
        raise StatsInputError(f"probe {probe.name}: probe episodes carry hint kind {other.iloc[0]!r}, expected "
                              f"{probe.kind!r}; the probe run directory is not this probe's (delete it and re-run)")
    if plain["feedback_kind"].notna().any():
        raise StatsInputError(f"probe {probe.name}: the plain run has hinted episodes; pair with a run made "
                              "without feedback")
    both = plain.merge(probed, on=PROBE_KEY, suffixes=("_p", "_q"))
    keep = (both["steps_p"] > 0) & (both["steps_q"] > 0)
    both = both[keep].reset_index(drop=True)
    pairs = pd.DataFrame({
        "probe": probe.name, "arm": both["label_p"],
        "state_id": [f"{i}/train_s{s}/ep{e}" for i, s, e in zip(both["instance_id"], both["seed_p"],
                                                                 both["episode_seed"], strict=True)],
        "delivered": both["feedback_kind_q"] == probe.kind,
        "plain_edited": both["edited_p"].astype(bool), "plain_resolved": both["resolved_p"].astype(bool),
        "probe_edited": both["edited_q"].astype(bool), "probe_resolved": both["resolved_q"].astype(bool),
    })  # fmt: skip
    return pairs, int((~keep).sum())


def hint_probes_result(plain: pd.DataFrame, probed: Mapping[str, pd.DataFrame],
                       probes: Mapping[str, ProbeInfo]) -> list[HintProbeResult]:
    """``hint_probe_study`` over every probe in ``probed`` (name -> its eval's ``probe_frame``; ``probes``: name ->
    the probe as run), each result noting unpaired episodes and pairs dropped for lack of metrics."""
    parts, notes = [], {}
    for name, frame in sorted(probed.items()):
        pairs, dropped = probe_pairs(plain, frame, probes[name])
        parts.append(pairs)
        notes[name] = [f"{len(pairs)} paired states of {len(frame)} scored probe episodes and {len(plain)} scored "
                       "plain episodes (unpaired episodes, e.g. an infra error on one side, are left out)"]
        if dropped:
            notes[name].append(f"{dropped} pair(s) dropped: an episode has no recorded metrics (steps = 0), so "
                               "whether it edited is unknown")
    res = hint_probe_study(pd.concat(parts, ignore_index=True), {n: probes[n] for n in probed})
    return [r.model_copy(update={"notes": [*r.notes, *notes[r.probe.name]]}) for r in res]
