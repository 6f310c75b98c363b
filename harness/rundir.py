"""The one run-directory module (``tgsuite eval --out DIR``): its layout, its attempt rules and its readers.

Layout: ``DIR/manifest.json`` (``RunManifest``, :func:`read_manifest`), ``DIR/results.jsonl`` (derived: written by
``harness.runner.rebuild_results``, read by nobody here), ``DIR/attempts.jsonl`` (append-only: one
``AttemptRecord`` line per ``result.json`` written, by ``harness.attempt_log``; :func:`read_attempt_log`) and
``DIR/episodes/<instance_id>/<arm>/s<seed>/a<attempt>/{result.json, trajectory.jsonl, patch.diff, grade/}``
(:func:`episode_dir`, :func:`read_result`, :func:`read_trajectory`). An episode is one (instance, arm, seed); each
try at it is an attempt directory ``a0``, ``a1``, ...

:func:`load_run` is the one loader of a whole run: the analysis (``evalsuite``) and the report (``reports``) both
read a run through it, so both see the same episodes: the counting attempt of every episode under ``episodes/``.

Attempt rules (used by resume, regrade, ``results.jsonl``, the analysis and the report; nowhere else):

- an attempt directory WITH ``result.json`` is finished; one WITHOUT it crashed mid-attempt (e.g. ``kill -9``);
- the attempt that COUNTS for an episode is its highest-numbered finished attempt (:func:`counting_attempt`);
  lower finished attempts are superseded (counted, never mixed in); an episode with no finished attempt has no
  result;
- resume looks at the highest-numbered attempt directory (:func:`attempt_indices`): crashed → re-run that index
  in place; finished → keep it, or retry it as the next index when the retry policy says so
  (``harness.runner.plan_work``).

This module imports only ``harness.schema`` (no Docker, no torch), so ``evalsuite`` and ``reports`` may use it.
A file that does not parse (``manifest.json``, ``result.json``, ``trajectory.jsonl``) raises :class:`RunDirError`
naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from harness.schema import AttemptRecord, EpisodeResult, Message, RunManifest, Trajectory

MANIFEST_FILE = "manifest.json"
EPISODES_DIR = "episodes"
RESULT_FILE = "result.json"
TRAJECTORY_FILE = "trajectory.jsonl"
ATTEMPT_LOG_FILE = "attempts.jsonl"
_ATTEMPT = re.compile(r"a\d+")


class RunDirError(ValueError):
    """A run directory that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class LatestResults:
    """The counting attempt's result of every episode on disk (sorted by instance, arm, seed) and how many
    finished lower attempts they superseded."""

    results: list[EpisodeResult]
    superseded: int


@dataclass(frozen=True)
class LoadedRun:
    """One run directory read back (:func:`load_run`): its manifest (None when it has no ``manifest.json``), the
    counting result of every episode (sorted by instance, arm, seed) and how many finished lower attempts those
    superseded."""

    path: Path
    manifest: RunManifest | None
    results: tuple[EpisodeResult, ...]
    superseded: int

    def need_manifest(self) -> RunManifest:
        """The manifest; :class:`RunDirError` when the run has none (the analysis needs it: arms, seeds, tasks)."""
        if self.manifest is None:
            raise RunDirError(f"{self.path}: no {MANIFEST_FILE}; is this a run directory written by `tgsuite eval`?")
        return self.manifest


def episode_dir(run_dir: Path, instance_id: str, arm: str, seed: int, attempt: int | None = None) -> Path:
    """``run_dir/episodes/<instance_id>/<arm>/s<seed>`` (one episode), or its attempt ``a<attempt>`` directory."""
    d = Path(run_dir) / EPISODES_DIR / instance_id / arm / f"s{seed}"
    return d if attempt is None else d / f"a{attempt}"


def attempt_indices(episode_dir: Path) -> list[int]:
    """The attempt numbers present under one episode directory (``.../s<seed>``), ascending."""
    d = Path(episode_dir)
    if not d.is_dir():
        return []
    return sorted(int(p.name[1:]) for p in d.iterdir() if p.is_dir() and _ATTEMPT.fullmatch(p.name))


def read_result(attempt_dir: Path) -> EpisodeResult | None:
    """The attempt's ``result.json``; None when the attempt has none (it crashed or is running)."""
    p = Path(attempt_dir) / RESULT_FILE
    if not p.is_file():
        return None
    try:
        return EpisodeResult.model_validate_json(p.read_text(encoding="utf-8", errors="strict"))
    except ValidationError as exc:
        raise RunDirError(f"{p}: not an episode result (not a valid EpisodeResult: {_first_error(exc)}); "
                          f"{_DAMAGED_RESULT_FIX}") from None
    except UnicodeDecodeError as exc:
        raise RunDirError(f"{p}: not an episode result ({exc}); {_DAMAGED_RESULT_FIX}") from None


_DAMAGED_RESULT_FIX = ("fix: restore it from a copy of the run (attempts.jsonl holds its sha256); deleting it re-runs "
                       "the attempt on resume, which `tgsuite analyze` refuses as a re-run when the run keeps an "
                       "attempt log (manifest.json attempt_log)")


def episode_dirs(run_dir: Path) -> Iterator[tuple[str, str, int, Path]]:
    """(instance_id, arm, seed, episode directory) of every episode directory on disk, sorted."""
    for d in sorted((Path(run_dir) / EPISODES_DIR).glob("*/*/s*")):
        if d.is_dir() and d.name[1:].isdigit():
            yield d.parent.parent.name, d.parent.name, int(d.name[1:]), d


def counting_attempt(episode_dir: Path) -> tuple[int, EpisodeResult] | None:
    """(attempt, result) of the attempt that counts (the highest finished one); None when none finished."""
    for a in reversed(attempt_indices(episode_dir)):
        res = read_result(Path(episode_dir) / f"a{a}")
        if res is not None:
            return a, res
    return None


def latest_results(run_dir: Path) -> LatestResults:
    """The counting result of every episode under ``run_dir/episodes`` (rules in the module docstring)."""
    results: list[EpisodeResult] = []
    superseded = 0
    for _, _, _, d in episode_dirs(run_dir):
        got = counting_attempt(d)
        if got is None:
            continue
        results.append(got[1])
        superseded += sum((d / f"a{a}" / RESULT_FILE).is_file() for a in attempt_indices(d) if a < got[0])
    results.sort(key=lambda r: (r.instance_id, r.arm, r.seed))
    return LatestResults(results=results, superseded=superseded)


def load_run(run_dir: str | Path, *, require_manifest: bool = True) -> LoadedRun:
    """Read a run directory: ``manifest.json`` (:func:`read_manifest`) and the counting attempt of every episode
    (:func:`latest_results`). ``require_manifest=False`` (the report) accepts a run without a manifest; a directory
    with neither a manifest nor a finished episode is not a run directory. Errors are :class:`RunDirError`."""
    root = Path(run_dir)
    if not root.is_dir():
        raise RunDirError(f"{root}: run directory does not exist; pass the folder given to `tgsuite eval --out`")
    manifest = read_manifest(root)
    if manifest is None and require_manifest:
        raise RunDirError(f"{root}: no {MANIFEST_FILE}; is this a run directory written by `tgsuite eval`?")
    latest = latest_results(root)
    if manifest is None and not latest.results:
        raise RunDirError(f"{root}: neither {MANIFEST_FILE} nor {EPISODES_DIR}/*/*/s*/a*/{RESULT_FILE} found; is "
                          "this a run dir?")
    return LoadedRun(path=root, manifest=manifest, results=tuple(latest.results), superseded=latest.superseded)


def read_manifest(run_dir: Path) -> RunManifest | None:
    """``run_dir/manifest.json``; None when the run has none. One that does not parse raises :class:`RunDirError`."""
    p = Path(run_dir) / MANIFEST_FILE
    if not p.is_file():
        return None
    try:
        return RunManifest.model_validate_json(p.read_text(encoding="utf-8", errors="strict"))
    except ValidationError as exc:
        raise RunDirError(f"{p}: not a run manifest (not a valid RunManifest: {_first_error(exc)}); fix: use a new "
                          "--out directory, or restore it from a copy") from None
    except UnicodeDecodeError as exc:
        raise RunDirError(f"{p}: not a run manifest ({exc}); fix: use a new --out directory, or restore it from a "
                          "copy") from None


def result_sha256(data: bytes) -> str:
    """The sha256 an ``attempts.jsonl`` line records for a ``result.json`` (of its exact bytes)."""
    return hashlib.sha256(data).hexdigest()


def read_attempt_log(run_dir: Path) -> list[AttemptRecord] | None:
    """The lines of ``run_dir/attempts.jsonl`` in order; None when the run has no log. A line that does not parse
    raises :class:`RunDirError` naming the file and line."""
    p = Path(run_dir) / ATTEMPT_LOG_FILE
    if not p.is_file():
        return None
    out: list[AttemptRecord] = []
    for i, line in enumerate(p.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(AttemptRecord.model_validate_json(line))
        except ValidationError as exc:
            raise RunDirError(f"{p}:{i}: not an attempt record ({_first_error(exc)}); the log is append-only and "
                              "only the runner writes it: fix: restore it from a copy, or evaluate into a new --out"
                              ) from None
    return out


def read_trajectory(path: Path) -> Trajectory:
    """A ``trajectory.jsonl`` as ``harness.runner_episode.write_trajectory`` writes it (a ``{"type": "trajectory"}``
    header line, then one ``{"type": "message"}`` line per message); :class:`RunDirError` naming the file and line
    on bad content."""
    header: dict | None = None
    messages: list[Message] = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            kind = obj.pop("type")
            if kind == "trajectory":
                header = obj
            else:
                messages.append(Message.model_validate(obj))
        except (ValueError, KeyError) as exc:
            raise RunDirError(f"{path}:{i}: not a trajectory event ({exc}); fix: delete the attempt to re-run it") from exc
    if header is None:
        raise RunDirError(f"{path}: no trajectory header line; fix: delete the attempt to re-run it")
    return Trajectory.model_validate({**header, "messages": messages})


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"field {'.'.join(str(x) for x in e['loc']) or '<root>'}: {e['msg']}"
