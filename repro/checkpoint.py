"""Checkpoints and the training manifest.

A checkpoint directory ``checkpoints/step_<n>/`` holds the model in the HF ``save_pretrained`` layout (config.json,
model.safetensors), the tokenizer (``save_pretrained``), ``trainer_state.pt`` (optimizer, LR scheduler, torch and
Python RNG states, step, task-stream cursor, async counters, compute ledger), ``checkpoint.json``
(:class:`CheckpointInfo`, readable without torch) and, for the ``ema`` / ``fixed`` teachers (``repro.teacher``),
``teacher.safetensors`` (the teacher copy's parameters, same names as the student's; not loaded by
``from_pretrained``, which reads ``model.safetensors`` only). With LoRA adapters (``[model.lora]``, ``repro.lora``),
``model.safetensors`` holds the merged weights (base + adapters, plain HF names: evaluation and ``from_pretrained``
read it as any checkpoint) and ``adapter/`` (``adapter_model.safetensors`` + ``adapter_config.json``) the adapters in peft's format;
the optimizer state covers the adapters only, and :func:`load_weights` loads the adapters alone (the base comes from
the config). The directory is written under a temporary name and renamed, so
a crash never leaves a half-written ``step_<n>``.

Exact resume: weights are stored in their training dtype, optimizer moments and RNG states exactly; rollout sampling
seeds are derived from (run seed, item index), so 2 steps + resume + 2 steps equal 4 straight steps (tested) for
synchronous runs. Async runs with a producer lead > 0 are not bit-reproducible even without a resume (see
``repro.async_producer``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from protocols.provenance import utc_now
from repro.lora import has_lora, load_adapter_file, save_pretrained

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.pt"
INFO_FILE = "checkpoint.json"
TEACHER_FILE = "teacher.safetensors"


class Tokenizer(Protocol):
    """What a checkpoint needs of the tokenizer: ``save_pretrained`` (a transformers tokenizer has it)."""

    def save_pretrained(self, save_directory: str | os.PathLike[str]) -> object: ...


class CheckpointInfo(BaseModel):
    """What the pipeline needs to know about a saved checkpoint (ARCHITECTURE §4 "Training run directory")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    step: int
    sha256: str = Field(description="sha256 of model.safetensors")
    config_sha256: str
    arm: str
    seed: int
    compute: dict[str, Any] = Field(default_factory=dict)
    created_at: str = ""


class TrainManifest(BaseModel):
    """``manifest.json`` of a training run directory (ARCHITECTURE §4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    run_dir: str
    created_at: str
    updated_at: str
    argv: list[str] = Field(default_factory=list)
    git_commit: str | None = None
    git_dirty: bool | None = None
    packages: dict[str, str] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict)
    arm: str
    seed: int
    config: dict[str, Any]
    config_sha256: str
    model_params: dict[str, int] = Field(default_factory=dict)
    steps_done: int = 0
    status: str = "running"
    compute: dict[str, Any] = Field(default_factory=dict)
    checkpoints: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)
    protocol_hash: str | None = Field(None, description="sha256 of the frozen protocol this run was trained under")


def write_json_atomic(path: Path, data: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(data)
    os.replace(tmp, path)


def write_manifest(run_dir: Path, manifest: TrainManifest) -> None:
    write_json_atomic(Path(run_dir) / "manifest.json", manifest.model_dump_json(indent=2))


def read_manifest(run_dir: Path) -> TrainManifest:
    return TrainManifest.model_validate_json((Path(run_dir) / "manifest.json").read_text())


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def rng_state(py_rngs: dict[str, random.Random]) -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python_global": random.getstate(),
        "python": {k: r.getstate() for k, r in py_rngs.items()},
    }


def restore_rng(state: dict[str, Any], py_rngs: dict[str, random.Random]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    random.setstate(state["python_global"])
    for k, r in py_rngs.items():
        if k in state["python"]:
            r.setstate(state["python"][k])


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    trainer_state: dict[str, Any],
    config_sha256: str,
    arm: str,
    seed: int,
    compute: dict[str, Any],
    keep: int = 0,
    teacher: torch.nn.Module | None = None,
    write_extra: Callable[[Path], None] | None = None,
) -> CheckpointInfo:
    """Write ``checkpoints/step_<step>/`` atomically and return its :class:`CheckpointInfo` (``teacher``: the EMA /
    fixed teacher copy, written to ``teacher.safetensors``; ``write_extra(tmp_dir)``: more files, written before the
    rename, e.g. the sharded ``dcp/`` folder of ``repro.dcp_checkpoint``)."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_pretrained(model, tmp, safe_serialization=True)  # a LoRA model: merged weights + adapter/ (repro.lora)
    tokenizer.save_pretrained(tmp)
    torch.save(trainer_state, tmp / STATE_FILE)
    if teacher is not None:
        from safetensors.torch import save_model

        save_model(teacher, str(tmp / TEACHER_FILE))
    if write_extra is not None:
        write_extra(tmp)
    info = CheckpointInfo(path=str(final), step=step, sha256=file_sha256(tmp / "model.safetensors"),
                          config_sha256=config_sha256, arm=arm, seed=seed, compute=compute, created_at=utc_now())
    (tmp / INFO_FILE).write_text(info.model_dump_json(indent=2))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    if keep > 0:
        for old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    logger.info("saved checkpoint %s", final)
    return info


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and (p / INFO_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("_", 1)[1]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def read_info(ckpt_dir: Path) -> CheckpointInfo:
    p = Path(ckpt_dir) / INFO_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: {ckpt_dir} is not a tgsuite checkpoint (no {INFO_FILE}); "
                                "pass a checkpoints/step_<n> directory written by `tgsuite train`")
    return CheckpointInfo.model_validate_json(p.read_text())


def load_trainer_state(ckpt_dir: Path) -> dict[str, Any]:
    return torch.load(Path(ckpt_dir) / STATE_FILE, weights_only=False)


def load_teacher(ckpt_dir: Path, teacher: torch.nn.Module) -> None:
    """Load ``teacher.safetensors`` into the teacher copy (exact resume of the ema / fixed teacher)."""
    from safetensors.torch import load_model

    path = Path(ckpt_dir) / TEACHER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the run uses an ema/fixed teacher (guidance.teacher) but this "
                                "checkpoint has no teacher copy; resume from a checkpoint written with the same config")
    device = next(teacher.parameters()).device
    missing, unexpected = load_model(teacher, str(path), strict=False, device=str(device))
    if missing or unexpected:
        raise RuntimeError(f"{path} does not match the teacher: missing {list(missing)[:5]}, unexpected "
                           f"{list(unexpected)[:5]}; resume with the same model preset")


def load_weights(model: torch.nn.Module, ckpt_dir: Path) -> None:
    """Load ``ckpt_dir/model.safetensors`` into ``model`` (a tied ``lm_head`` may be absent); a mismatch raises.
    A model with LoRA adapters gets only the checkpoint's adapters (``adapter_model.safetensors``): its base must
    already be the run's base (rebuilt from the config)."""
    from safetensors.torch import load_file

    if has_lora(model):
        load_adapter_file(model, Path(ckpt_dir))
        return
    state = load_file(str(Path(ckpt_dir) / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    bad_missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if bad_missing or unexpected:
        raise RuntimeError(f"{ckpt_dir}/model.safetensors does not match the model: missing {bad_missing[:5]}, "
                           f"unexpected {unexpected[:5]}; resume with the same model preset")
    if hasattr(model, "tie_weights"):
        model.tie_weights()
