"""Resumable pipeline stages: skip a finished stage whose inputs are unchanged, time every stage.

A stage is a name, a JSON-able description of its inputs (configuration, upstream output hashes) and a function
that does the work and returns its outputs: a typed record of ``tgsuite.pipeline.records`` (or a JSON-able dict).
Its record, ``<out>/stages/<name>.json``, is written last and atomically; a stage is skipped on re-run when its
record exists, its ``input_hash`` matches and every path it lists under ``outputs["paths"]`` still exists, and its
outputs are then read back through the stage's output model (a record that does not fit raises
``StageRecordError`` naming the file and the field). Changing an input (a config value, an upstream stage's
outputs) re-runs the stage and, through the hashes, every stage that consumes it.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

from protocols.provenance import utc_now

log = logging.getLogger(__name__)

Out = TypeVar("Out", bound=BaseModel)
Outputs = dict[str, Any]  # a stage's outputs as JSON (what its record stores)


def as_json(obj: object) -> object:
    """``json.dumps`` default: a typed record as the JSON it is stored as (``tgsuite.pipeline.records``), anything
    else (a path) as its string."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", exclude_unset=True)
    return str(obj)


def canonical_hash(obj: object) -> str:
    """sha256 of the canonical JSON form of ``obj`` (sorted keys, no whitespace; typed records as stored)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=as_json).encode()
    return hashlib.sha256(data).hexdigest()


def atomic_write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=as_json))
    os.replace(tmp, path)


class StageRecordError(ValueError):
    """A stage record on disk does not fit its stage's output model."""


def read_outputs(path: Path, outputs: Outputs, model: type[Out]) -> Out:
    """``outputs`` (of the record at ``path``) as ``model``; raises ``StageRecordError`` naming the file and field."""
    try:
        return model.model_validate(outputs)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in ("outputs", *err["loc"]))
        raise StageRecordError(
            f"{path}: field {field}: {err['msg']} ({exc.error_count()} problem(s); the stage's outputs are "
            f"{model.__name__}). Re-run the stage (tgsuite reproduce --force {path.stem}) or delete the record"
        ) from None


@dataclass(frozen=True)
class StageRecord:
    name: str
    input_hash: str
    outputs: dict[str, Any]
    started_at: str
    wall_s: float
    skipped: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_hash": self.input_hash,
            "outputs": self.outputs,
            "started_at": self.started_at,
            "wall_s": self.wall_s,
        }


_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar("stage_input_hash", default=None)


def running_input_hash() -> str | None:
    """The input hash of the stage whose function is running now (None outside ``StageRunner.run``): a stage that
    resumes work in a directory of its own (the evaluations) compares it with the hash it left there, and starts
    afresh when the inputs changed instead of keeping results made from other inputs."""
    return _RUNNING.get()


def fresh_or_resumed(run_dir: Path, echo: Callable[[str], None] = log.info) -> None:
    """Empty ``run_dir`` when it holds work made from other stage inputs (its ``.stage_inputs`` stamp differs from
    :func:`running_input_hash`), then stamp it; outside a stage nothing happens (resume as the caller's tool does)."""
    key = running_input_hash()
    if key is None:
        return
    stamp = run_dir / ".stage_inputs"
    if run_dir.exists() and (not stamp.is_file() or stamp.read_text().strip() != key):
        echo(f"{run_dir}: made from other inputs; starting it afresh")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key + "\n")


class StageRunner:
    """Runs stages in order inside ``out_dir``; records and reports the time of each."""

    def __init__(self, out_dir: Path, *, force: frozenset[str] = frozenset(), echo: Callable[[str], None] = print):
        self.out_dir = out_dir
        self.force = force
        self.echo = echo
        self.records: list[StageRecord] = []

    def _record_path(self, name: str) -> Path:
        return self.out_dir / "stages" / f"{name}.json"

    def _load(self, name: str) -> dict[str, Any] | None:
        path = self._record_path(name)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            log.warning("stage record %s is corrupt; the stage will re-run", path)
            return None

    def is_fresh(self, name: str, input_hash: str) -> dict[str, Any] | None:
        rec = self._load(name)
        if rec is None or rec.get("input_hash") != input_hash or name in self.force or "all" in self.force:
            return None
        paths = rec.get("outputs", {}).get("paths", {})
        if any(p is not None and not Path(p).exists() for p in paths.values()):
            return None
        return rec

    @overload
    def run(self, name: str, inputs: object, fn: Callable[[], Out], output: type[Out]) -> Out: ...

    @overload
    def run(self, name: str, inputs: object, fn: Callable[[], Outputs]) -> Outputs: ...

    def run(self, name: str, inputs: object, fn: Callable[[], Out] | Callable[[], Outputs],
            output: type[Out] | None = None) -> Out | Outputs:
        """Run stage ``name`` (or skip it when fresh); ``inputs`` is hashed, ``fn`` does the work. With ``output``
        (the stage's record model) the outputs are validated and returned as that model, also when read back."""
        input_hash = canonical_hash(inputs)
        fresh = self.is_fresh(name, input_hash)
        if fresh is not None:
            typed = None if output is None else read_outputs(self._record_path(name), fresh["outputs"], output)
            rec = StageRecord(name, input_hash, fresh["outputs"], fresh["started_at"], fresh["wall_s"], skipped=True)
            self.records.append(rec)
            self.echo(f"[stage] {name}: up to date (took {fresh['wall_s']:.1f}s when it ran) - skipped")
            return fresh["outputs"] if typed is None else typed
        self.echo(f"[stage] {name}: running ...")
        started = utc_now()
        t0 = time.perf_counter()
        token = _RUNNING.set(input_hash)
        try:
            made = fn()
        finally:
            _RUNNING.reset(token)
        wall = time.perf_counter() - t0
        outputs = made.model_dump(mode="json", exclude_unset=True) if isinstance(made, BaseModel) else made
        # validated before the record is written: a stage never leaves a record its readers refuse
        typed = None if output is None else read_outputs(self._record_path(name), outputs, output)
        rec = StageRecord(name, input_hash, outputs, started, wall)
        atomic_write_json(self._record_path(name), rec.to_json())
        self.records.append(rec)
        self.echo(f"[stage] {name}: done in {wall:.1f}s")
        return outputs if typed is None else typed

    def timings(self) -> dict[str, dict[str, Any]]:
        return {r.name: {"wall_s": round(r.wall_s, 3), "skipped": r.skipped} for r in self.records}
