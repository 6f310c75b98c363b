"""Harness messages → OpenAI chat-completions ``messages`` (the ``openai:`` policy's request body).

Two wire forms (``tool_role``):

- ``"tool"`` (the default, native OpenAI): a past assistant turn goes back as ``{"role": "assistant", "content":
  <its text without <think> and <tool_call> blocks, or null>, "tool_calls": [{"id", "type": "function",
  "function": {"name", "arguments": <JSON string>}}]}`` and each tool observation as ``{"role": "tool",
  "tool_call_id": <the id of the call it answers>, "content": ...}``, directly after that assistant message. Ids
  are ``call_<turn>_<i>`` (turn number, position of the call in the turn), unique in the conversation; the k-th
  observation of turn t answers the k-th call of turn t (the agent loop runs a turn's calls in order and answers
  each one it runs, ``harness.agent``). Calls that were not run (written after ``finish``) are not sent: an
  OpenAI server refuses a ``tool_calls`` entry without its ``tool`` answer. A malformed call is sent with the name
  it was written with (``invalid_tool_call`` when none can be read) and its argument text verbatim, followed by the
  error the harness answered it with, so the model sees its own mistake as OpenAI's own function calling would.
  Argument text that is not valid JSON goes as a JSON string literal (``json_text``): vLLM and SGLang parse every
  past call's ``arguments`` and refuse the whole request (HTTP 400) when it does not parse, which would turn the
  model's mistake into an infrastructure failure; Qwen3's chat template writes a string argument out verbatim.
  Reasoning (``<think>``) of past turns is not sent back (OpenAI has no field for it; Qwen3's chat template drops
  it from past turns too).
- ``"user"`` (for servers without tool support): assistant turns verbatim with their ``<tool_call>`` markup, and
  the observations of a turn as ``<tool_response>`` blocks in one user message (Qwen3's own text protocol).

System, user, hint and nudge messages go as ``{"role", "content"}`` in both forms.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from harness.schema import Message, ToolCall
from harness.tools import parse_tool_calls, visible_text

_NAME = re.compile(r'"name"\s*:\s*"([^"\\]{1,128})"')
INVALID_CALL_NAME = "invalid_tool_call"


def call_id(turn: int, index: int) -> str:
    """The wire id of the ``index``-th call of assistant turn ``turn``."""
    return f"call_{turn}_{index}"


def json_text(text: str) -> str:
    """``text`` when it is valid JSON, else ``text`` as a JSON string literal: ``function.arguments`` must parse,
    because vLLM and SGLang ``json.loads`` every past call's arguments and answer HTTP 400 when they do not."""
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return json.dumps(text, ensure_ascii=False)
    return text


def _arguments(call: ToolCall) -> str:
    """The call's arguments as the JSON string OpenAI's ``function.arguments`` holds; a malformed call's text as
    written (its ``arguments`` part when that much parses, else the whole block), as a JSON string literal when it
    is not valid JSON (``json_text``)."""
    if call.valid:
        return json.dumps(call.arguments, ensure_ascii=False)
    try:
        obj = json.loads(call.raw)
    except json.JSONDecodeError:
        return json_text(call.raw.strip())
    if isinstance(obj, dict) and "arguments" in obj:
        args = obj["arguments"]
        return json_text(args) if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return json_text(call.raw.strip())


def _name(call: ToolCall) -> str:
    if call.name:
        return call.name
    found = _NAME.search(call.raw)
    return found.group(1) if found else INVALID_CALL_NAME


def _answered(messages: list[Message]) -> dict[int, int]:
    """Turn → number of tool observations of that turn."""
    counts: dict[int, int] = {}
    for m in messages:
        if m.role == "tool":
            counts[m.turn] = counts.get(m.turn, 0) + 1
    return counts


def _native(messages: list[Message]) -> list[dict[str, Any]]:
    answered = _answered(messages)
    out: list[dict[str, Any]] = []
    seen: dict[int, int] = {}
    for m in messages:
        if m.role == "assistant":
            calls = (m.tool_calls or parse_tool_calls(m.content))[: answered.get(m.turn, 0)]
            content = visible_text(m.content)
            msg: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
            if calls:
                msg["tool_calls"] = [{"id": call_id(m.turn, i), "type": "function",
                                      "function": {"name": _name(c), "arguments": _arguments(c)}}
                                     for i, c in enumerate(calls)]
            out.append(msg)
        elif m.role == "tool":
            k = seen.get(m.turn, 0)
            seen[m.turn] = k + 1
            out.append({"role": "tool", "tool_call_id": call_id(m.turn, k), "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _text_protocol(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    tool_block = False
    for m in messages:
        if m.role == "tool":
            block = f"<tool_response>\n{m.content}\n</tool_response>"
            if tool_block:
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            tool_block = True
            continue
        out.append({"role": m.role, "content": m.content})
        tool_block = False
    return out


def to_openai_messages(messages: list[Message], tool_role: Literal["tool", "user"] = "tool") -> list[dict[str, Any]]:
    """The ``messages`` of a chat-completions request for this conversation (module docstring)."""
    return _native(messages) if tool_role == "tool" else _text_protocol(messages)


__all__ = ["INVALID_CALL_NAME", "call_id", "json_text", "to_openai_messages"]
