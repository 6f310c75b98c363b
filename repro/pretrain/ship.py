"""Ship a pretraining run as a base model, and load a shipped base only when it is intact.

``export_base(run_dir, dest)`` writes the newest checkpoint of a ``tgsuite train pretrain`` run as an HF
``save_pretrained`` directory in **bfloat16** (the weights a preset starts from; training continues from them with
float32 master weights, ``repro.precision``), the tokenizer, and ``manifest.json`` (:class:`BaseManifest`: recipe
hash, step, tokens seen, training wall time, the last probe scores, the exporting commit, and the sha256 of every
file). ``load_base(dest)`` checks every listed file's sha256 (and that no weight file is unlisted) before loading,
and raises :class:`BaseIntegrityError` naming the file and the fix when one was altered; the model it returns is in
float32.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from protocols.provenance import git_state, utc_now
from repro.checkpoint import file_sha256, latest_checkpoint, load_trainer_state
from repro.pretrain.schema import BaseManifest, PretrainConfig, ProbeScores

MANIFEST = "manifest.json"
# the bases shipped in the repository, by name: ``base:<name>`` in a model-init field means this folder
BASES_DIR = Path(__file__).resolve().parents[2] / "assets" / "base"
BASE_PREFIX = "base:"
# the SFT coders shipped in the repository (repro.sft_ship): ``sft:<name>`` means assets/sft/<name>/
SFT_DIR = Path(__file__).resolve().parents[2] / "assets" / "sft"
SFT_PREFIX = "sft:"


class BaseIntegrityError(ValueError):
    """A shipped base whose files do not match its manifest."""


def write_shipped(model_dir: Path, dest: Path, manifest_of: Callable[[dict[str, str]], Any]) -> Any:
    """Write the model in ``model_dir`` to ``dest`` (replaced, atomically) as bf16 safetensors with its tokenizer
    and ``manifest.json``: ``manifest_of(files)`` builds the manifest from every written file's sha256."""
    from transformers import Qwen3ForCausalLM

    from repro.tokenizer import load_tokenizer

    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(torch.bfloat16)
    model.save_pretrained(tmp, safe_serialization=True)
    load_tokenizer(model_dir).save_pretrained(tmp)
    manifest = manifest_of({p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()})
    (tmp / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return manifest


def manifest_kind(path: str | Path) -> str | None:
    """The ``kind`` of the shipped model's ``manifest.json`` at ``path`` (None: no readable manifest)."""
    m = Path(path) / MANIFEST
    try:
        return json.loads(m.read_text()).get("kind") if m.is_file() else None
    except (OSError, ValueError):
        return None


def export_base(run_dir: str | Path, dest: str | Path) -> BaseManifest:
    """Write ``run_dir``'s newest checkpoint to ``dest`` (replaced) as a bf16 base with its manifest."""
    run = Path(run_dir)
    ckpt = latest_checkpoint(run)
    if ckpt is None:
        raise BaseIntegrityError(f"{run}: no checkpoints/step_<n>/ to export; run `tgsuite train pretrain` first.")
    cfg = PretrainConfig.model_validate_json((run / "config.json").read_text())
    state = load_trainer_state(ckpt)
    probes = [ProbeScores.model_validate(p) for p in state["probes"]]
    return write_shipped(ckpt, Path(dest), lambda files: BaseManifest(
        model=cfg.model, recipe_sha256=cfg.recipe_sha256(), step=int(state["step"]), total_steps=cfg.total_steps,
        tokens_seen=int(state["tokens_seen"]), wall_s=round(float(state["wall_s"]), 1),
        probes=probes[-1] if probes else None, commit=git_state()[0], created_at=utc_now(), files=files))


def verify_base(path: str | Path) -> BaseManifest:
    """The manifest of the base at ``path`` after checking every file against it."""
    base = Path(path)
    mpath = base / MANIFEST
    if not mpath.is_file():
        raise BaseIntegrityError(f"{base}: no {MANIFEST}; this is not a shipped base. Fix: export one with "
                                 "`tgsuite train pretrain --out RUN --export-base DIR`.")
    manifest = BaseManifest.model_validate_json(mpath.read_text())
    verify_files(base, manifest.files, "restore the base (e.g. `git checkout -- <its folder>`) or export it again")
    return manifest


def verify_files(folder: Path, files: dict[str, str], fix: str) -> None:
    """Check every file a shipped model's manifest lists against its sha256, and that no weight file is unlisted;
    :class:`BaseIntegrityError` naming the file and ``fix`` otherwise."""
    mpath = folder / MANIFEST
    for name, want in files.items():
        f = folder / name
        if not f.is_file():
            raise BaseIntegrityError(f"{f}: listed in {mpath} but missing. Fix: {fix}.")
        if file_sha256(f) != want:
            raise BaseIntegrityError(f"{f}: sha256 differs from {mpath} (the file was altered). Fix: {fix}.")
    extra = [p.name for p in folder.glob("*.safetensors") if p.name not in files]
    if extra:
        raise BaseIntegrityError(f"{folder}: weight files {extra} are not in {mpath}. Fix: remove them, or {fix}.")


def resolve_init(spec: str | Path) -> Path:
    """The folder a model-init field names: ``base:<name>`` is the shipped base ``assets/base/<name>/`` of this
    checkout, ``sft:<name>`` the shipped SFT coder ``assets/sft/<name>/`` (a clear error when absent), anything else
    a path as given."""
    text = str(spec)
    if text.startswith(SFT_PREFIX):
        name = text[len(SFT_PREFIX):]
        path = SFT_DIR / name
        if not (path / MANIFEST).is_file():
            raise BaseIntegrityError(f"{spec}: no shipped SFT coder {path} ({MANIFEST} missing). Fix: restore it "
                                     f"(`git checkout -- assets/sft/{name}`) or rebuild it: `tgsuite train sft --preset "
                                     f"{name} --out runs/sft-{name} --ship assets/sft/{name}`.")
        return path
    if not text.startswith(BASE_PREFIX):
        return Path(text)
    name = text[len(BASE_PREFIX):]
    path = BASES_DIR / name
    if not (path / MANIFEST).is_file():
        shipped = sorted(p.parent.name for p in BASES_DIR.glob(f"*/{MANIFEST}")) if BASES_DIR.is_dir() else []
        raise BaseIntegrityError(
            f"{spec}: no shipped base {path} ({MANIFEST} missing; shipped: {shipped or 'none'}). Fix: restore it "
            f"(`git checkout -- assets/base/{name}`) or rebuild it: `tgsuite train pretrain --preset {name} --out "
            f"runs/pretrain`, then `tgsuite train pretrain --out runs/pretrain --export-base assets/base/{name}`.")
    return path


def is_base(path: str | Path) -> bool:
    """Whether ``path`` holds a shipped base (a manifest of that kind to verify) rather than a plain model folder or
    a shipped SFT coder (``repro.sft_ship``)."""
    return manifest_kind(path) == "tgsuite-pretrained-base"


def init_fingerprint(spec: str | Path | None) -> dict[str, str]:
    """``{"base_manifest": sha256}`` when ``spec`` names a shipped base (a new base re-runs what was trained from
    the old one), else ``{}``: a stage's cache key gains it."""
    if spec is None:
        return {}
    path = resolve_init(spec)
    return {"base_manifest": file_sha256(path / MANIFEST)} if (path / MANIFEST).is_file() else {}


def load_base(path: str | Path) -> tuple[Any, Any, BaseManifest]:
    """(float32 model, tokenizer, manifest) of a verified shipped base."""
    from transformers import Qwen3ForCausalLM

    from repro.tokenizer import load_tokenizer

    manifest = verify_base(path)
    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.config._attn_implementation = "sdpa"
    return model, load_tokenizer(path), manifest
