"""The ``hint_probes`` study of ``tgsuite reproduce --studies hint_probes`` (issue #7, item 3): hint side effects.

Does "explain your change" stop the edits? Does "ask before editing" block a task that was already approved?
For the base and the main checkpoints (``StudySizes.can_do_labels`` × ``StudySizes.seeds``, the same models as the
can-do study) every probe of ``harness.probes.PROBES`` gets one held-out evaluation through the pipeline's eval
stage with the feedback spec ``probe:<name>`` (stage ``study_eval_probe_<name>_v<version>``, run directory
``<out>/eval/studies/study_eval_probe_<name>_v<version>-<hash>``). Its episodes are paired with the plain episodes
the other studies already evaluated (``study_eval_plain``) on (runner arm, task, seed): the runner's episode seed
does not depend on the feedback, so both episodes sample with the same policy stream up to the probe.

Per probe and arm (training seeds pooled), ``evalsuite.probes.hint_probe_study`` compares the plain and probe
rates of ``edited`` (≥ 1 successful ``edit_file``: ``EpisodeMetrics.edits``), ``resolved`` and ``blocked``
(neither), with paired differences (Tango CI) and exact McNemar p-values; the results go into
``Exploratory.hint_probes``. Episodes without recorded metrics (``EpisodeMetrics.steps == 0``, e.g. a run made
without ``metrics_for``) cannot say whether they edited: their pairs are dropped and the count noted. Nothing is
simulated: every number comes from these runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from harness.probes import PROBES, Probe
from tgsuite.pipeline.stages import StageRunner
from tgsuite.pipeline.study_context import StudyContext, StudyModel, StudySizes, eval_models

if TYPE_CHECKING:
    from evalsuite.schema import HintProbeResult, ProbeInfo

log = logging.getLogger(__name__)

FRAME_COLUMNS = ["runner_arm", "label", "seed", "instance_id", "episode_seed", "resolved", "edited", "steps",
                 "feedback_kind"]  # fmt: skip
KEY = ["runner_arm", "instance_id", "episode_seed"]


def probe_info(p: Probe) -> ProbeInfo:
    """The report's copy of a probe (``evalsuite.schema.ProbeInfo``)."""
    from evalsuite.schema import ProbeInfo

    return ProbeInfo(name=p.name, kind=p.kind, placement=p.placement, text=p.text, asks=p.asks,
                     side_effect=p.side_effect)


def probe_frame(run_dir: Path, models: dict[str, StudyModel]) -> pd.DataFrame:
    """Scored episodes (highest attempt) of ``models`` in ``run_dir`` with their edit count and hint kind."""
    from evalsuite.outcomes import load_run

    rows = [{"runner_arm": r.arm, "label": models[r.arm].label, "seed": models[r.arm].seed,
             "instance_id": r.instance_id, "episode_seed": r.seed, "resolved": bool(r.resolved),
             "edited": r.metrics.edits >= 1, "steps": r.metrics.steps, "feedback_kind": r.feedback_kind}
            for r in load_run(run_dir).results if r.arm in models and r.scored]  # fmt: skip
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def probe_pairs(plain: pd.DataFrame, probed: pd.DataFrame, probe: Probe) -> tuple[pd.DataFrame, int]:
    """Rows for ``hint_probe_study``: plain and probe episodes of the same (runner arm, task, seed), labelled by
    the checkpoint's study label (seeds pooled). Returns (pairs, pairs dropped for lack of recorded metrics).

    Raises ``StatsInputError`` when a probe episode carries another hint kind than ``probe.kind`` (a run directory
    of another probe version or another study) or the plain run carries any hint."""
    from evalsuite.rates import StatsInputError

    other = probed["feedback_kind"].dropna()
    other = other[other != probe.kind]
    if not other.empty:
        raise StatsInputError(f"probe {probe.name}: probe episodes carry hint kind {other.iloc[0]!r}, expected "
                              f"{probe.kind!r}; the probe run directory is not this probe's (delete it and re-run)")
    if plain["feedback_kind"].notna().any():
        raise StatsInputError(f"probe {probe.name}: the plain run has hinted episodes; pair with a run made "
                              "without feedback")
    both = plain.merge(probed, on=KEY, suffixes=("_p", "_q"))
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


def hint_probes_result(plain: pd.DataFrame, probed: dict[str, pd.DataFrame]) -> list[HintProbeResult]:
    """``hint_probe_study`` over every probe in ``probed`` (name -> its eval's ``probe_frame``), each result
    noting unpaired episodes and pairs dropped for lack of metrics."""
    from evalsuite.probes import hint_probe_study

    parts, notes = [], {}
    for name, frame in sorted(probed.items()):
        pairs, dropped = probe_pairs(plain, frame, PROBES[name])
        parts.append(pairs)
        notes[name] = [f"{len(pairs)} paired states of {len(frame)} scored probe episodes and {len(plain)} scored "
                       "plain episodes (unpaired episodes, e.g. an infra error on one side, are left out)"]
        if dropped:
            notes[name].append(f"{dropped} pair(s) dropped: an episode has no recorded metrics (steps = 0), so "
                               "whether it edited is unknown")
    res = hint_probe_study(pd.concat(parts, ignore_index=True), {n: probe_info(PROBES[n]) for n in probed})
    return [r.model_copy(update={"notes": [*r.notes, *notes[r.probe.name]]}) for r in res]


def run_hint_probes(runner: StageRunner, ctx: StudyContext, sizes: StudySizes, models: dict[str, StudyModel],
                    dirs: dict[str, Path]) -> list[HintProbeResult]:
    """Evaluate every probe on the can-do models (resumable stages) and analyse them against ``dirs["plain"]``;
    adds each probe's run directory to ``dirs`` as ``probe_<name>`` (recorded in studies.json)."""
    chosen = {k: m for k, m in models.items() if m.label in sizes.can_do_labels}
    plain = probe_frame(dirs["plain"], chosen)
    probed = {}
    for name, p in sorted(PROBES.items()):
        dirs[f"probe_{name}"] = eval_models(runner, ctx, f"study_eval_probe_{name}_v{p.version}", chosen, f"probe:{name}")
        probed[name] = probe_frame(dirs[f"probe_{name}"], chosen)
    return hint_probes_result(plain, probed)
