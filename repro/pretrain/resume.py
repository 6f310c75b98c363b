"""Carry a pretraining run across sessions: export its resume state to one folder, seed a new run from it.

A resume state is what ``repro.pretrain.loop.setup`` needs to continue exactly: ``config.json``, ``tokenizer/`` and
the newest ``checkpoints/step_<n>/`` (fp32 weights, AdamW moments, step, tokens seen, probe history). The world
corpus (``world/``) is not part of it: it is rebuilt deterministically from the config when stage B needs it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from repro.checkpoint import latest_checkpoint

PARTS = ("config.json", "tokenizer")


def _copy_state(src: Path, ckpt: Path, dst: Path) -> Path:
    """Copy the resume state's parts and the checkpoint ``ckpt`` from ``src`` into ``dst``; returns the copy."""
    for part in PARTS:
        target = dst / part
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        (shutil.copytree if (src / part).is_dir() else shutil.copy2)(src / part, target)
    shutil.copytree(ckpt, dst / "checkpoints" / ckpt.name)
    return dst / "checkpoints" / ckpt.name


class ResumeError(ValueError):
    """A folder that is not a resume state, or a run directory that already has its own checkpoints."""


def export_resume(run_dir: str | Path, dest: str | Path) -> Path:
    """Copy ``run_dir``'s resume state into ``dest`` (replacing what was there); returns the checkpoint copied."""
    run, out = Path(run_dir), Path(dest)
    ckpt = latest_checkpoint(run)
    if ckpt is None:
        raise ResumeError(f"{run}: no checkpoints/step_<n>/ to export; run `tgsuite train pretrain` first.")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _copy_state(run, ckpt, tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out / "checkpoints" / ckpt.name


def seed_from(state: str | Path, run_dir: str | Path) -> Path:
    """Start ``run_dir`` from the resume state ``state`` (refused if ``run_dir`` has checkpoints of its own)."""
    src, run = Path(state), Path(run_dir)
    ckpt = latest_checkpoint(src)
    missing = [p for p in PARTS if not (src / p).exists()]
    if ckpt is None or missing:
        raise ResumeError(f"{src} is not a pretraining resume state (missing: {missing or ['checkpoints/step_<n>']}). "
                          "Fix: point --resume-from at a folder written by --export-resume.")
    if latest_checkpoint(run) is not None:
        raise ResumeError(f"{run} already has checkpoints; resume it as it is (drop --resume-from) or use a new --out.")
    run.mkdir(parents=True, exist_ok=True)
    return _copy_state(src, ckpt, run)
