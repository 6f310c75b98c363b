"""Ship an SFT run as the coder RL starts from, and load a shipped coder only when it is intact.

The paper starts RL from a coder that had extra SFT; the mini reproduction starts from ``assets/sft/mini`` (model
init ``sft:mini``), built from the shipped base by ``tgsuite train sft --preset mini --out DIR --ship
assets/sft/mini``. ``export_sft(sft_dir, dest, ...)`` writes the SFT model in **bfloat16** (HF ``save_pretrained``
layout; training continues from it with float32 master weights, ``repro.precision``), its tokenizer and
``manifest.json`` (:class:`SFTManifest`: the recipe and its hash, the base it started from, the train task set, the
data and tokens, the training wall time, the held-out numbers measured on it if any, the exporting commit, and the
sha256 of every file). :func:`verify_sft` checks every listed file (and that no weight file is unlisted) and raises
``repro.pretrain.ship.BaseIntegrityError`` naming the file and the fix when one was altered.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from protocols.provenance import git_state, utc_now
from repro.pretrain.ship import MANIFEST, BaseIntegrityError, manifest_kind, verify_files, write_shipped

KIND = "tgsuite-sft-coder"


class SFTManifest(BaseModel):
    """``manifest.json`` of a shipped SFT coder: how it was made, what it measured, how to verify it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["tgsuite-sft-coder"] = KIND
    preset: str = Field(description="the reproduction preset whose SFT recipe made it (tgsuite.pipeline.presets)")
    recipe: dict[str, Any] = Field(description="the SFT settings (repro.sft.SFTConfig, task paths left out)")
    recipe_sha256: str
    base: str | None = Field(description="the model init SFT started from (e.g. base:mini)")
    base_manifest_sha256: str | None = Field(description="sha256 of that base's manifest.json, when shipped")
    train_tasks_sha256: str = Field(description="sha256 of the train task set the expert episodes came from")
    task_seed: int
    n_trajectories: int
    train_tokens: int
    train_act_tokens: int
    steps: int
    final_loss: float
    train_tokens_per_s: float
    torch_threads: int
    wall_s: dict[str, float] = Field(description="seconds per SFT phase (expert episodes, tokenize, train)")
    heldout: dict[str, Any] | None = Field(None, description="held-out numbers measured on this model (tgsuite eval "
                                           "aggregate of a run given at export), None when none was given")
    commit: str | None
    created_at: str
    dtype: Literal["bfloat16"] = "bfloat16"
    files: dict[str, str] = Field(description="file name -> sha256 of every file but this manifest")


def recipe_sha256(recipe: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def export_sft(sft_dir: str | Path, dest: str | Path, *, preset: str, train_tasks_sha256: str, task_seed: int,
               heldout: dict[str, Any] | None = None) -> SFTManifest:
    """Write the SFT run ``sft_dir`` (``repro.sft.run_sft``'s folder: ``model/``, ``config.json``,
    ``sft_report.json``) to ``dest`` (replaced) as a bf16 coder with its manifest."""
    from repro.pretrain.ship import init_fingerprint

    src, out = Path(sft_dir), Path(dest)
    for need in ("model/config.json", "config.json", "sft_report.json"):
        if not (src / need).is_file():
            raise BaseIntegrityError(f"{src / need}: missing; export a finished SFT run (`tgsuite train sft ... --out "
                                     f"{src}` writes it).")
    cfg = json.loads((src / "config.json").read_text())
    report = json.loads((src / "sft_report.json").read_text())
    recipe = {k: v for k, v in cfg.items() if k not in ("train_tasks", "heldout_tasks", "dataset", "workers")}
    return write_shipped(src / "model", out, lambda files: SFTManifest(
        preset=preset, recipe=recipe, recipe_sha256=recipe_sha256(recipe), base=cfg.get("init"),
        base_manifest_sha256=init_fingerprint(cfg["init"]).get("base_manifest") if cfg.get("init") else None,
        train_tasks_sha256=train_tasks_sha256, task_seed=task_seed, n_trajectories=report["n_trajectories"],
        train_tokens=report["train_tokens"], train_act_tokens=report["train_act_tokens"], steps=report["steps"],
        final_loss=report["final_loss"], train_tokens_per_s=round(report["train_tokens_per_s"], 1),
        torch_threads=cfg.get("torch_threads", 0), wall_s={k: round(v, 1) for k, v in report["wall_s"].items()},
        heldout=heldout, commit=git_state()[0], created_at=utc_now(),
        files=files))


def is_sft_coder(path: str | Path) -> bool:
    return manifest_kind(path) == KIND


def verify_sft(path: str | Path) -> SFTManifest:
    """The manifest of the shipped coder at ``path`` after checking every file against it."""
    folder = Path(path)
    mpath = folder / MANIFEST
    if not is_sft_coder(folder):
        raise BaseIntegrityError(f"{folder}: no {MANIFEST} of kind {KIND!r}; this is not a shipped SFT coder. Fix: "
                                 "export one with `tgsuite train sft --preset mini --out DIR --ship DEST`.")
    manifest = SFTManifest.model_validate_json(mpath.read_text())
    verify_files(folder, manifest.files, "restore it (`git checkout -- <its folder>`) or rebuild it with `tgsuite "
                 f"train sft --preset {manifest.preset} --out DIR --ship <its folder>`")
    return manifest
