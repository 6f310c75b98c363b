"""The one reader of a run directory's episodes, and its attempt rules (``tgsuite eval --out DIR``).

Layout: ``DIR/episodes/<instance_id>/<arm>/s<seed>/a<attempt>/result.json`` (plus trajectory, patch, grade logs).
An episode is one (instance, arm, seed); each try at it is an attempt directory ``a0``, ``a1``, ...

Attempt rules (used by resume, regrade, ``results.jsonl``, the analysis and the report; nowhere else):

- an attempt directory WITH ``result.json`` is finished; one WITHOUT it crashed mid-attempt (e.g. ``kill -9``);
- the attempt that COUNTS for an episode is its highest-numbered finished attempt (:func:`counting_attempt`);
  lower finished attempts are superseded (counted, never mixed in); an episode with no finished attempt has no
  result;
- resume looks at the highest-numbered attempt directory (:func:`attempt_indices`): crashed → re-run that index
  in place; finished → keep it, or retry it as the next index when the retry policy says so
  (``harness.runner.plan_work``).

This module imports only ``harness.schema`` (no Docker, no torch), so ``evalsuite`` and ``reports`` may use it.
A ``result.json`` that does not parse raises :class:`RunDirError` naming the file and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from harness.schema import EpisodeResult

EPISODES_DIR = "episodes"
RESULT_FILE = "result.json"
_ATTEMPT = re.compile(r"a\d+")


class RunDirError(ValueError):
    """A run directory that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class LatestResults:
    """The counting attempt's result of every episode on disk (sorted by instance, arm, seed) and how many
    finished lower attempts they superseded."""

    results: list[EpisodeResult]
    superseded: int


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
        e = exc.errors()[0]
        field = ".".join(str(x) for x in e["loc"]) or "<root>"
        raise RunDirError(f"{p}: not an episode result (not a valid EpisodeResult: field {field}: {e['msg']}); fix: "
                          f"delete {p} (the attempt then re-runs on resume) or restore it from a copy") from None
    except UnicodeDecodeError as exc:
        raise RunDirError(f"{p}: not an episode result ({exc}); fix: delete {p} (the attempt then re-runs on "
                          "resume) or restore it from a copy") from None


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
