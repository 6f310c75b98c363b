"""The ``hint_probes`` study of ``tgsuite reproduce --studies hint_probes`` (issue #7, item 3): hint side effects.

Does "explain your change" stop the edits? Does "ask before editing" block a task that was already approved?
For the base and the main checkpoints (``StudySizes.can_do_labels`` × ``StudySizes.seeds``, the same models as the
can-do study) every probe of ``harness.probes.PROBES`` gets one held-out evaluation through the pipeline's eval
stage with the feedback spec ``probe:<name>`` (stage ``study_eval_probe_<name>_v<version>``, run directory
``<out>/eval/studies/study_eval_probe_<name>_v<version>-<hash>``). Its episodes are paired with the plain episodes
the other studies already evaluated (``study_eval_plain``) on (runner arm, task, seed): the runner's episode seed
does not depend on the feedback, so both episodes sample with the same policy stream up to the probe.

Per probe and arm (training seeds pooled; pairs and results built by ``evalsuite.study_tables.probe_pairs`` /
``hint_probes_result``), ``evalsuite.probes.hint_probe_study`` compares the plain and probe
rates of ``edited`` (≥ 1 successful ``edit_file``: ``EpisodeMetrics.edits``), ``resolved`` and ``blocked``
(neither), with paired differences (Tango CI) and exact McNemar p-values; the results go into
``Exploratory.hint_probes``. Episodes without recorded metrics (``EpisodeMetrics.steps == 0``, e.g. a run made
without ``metrics_for``) cannot say whether they edited: their pairs are dropped and the count noted. Nothing is
simulated: every number comes from these runs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from evalsuite.study_tables import ArmEpisodes, hint_probes_result, probe_frame
from harness.probes import PROBES, Probe
from tgsuite.pipeline.stage_runner import StageRunner
from tgsuite.pipeline.study_context import StudyContext, StudyModel, StudySizes, eval_models, study_arms

if TYPE_CHECKING:
    from evalsuite.schema import HintProbeResult, ProbeInfo

log = logging.getLogger(__name__)



def probe_info(p: Probe) -> ProbeInfo:
    """The report's copy of a probe (``evalsuite.schema.ProbeInfo``)."""
    from evalsuite.schema import ProbeInfo

    return ProbeInfo(name=p.name, kind=p.kind, placement=p.placement, text=p.text, asks=p.asks,
                     side_effect=p.side_effect)


def run_hint_probes(runner: StageRunner, ctx: StudyContext, sizes: StudySizes, models: dict[str, StudyModel],
                    episodes: dict[str, dict[str, ArmEpisodes]]) -> list[HintProbeResult]:
    """Evaluate every probe on the can-do models (resumable stages) and analyse them against ``episodes["plain"]``
    (where each model's plain episodes are); adds where each probe's episodes are to ``episodes`` as ``probe_<name>``
    (recorded in studies.json)."""
    chosen = {k: m for k, m in models.items() if m.label in sizes.can_do_labels}
    arms = study_arms(chosen)
    plain = probe_frame(episodes["plain"], arms)
    probed = {}
    for name, p in sorted(PROBES.items()):
        episodes[f"probe_{name}"] = eval_models(runner, ctx, f"study_eval_probe_{name}_v{p.version}", chosen, f"probe:{name}")
        probed[name] = probe_frame(episodes[f"probe_{name}"], arms)
    return hint_probes_result(plain, probed, {n: probe_info(p) for n, p in PROBES.items()})
