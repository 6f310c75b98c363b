"""Import OpenAI-style chat-completions JSONL: one conversation per line, tool calls in the OpenAI shape.

One line = one JSON object::

    {"messages": [
        {"role": "system", "content": "..."},
        {"role": "user", "content": "Fix ..."},
        {"role": "assistant", "content": null, "reasoning_content": "...",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "..."}, ...],
     "tools": [...],                                  # optional, not used
     "metadata": {"instance_id": "...", "resolved": true, "reward": 1.0, "user_feedback": 0.5,
                  "infra_error": null, "truncated": false, "model": "..."}}

``user_feedback`` is a rating in [-1, 1], or the thumbs of canary logs: ``"up"`` (read as 1) / ``"down"`` (-1).

Read: roles ``system`` (``developer`` is read as system), ``user``, ``assistant``, ``tool``; content as a string,
``null`` or a list of ``{"type": "text", "text": ...}`` parts; assistant ``reasoning_content`` (rendered as a
``<think>`` block) and ``finish_reason == "length"`` (the turn was cut: ``Message.truncated``); tool calls rendered
into the assistant text in this project's ``<tool_call>`` format (``harness.trajdata.common``). The instance id is
``metadata.instance_id``, else a top-level ``instance_id``, else the importer's ``default_instance_id``; outcome
keys may sit in ``metadata`` or at the top level. Not read: images and audio parts (an error), legacy ``function``
messages (an error), ``tools`` (the call names are kept as logged).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.schema import Message, ToolCall
from harness.trajdata.common import (
    LOG_POLICY,
    ErrorAt,
    RecordError,
    make_record,
    normalise_call,
    render_assistant,
    sha256_file,
)
from harness.trajdata.schema import Provenance, RecordOutcome, TrajectoryRecord

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def _text(content: object, err: ErrorAt, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise err(f"{where}[{j}]", f"content part of type {kind!r} is not text",
                          "keep text parts only ({\"type\": \"text\", \"text\": ...})")
            out.append(part["text"])
        return "".join(out)
    raise err(where, f"content must be a string, null or a list of text parts, got {type(content).__name__}",
              "write the message text as a string")


def _calls(raw: object, err: ErrorAt, where: str) -> list[ToolCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise err(where, "tool_calls must be a list", "write [{\"id\": ..., \"type\": \"function\", \"function\": {...}}]")
    calls = []
    for j, c in enumerate(raw):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(c, dict) or not isinstance(fn, dict):
            raise err(f"{where}[{j}].function", "missing or not an object",
                      "give each call {\"function\": {\"name\": ..., \"arguments\": \"<json>\"}}")
        calls.append(normalise_call(str(fn.get("name") or ""), fn.get("arguments", "{}"), c.get("id")))
    return calls


def _message(m: object, i: int, err: ErrorAt, names: dict[str, str]) -> Message:
    where = f"messages[{i}]"
    if not isinstance(m, dict) or m.get("role") not in _ROLES:
        role = m.get("role") if isinstance(m, dict) else None
        raise err(f"{where}.role", f"role {role!r} is not one of {sorted(_ROLES)}",
                  "use system/user/assistant/tool (legacy 'function' messages: rewrite them as 'tool')")
    role = _ROLES[m["role"]]
    text = _text(m.get("content"), err, f"{where}.content")
    if role == "assistant":
        calls = _calls(m.get("tool_calls"), err, f"{where}.tool_calls")
        names.update({c.call_id: c.name for c in calls if c.call_id})
        content = render_assistant(text, calls, str(m.get("reasoning_content") or ""))
        return Message(role="assistant", content=content, tool_calls=calls, truncated=m.get("finish_reason") == "length")
    if role == "tool":
        name = m.get("name") or names.get(str(m.get("tool_call_id")))
        return Message(role="tool", content=text, tool_name=name)
    return Message(role="system" if role == "system" else "user", content=text)


def _get(obj: dict[str, Any], key: str) -> Any:
    meta = obj.get("metadata")
    return meta.get(key, obj.get(key)) if isinstance(meta, dict) else obj.get(key)


FEEDBACK_WORDS = {"up": 1.0, "down": -1.0}  # thumbs as canary logs write them (evalsuite.canary.schema)


def _outcome(obj: dict[str, Any], err: ErrorAt) -> RecordOutcome:
    vals = {k: _get(obj, k) for k in ("resolved", "reward", "user_feedback", "infra_error", "truncated")}
    word = vals["user_feedback"]
    if isinstance(word, str):
        if word.strip().lower() not in FEEDBACK_WORDS:
            raise err("metadata.user_feedback", f"{word!r} is neither a number nor \"up\"/\"down\"",
                      "write a rating in [-1, 1], or \"up\" (read as 1) / \"down\" (read as -1)")
        vals["user_feedback"] = FEEDBACK_WORDS[word.strip().lower()]
    for key, types in (("resolved", (bool,)), ("reward", (int, float)), ("user_feedback", (int, float))):
        v = vals[key]
        if v is not None and (not isinstance(v, types) or (key != "resolved" and isinstance(v, bool))):
            raise err(f"metadata.{key}", f"{v!r} is not a {'boolean' if key == 'resolved' else 'number'}",
                      f"write {key} as {'true/false' if key == 'resolved' else 'a number'} or leave it out")
    fb = vals["user_feedback"]
    if fb is not None and not -1.0 <= float(fb) <= 1.0:
        raise err("metadata.user_feedback", f"{fb!r} is outside [-1, 1]", "rescale the rating to [-1, 1]")
    trunc = vals["truncated"]
    truncated = (trunc if isinstance(trunc, str) else "truncated in the log") if trunc else None
    if _get(obj, "finish_reason") == "length":
        truncated = "finish_reason = length"
    return RecordOutcome(resolved=vals["resolved"], reward=None if vals["reward"] is None else float(vals["reward"]),
                         feedback_rating=None if fb is None else float(fb),
                         infra_error=str(vals["infra_error"]) if vals["infra_error"] else None, truncated=truncated)


def _record(obj: object, path: Path, n: int, sha: str, default_instance_id: str | None) -> TrajectoryRecord:
    loc = f"line {n}"

    def err(field: str, problem: str, fix: str) -> RecordError:
        return RecordError(path, loc, field, problem, fix)

    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list) or not obj["messages"]:
        raise err("messages", "missing, empty or not a list", "each line needs {\"messages\": [...]} with the chat")
    iid = _get(obj, "instance_id") or default_instance_id
    if not iid:
        raise err("metadata.instance_id", "no instance id", "add metadata.instance_id (the task it solves) or pass "
                  "--instance-id for logs of a single task")
    names: dict[str, str] = {}
    msgs = [_message(m, i, err, names) for i, m in enumerate(obj["messages"])]
    model = _get(obj, "model")
    prov = Provenance(source_format="openai_jsonl", path=str(path), locator=loc, source_id=_get(obj, "id"),
                      source_sha256=sha, model=str(model) if model else None)
    return make_record(msgs, instance_id=str(iid), policy=str(model or LOG_POLICY), prov=prov,
                       outcome=_outcome(obj, err))


def iter_openai_jsonl(path: str | Path, *, default_instance_id: str | None = None
                      ) -> Iterator[TrajectoryRecord | RecordError]:
    """Each line's record, or the ``RecordError`` that explains why the line is not one (never silently skipped)."""
    p = Path(path)
    sha = sha256_file(p)
    with p.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield RecordError(p, f"line {n}", "(line)", f"not valid JSON ({exc.msg} at column {exc.colno})",
                                  "write one JSON object per line")
                continue
            try:
                yield _record(obj, p, n, sha, default_instance_id)
            except RecordError as exc:
                yield exc
