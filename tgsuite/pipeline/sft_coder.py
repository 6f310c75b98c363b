"""Build the SFT coder a reproduction preset starts RL from: ``tgsuite train sft --preset mini --out DIR --ship DEST``.

The preset's train task set (``task_seed``, ``train_repos`` × ``train_tasks_per_repo``) is made in ``DIR/tasks/train``,
SFT runs with the preset's recipe (``Preset.sft``, from its shipped base) into ``DIR/sft``, and with ``ship`` the model
is exported with its manifest (``repro.sft_ship.export_sft``): the folder ``Preset.sft_start`` names (mini:
``assets/sft/mini``). Re-running reuses the cached expert episodes (``DIR/sft/expert.jsonl``) when the data settings
match.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tgsuite.pipeline.presets import Preset
from tgsuite.pipeline.stages import stage_tasks


def build_sft_coder(preset: Preset, out: Path, *, overrides: dict[str, Any] | None = None, ship: Path | None = None,
                    heldout_run: Path | None = None) -> dict[str, Any]:
    """Train the preset's SFT coder into ``out`` and, with ``ship``, export it there; ``heldout_run`` is a
    ``tgsuite eval`` run of the trained model whose ``aggregate.json`` the manifest records."""
    from repro.sft import SFTConfig, run_sft
    from repro.sft_ship import export_sft

    tasks = stage_tasks(out / "tasks" / "train", "train", preset.train_repos, preset.train_tasks_per_repo,
                        preset.task_seed)
    cfg = SFTConfig(train_tasks=str(out / "tasks" / "train"), heldout_tasks=None, seed=preset.task_seed,
                    workers=preset.workers, **{**preset.sft, **(overrides or {})})
    report = run_sft(cfg, out / "sft")
    record: dict[str, Any] = {"tasks": tasks.model_dump(mode="json", exclude_unset=True),
                              "report": report.model_dump(mode="json")}
    if ship is not None:
        heldout = None
        if heldout_run is not None:
            agg = heldout_run / "aggregate.json"
            if not agg.is_file():
                raise FileNotFoundError(f"--heldout-run {heldout_run}: no aggregate.json there; pass the folder of a "
                                        "finished `tgsuite eval` run of this model")
            heldout = {"run": str(heldout_run), "aggregate": json.loads(agg.read_text())}
        manifest = export_sft(out / "sft", ship, preset=preset.name, train_tasks_sha256=tasks.sha256,
                              task_seed=preset.task_seed, heldout=heldout)
        record["shipped"] = {"path": str(ship), "files": manifest.files}
    return record
