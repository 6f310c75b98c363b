"""Rewrite every text of a conversation with one function: contents, raw tool calls and (nested) string arguments.

The one rewriting loop of the SFT augmentations (``repro.sft_augment``: repository and module names;
``repro.sft_identifiers``: the code's own names).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import JsonValue

from harness.schema import Message


def rewrite_messages(messages: Sequence[Message], sub: Callable[[str], str]) -> list[Message]:
    """``messages`` with ``sub`` applied to every text: contents, raw tool calls, string arguments (nested too);
    sampled token ids and log-probs are dropped (they encode the old text)."""
    out = []
    for m in messages:
        d = m.model_dump()
        d["content"] = sub(d["content"])
        for call in d["tool_calls"]:
            call["raw"] = sub(call["raw"]) if call.get("raw") else call.get("raw")
            call["arguments"] = _sub_json(call["arguments"], sub)
        d["token_ids"] = None
        d["logprobs"] = None
        out.append(Message.model_validate(d))
    return out


def _sub_json(value: JsonValue, sub: Callable[[str], str]) -> JsonValue:
    if isinstance(value, str):
        return sub(value)
    if isinstance(value, list):
        return [_sub_json(v, sub) for v in value]
    if isinstance(value, dict):
        return {k: _sub_json(v, sub) for k, v in value.items()}
    return value
