"""Resumable pipeline stages: skip a finished stage whose inputs are unchanged, time every stage.

A stage is a name, a JSON-able description of its inputs (configuration, upstream output hashes) and a function
that does the work and returns a JSON-able dict of outputs. Its record, ``<out>/stages/<name>.json``, is written
last and atomically; a stage is skipped on re-run when its record exists, its ``input_hash`` matches and every
path it lists under ``outputs["paths"]`` still exists. Changing an input (a config value, an upstream stage's
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
from typing import Any

from protocols.provenance import utc_now

log = logging.getLogger(__name__)


def canonical_hash(obj: Any) -> str:
    """sha256 of the canonical JSON form of ``obj`` (sorted keys, no whitespace)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(data).hexdigest()


def atomic_write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


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
        if any(not Path(p).exists() for p in paths.values()):
            return None
        return rec

    def run(self, name: str, inputs: Any, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        input_hash = canonical_hash(inputs)
        fresh = self.is_fresh(name, input_hash)
        if fresh is not None:
            rec = StageRecord(name, input_hash, fresh["outputs"], fresh["started_at"], fresh["wall_s"], skipped=True)
            self.records.append(rec)
            self.echo(f"[stage] {name}: up to date (took {fresh['wall_s']:.1f}s when it ran) - skipped")
            return fresh["outputs"]
        self.echo(f"[stage] {name}: running ...")
        started = utc_now()
        t0 = time.perf_counter()
        token = _RUNNING.set(input_hash)
        try:
            outputs = fn()
        finally:
            _RUNNING.reset(token)
        wall = time.perf_counter() - t0
        rec = StageRecord(name, input_hash, outputs, started, wall)
        atomic_write_json(self._record_path(name), rec.to_json())
        self.records.append(rec)
        self.echo(f"[stage] {name}: done in {wall:.1f}s")
        return outputs

    def timings(self) -> dict[str, dict[str, Any]]:
        return {r.name: {"wall_s": round(r.wall_s, 3), "skipped": r.skipped} for r in self.records}
