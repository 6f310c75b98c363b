"""Reward signals of one episode, read from its messages and its graded result (pure, torch-free).

These are the inputs of the reward (``repro.rewards`` weights and shapes them); training rollouts, imported logs
and evaluation episodes all go through :func:`episode_signals`, so a signal means the same thing everywhere.
Grading is NOT done here: ``resolved`` and ``code_runs`` come from the hidden-test grade the caller already has.

Definitions (``EpisodeSignals``):

- ``resolved``: the hidden tests passed (``Grade.resolved and Grade.valid``), as graded by the caller.
- ``code_runs`` (:func:`grade_code_runs`): the hidden tests *executed* on the candidate: the patch applied, pytest
  wrote a JUnit report with at least one result, and no requested test errored or went missing (a collection or
  import error shows up as ``error``/``missing``). A failing assertion still counts as running code. ``None`` when
  it is unknown: no grade (e.g. an empty patch was never graded) or an invalid grade (timeout, OOM, a hidden test
  patch that did not apply: the grader's problem, not the candidate's).
- ``edits``: ``edit_file`` calls that succeeded (observation without ``ERROR_PREFIX``), as ``harness.metrics``.
- ``rework`` (:func:`count_rework`): successful edits whose ``old`` text touches a line the agent itself put into
  that file earlier in the episode (by an earlier edit's ``new`` or by creating the file): it undoes or rewrites
  its own work. Lines are compared stripped; blank lines are ignored. Edits of the original code are not rework.
- ``repeated_tool_errors`` (:func:`count_repeated_tool_errors`): failed executions of schema-valid calls whose
  (tool, first line of the error) already occurred earlier in the episode; the first occurrence is free.
- ``invalid_tool_calls`` (:func:`count_invalid_calls`): malformed calls (``ToolCall.valid`` false) plus calls
  written after ``finish`` in the same turn (never executed) -- the agent loop's protocol violations.
- ``feedback`` (:func:`user_feedback`): what the user said, in [-1, 1]: an explicit rating when the log carries
  one; otherwise, from the feedback provider (``harness.feedback``), each draft turn the user rejected
  (``Trajectory.discarded_drafts``, a ``review_draft`` placement; not the agent loop's format retries) is a
  correction and ``feedback = -(1 - 0.5 ** corrections)`` (one correction -0.5, two -0.75, ...). ``None`` when no user feedback
  is recorded (no rating, no rejected draft; hints inserted before a turn is sampled are prompts, not feedback).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from harness.metrics import calls_with_results
from harness.schema import Grade, Message
from harness.tools import ERROR_PREFIX


class EpisodeSignals(BaseModel):
    """The reward signals of one episode (see the module docstring for each definition)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resolved: bool
    code_runs: bool | None = None
    edits: int = Field(0, ge=0)
    rework: int = Field(0, ge=0)
    repeated_tool_errors: int = Field(0, ge=0)
    invalid_tool_calls: int = Field(0, ge=0)
    tests_run: int = Field(0, ge=0)
    feedback: float | None = Field(None, ge=-1.0, le=1.0)


def grade_code_runs(grade: Grade | None) -> bool | None:
    """Whether the hidden tests executed without collection or import errors (module docstring)."""
    if grade is None:
        return None
    if not grade.patch_applied or grade.reason.startswith(("NO_JUNIT", "NO_TESTS_COLLECTED")):
        return False
    if not grade.valid:
        return None
    statuses = [*grade.f2p.values(), *grade.p2p.values()]
    return bool(statuses) and all(s in ("passed", "failed", "skipped") for s in statuses)


def _failed(obs: Message | None) -> bool:
    return obs is None or obs.content.startswith(ERROR_PREFIX)


def _lines(text: str) -> set[str]:
    return {ln.strip() for ln in text.splitlines() if ln.strip()}


def count_rework(messages: Sequence[Message]) -> int:
    """Successful edits that undo or rewrite lines the agent wrote earlier in the same file (module docstring)."""
    own: dict[str, set[str]] = {}
    n = 0
    for call, obs in calls_with_results(list(messages)):
        if not (call.valid and call.name == "edit_file") or _failed(obs):
            continue
        path = str(call.arguments.get("path", ""))
        old, new = str(call.arguments.get("old", "")), str(call.arguments.get("new", ""))
        mine = own.setdefault(path, set())
        if old and _lines(old) & mine:
            n += 1
        mine |= _lines(new) - _lines(old)
    return n


def count_repeated_tool_errors(messages: Sequence[Message]) -> int:
    """Failed executions of valid calls repeating an earlier (tool, first error line) of the episode."""
    seen: set[tuple[str, str]] = set()
    n = 0
    for call, obs in calls_with_results(list(messages)):
        if not call.valid or obs is None or not obs.content.startswith(ERROR_PREFIX):
            continue
        key = (call.name, obs.content.splitlines()[0] if obs.content else "")
        n += key in seen
        seen.add(key)
    return n


def count_invalid_calls(messages: Sequence[Message]) -> int:
    """Malformed calls plus calls after ``finish`` in the same turn (the agent loop's protocol violations)."""
    n = 0
    for m in messages:
        if m.role != "assistant":
            continue
        calls = m.tool_calls
        fin = next((i for i, c in enumerate(calls) if c.valid and c.name == "finish"), len(calls))
        n += sum(not c.valid for c in calls[: fin + 1]) + max(0, len(calls) - fin - 1)
    return n


def user_feedback(*, rating: float | None = None, corrections: int = 0) -> float | None:
    """The feedback signal in [-1, 1] from an explicit ``rating`` or the number of rejected drafts."""
    if rating is not None:
        if not (math.isfinite(rating) and -1.0 <= rating <= 1.0):
            raise ValueError(f"user feedback rating {rating!r} is outside [-1, 1]; rescale it (e.g. thumbs up = 1, "
                             "thumbs down = -1)")
        return float(rating)
    if corrections < 0:
        raise ValueError(f"corrections must be >= 0, got {corrections}")
    return -(1.0 - 0.5**corrections) if corrections else None


def episode_signals(
    messages: Sequence[Message],
    *,
    resolved: bool,
    code_runs: bool | None = None,
    rating: float | None = None,
    corrections: int = 0,
) -> EpisodeSignals:
    """All signals of one episode: counts from ``messages``, outcomes from the caller's grade."""
    pairs = calls_with_results(list(messages))
    return EpisodeSignals(
        resolved=resolved,
        code_runs=code_runs,
        edits=sum(1 for c, o in pairs if c.valid and c.name == "edit_file" and not _failed(o)),
        rework=count_rework(messages),
        repeated_tool_errors=count_repeated_tool_errors(messages),
        invalid_tool_calls=count_invalid_calls(messages),
        tests_run=sum(1 for c, o in pairs if c.valid and c.name == "run_tests" and o is not None),
        feedback=user_feedback(rating=rating, corrections=corrections),
    )
