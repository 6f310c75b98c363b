"""The generalization tier of ``tgsuite reproduce``: the SFT start and the main checkpoints of the preset's
``heldout.generalization_seeds`` (every seed when None) on held-out repositories built from templates no training
task uses (``tgsuite.pipeline.heldout``; stage ``eval_generalization``).

It is reported beside the decision (``Exploratory.label_rates``, study ``generalization``: per arm, training seeds
pooled, Wilson 95 % intervals with the repository-clustered SE) and never enters a primary endpoint: the primary
analysis reads only the primary set's runs. Runs only when the preset's held-out design has a generalization tier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.records import EvalOutputs, Paths, SftOutputs, TaskSetOutputs, TrainOutputs
from tgsuite.pipeline.stage_runner import StageRunner, canonical_hash
from tgsuite.pipeline.stages import excluded_tests, stage_eval

if TYPE_CHECKING:
    from evalsuite.schema import LabelRates

STUDY = "generalization"


def runner_arms(ckpts: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Runner arm (``base``, ``<arm>@s<seed>``) -> (label, training seed; -1 for the SFT start)."""
    out: dict[str, tuple[str, int]] = {}
    for name in ckpts:
        arm, _, seed = name.partition("@s")
        out[name] = (arm, int(seed) if seed else -1)
    return out


def evaluate_generalization(runner: StageRunner, paths: Paths, preset: Preset, held_ts: TaskSetOutputs,
                            ckpts: dict[str, str], records: dict[str, SftOutputs | TrainOutputs],
                            protocol: str) -> list[LabelRates]:
    """Evaluate ``ckpts`` (runner arm -> model dir, ``base`` included) on the generalization tier and return its
    rates, the SFT start (``base``) first as the reference; [] when the run has no such tier."""
    from evalsuite.study_tables import label_rates, study_frame, whole_run

    gen = held_ts.generalization
    if gen is None:
        return []
    seeds = preset.heldout.generalization_seeds if preset.heldout is not None else None
    if seeds is not None:
        keep = {k for k, (_, seed) in runner_arms(ckpts).items() if seed in (-1, *seeds)}
        ckpts = {k: v for k, v in ckpts.items() if k in keep}
        records = {k: v for k, v in records.items() if k in keep}
    run_dir = paths.eval / STUDY
    inputs = {"ckpts": {k: canonical_hash(v) for k, v in sorted(records.items())}, "tasks": gen.sha256,
              "protocol": protocol, "eval": preset.eval.stage_inputs(), "which": STUDY}
    runner.run("eval_generalization", inputs,
               lambda: stage_eval(run_dir, paths.generalization_tasks, ckpts, preset, protocol,
                                  excluded_tests(paths.generalization_tasks)), EvalOutputs)
    arms = runner_arms(ckpts)
    frame = study_frame(whole_run(run_dir, arms), arms)
    labels = sorted({label for label, _ in arms.values()} - {"base"})
    return label_rates(frame, STUDY, labels, "base")
