"""Shared pieces of the importers: the record error, tool-call normalisation, turn numbering, record assembly."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.schema import Message, ToolCall, Trajectory
from harness.tools import TOOL_NAMES, format_tool_call, validate_arguments
from harness.trajdata.schema import Provenance, RecordOutcome, TrajectoryRecord

LOG_POLICY = "imported"


class RecordError(ValueError):
    """One bad record: the message names the file, the place in it, the field and the fix."""

    def __init__(self, path: str | Path, locator: str, field: str, problem: str, fix: str) -> None:
        self.path, self.locator, self.field, self.problem = str(path), locator, field, problem
        super().__init__(f"{path} ({locator}): field `{field}`: {problem}; fix: {fix}")


class NoTrajectory(RecordError):
    """An entry of a log that holds no trajectory to import (always counted as a skip, never an error)."""


ErrorAt = Callable[[str, str, str], RecordError]
"""The ``RecordError`` of the record being read, from (field, problem, fix): the importers' ``err``."""


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_id(prov: Provenance) -> str:
    key = json.dumps([prov.source_format, prov.source_sha256, prov.locator], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def normalise_call(name: str, arguments: object, call_id: str | None, *, parse_error: str | None = None) -> ToolCall:
    """A logged tool call as a ``ToolCall``. Arguments may be a JSON string (OpenAI) or an object (Inspect).

    Invalid when the arguments do not parse to a JSON object, when the log itself records a parse error, or when the
    call names one of this project's tools (``harness.tools.TOOL_NAMES``) with arguments its schema rejects. Calls
    of other tools are kept valid (foreign agents have their own tools); ``raw`` keeps the logged text.
    """
    raw_args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    raw = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + raw_args + "}"
    if not name:
        return ToolCall(name="", raw=raw, valid=False, error="the tool call has no function name", call_id=call_id)
    if parse_error:
        return ToolCall(name=name, raw=raw, valid=False, error=f"logged parse error: {parse_error}", call_id=call_id)
    args: object = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCall(name=name, raw=raw, valid=False, error=f"invalid JSON arguments: {exc}", call_id=call_id)
    if not isinstance(args, dict):
        return ToolCall(name=name, raw=raw, valid=False, call_id=call_id,
                        error=f"arguments must be a JSON object, got {type(args).__name__}")
    error = validate_arguments(name, args) if name in TOOL_NAMES else None
    return ToolCall(name=name, arguments=args, raw=raw, valid=error is None, error=error, call_id=call_id)


def render_assistant(text: str, calls: Sequence[ToolCall], reasoning: str = "") -> str:
    """The assistant turn in this project's format: ``<think>`` block, visible text, one ``<tool_call>`` per call."""
    parts = [f"<think>\n{reasoning.strip()}\n</think>"] if reasoning.strip() else []
    if text.strip():
        parts.append(text.strip())
    for c in calls:
        parts.append(format_tool_call(c.name, c.arguments) if c.valid else f"<tool_call>\n{c.raw}\n</tool_call>")
    return "\n".join(parts)


def number_turns(messages: Sequence[Message]) -> list[Message]:
    """Assistant turns numbered 0, 1, ...; a tool message carries the turn it answers, others the turn they precede."""
    out, k = [], 0
    for m in messages:
        if m.role == "assistant":
            out.append(m.model_copy(update={"turn": k}))
            k += 1
        else:
            out.append(m.model_copy(update={"turn": max(0, k - 1) if m.role == "tool" else k}))
    return out


def _final(messages: Sequence[Message]) -> tuple[bool, str | None]:
    for m in reversed(messages):
        if m.role != "assistant":
            continue
        fin = next((c for c in m.tool_calls if c.valid and c.name == "finish"), None)
        if fin is not None:
            return True, str(fin.arguments.get("message", ""))
        break
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant" and not last.tool_calls:
        return True, last.content  # a final answer without tool calls ends a chat normally
    return False, None


def make_record(messages: list[Message], *, instance_id: str, policy: str, prov: Provenance,
                outcome: RecordOutcome) -> TrajectoryRecord:
    """Assemble the record: turns numbered, ``finished`` / ``final_message`` from the last assistant turn."""
    msgs = number_turns(messages)
    finished, final = _final(msgs)
    traj = Trajectory(instance_id=instance_id, policy=policy, seed=0, messages=msgs, finished=finished,
                      final_message=final, n_tokens=0,
                      protocol_violations=sum(not c.valid for m in msgs for c in m.tool_calls))
    return TrajectoryRecord(record_id=record_id(prov), trajectory=traj, outcome=outcome, provenance=prov)
