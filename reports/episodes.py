"""What a trajectory page shows of one episode directory (ARCHITECTURE §4): trajectory, patch and grading logs.

Runs themselves are read by ``harness.rundir.load_run`` (the analysis reads them through it too, so the report's
per-episode table and the analysis see the same episodes); the attempt directory of an episode is
``harness.rundir.episode_dir``.

``trajectory.jsonl`` is accepted in the shapes the harness may write: the runner's event format (a
``{"type": "trajectory", …}`` header line, then one ``{"type": "message", …}`` line per message; see
``harness.runner_episode.write_trajectory``), one ``Trajectory`` object on one line, one ``Message`` per line, or
event lines carrying a ``message`` object. A file in none of these shapes is not
guessed at: the trajectory page says it could not be read and why.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from harness.schema import Message, Trajectory

log = logging.getLogger(__name__)

GRADE_LOG_NAMES = ("test_output.txt", "grade.json", "eval.sh", "junit.xml", "exit_code", "status_map.json", "behaviour.json")


@dataclass(frozen=True)
class EpisodeFiles:
    """What an episode directory holds, read for its trajectory page (absent parts are None)."""

    trajectory: Trajectory | None
    messages: tuple[Message, ...]
    trajectory_error: str | None
    patch: str | None
    grade_logs: tuple[tuple[str, str], ...]


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"field {'.'.join(str(x) for x in e['loc']) or '<root>'}: {e['msg']}"


def _parse_trajectory(text: str) -> tuple[Trajectory | None, tuple[Message, ...]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("the file is empty")
    if len(lines) == 1:
        try:
            t = Trajectory.model_validate_json(lines[0])
            return t, tuple(t.messages)
        except ValidationError:
            pass
    header: dict | None = None
    msgs: list[Message] = []
    for i, ln in enumerate(lines, 1):
        obj = json.loads(ln)
        if not isinstance(obj, dict):
            raise ValueError(f"line {i}: not a JSON object")
        kind = obj.pop("type", None)
        if kind == "trajectory":
            header = obj
            continue
        if isinstance(obj.get("message"), dict):
            obj = obj["message"]
        elif "role" not in obj:
            continue  # an event without a message (limit, timing): not a conversation turn
        try:
            msgs.append(Message.model_validate(obj))
        except ValidationError as exc:
            raise ValueError(f"line {i}: not a Message ({_first_error(exc)})") from exc
    if header is not None:
        try:
            t = Trajectory.model_validate({**header, "messages": msgs})
        except ValidationError as exc:
            raise ValueError(f"line 1: not a trajectory header ({_first_error(exc)})") from exc
        return t, tuple(msgs)
    return None, tuple(msgs)


def read_episode_files(ep_dir: Path, *, max_log_chars: int = 200_000) -> EpisodeFiles:
    """Read trajectory, patch and grading logs of one episode directory; absent files are None, never invented."""
    traj: Trajectory | None = None
    msgs: tuple[Message, ...] = ()
    err: str | None = None
    tf = ep_dir / "trajectory.jsonl"
    if tf.is_file():
        try:
            traj, msgs = _parse_trajectory(tf.read_text(encoding="utf-8", errors="replace"))
        except (ValueError, json.JSONDecodeError) as exc:
            err = f"{tf}: could not read the trajectory: {exc}"
            log.warning(err)
    else:
        err = f"{tf}: not found (the episode may have ended before the agent ran, or the run dir was pruned)"
    pf = ep_dir / "patch.diff"
    patch = pf.read_text(encoding="utf-8", errors="replace") if pf.is_file() else None
    logs: list[tuple[str, str]] = []
    gdir = ep_dir / "grade"
    for name in GRADE_LOG_NAMES:
        g = gdir / name
        if g.is_file():
            text = g.read_text(encoding="utf-8", errors="replace")
            if len(text) > max_log_chars:
                text = text[-max_log_chars:]
                text = f"[first {g.stat().st_size - max_log_chars:,} bytes not shown; the end of the log follows]\n" + text
            logs.append((name, text))
    return EpisodeFiles(trajectory=traj, messages=msgs, trajectory_error=err, patch=patch, grade_logs=tuple(logs))
