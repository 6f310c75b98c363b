"""The append-only log of finished attempts (``RUN_DIR/attempts.jsonl``): every ``result.json`` the harness writes.

Why: a verdict counts only what was produced once. An attempt's ``result.json`` can be deleted (with its folder)
and the episode resumed, which samples it again as a fresh attempt; the log keeps a line for the first one, so
``evalsuite.integrity.attempt_log`` refuses the re-roll. One ``harness.schema.AttemptRecord`` line per write:

- :func:`write_result` is the one writer of ``result.json`` (``run_attempt`` / ``run_patch_attempt`` of
  ``harness.runner_episode``, so eval, grade and serve-tools; the Ray driver's ``write_attempt``; the regrade):
  it writes the file atomically, then appends its line (``finish``, or ``regrade``: a rewrite of the same
  attempt), under a lock (worker threads), with flush + fsync;
- :func:`reconcile` (on taking a run directory's lock, ``harness.runner.run_lock``) logs, as ``adopted``, a
  finished attempt that has no line at all (a run stopped between the two writes), and refuses to go on when the
  manifest says the run keeps a log that is gone (a new log would hide what the old one recorded).

The manifest records that the run keeps the log (``RunManifest.attempt_log``), so a deleted log is detected.
Not covered: a log edited by hand (lines removed); it is evidence kept next to the results, not a signed record.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from harness.infra import atomic_write_bytes
from harness.rundir import (
    ATTEMPT_LOG_FILE,
    RESULT_FILE,
    attempt_indices,
    episode_dirs,
    read_attempt_log,
    read_manifest,
    read_result,
    result_sha256,
)
from harness.schema import AttemptEvent, AttemptRecord, EpisodeResult
from protocols.provenance import utc_now

_LOCK = threading.Lock()  # one writer process per run directory (its run lock); its worker threads append here


def attempt_record(result: EpisodeResult, data: bytes, event: AttemptEvent) -> AttemptRecord:
    """The log line for ``result`` written as ``data``."""
    return AttemptRecord(run_id=result.run_id, instance_id=result.instance_id, arm=result.arm, seed=result.seed,
                         attempt=result.attempt, event=event, status=result.status,
                         failure_class=result.failure_class, scored=result.scored,
                         result_sha256=result_sha256(data), logged_at=utc_now())


def append_record(run_dir: Path, record: AttemptRecord) -> None:
    """Append one line to ``run_dir/attempts.jsonl`` (created when missing), flushed and fsynced. A line left
    unterminated by a stopped writer is ended first, so each record stays on a line of its own."""
    path = Path(run_dir) / ATTEMPT_LOG_FILE
    line = (record.model_dump_json() + "\n").encode("utf-8")
    with _LOCK, open(path, "a+b") as fh:
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                line = b"\n" + line
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def write_result(run_dir: Path, attempt_dir: Path, result: EpisodeResult, *, event: AttemptEvent = "finish",
                 data: bytes | None = None) -> None:
    """Write ``attempt_dir/result.json`` (``data``, default ``result`` as indented JSON) atomically, then log it."""
    payload = data if data is not None else result.model_dump_json(indent=1).encode("utf-8")
    atomic_write_bytes(Path(attempt_dir) / RESULT_FILE, payload)
    append_record(run_dir, attempt_record(result, payload, event))


def unlogged_attempts(run_dir: Path, logged: list[AttemptRecord]) -> list[Path]:
    """Finished attempt directories under ``run_dir/episodes`` with no line at all in ``logged``."""
    seen = {(r.instance_id, r.arm, r.seed, r.attempt) for r in logged}
    return [d / f"a{a}" for inst, arm, seed, d in episode_dirs(run_dir) for a in attempt_indices(d)
            if (inst, arm, seed, a) not in seen and (d / f"a{a}" / RESULT_FILE).is_file()]


def reconcile(run_dir: Path) -> int:
    """Before a writer resumes ``run_dir`` (module docstring): adopt finished attempts the log lacks; returns how
    many. ValueError when the manifest says the run keeps a log and it is missing while attempts finished."""
    out = Path(run_dir)
    logged = read_attempt_log(out)
    manifest = read_manifest(out)
    missing = unlogged_attempts(out, logged or [])
    if logged is None and manifest is not None and manifest.attempt_log and missing:
        raise ValueError(f"{out / ATTEMPT_LOG_FILE}: missing, but this run keeps a log of its finished attempts "
                         "(manifest.json attempt_log); without it a re-run episode cannot be told from a first one. "
                         "fix: restore the file from a copy of the run, or evaluate into a new --out")
    for adir in missing:
        res = read_result(adir)
        if res is not None:
            append_record(out, attempt_record(res, (adir / RESULT_FILE).read_bytes(), "adopted"))
    return len(missing)


__all__ = ["append_record", "attempt_record", "reconcile", "unlogged_attempts", "write_result"]
