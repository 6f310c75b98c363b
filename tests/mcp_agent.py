"""A small MCP client of our own that lets any ``harness.interfaces.Policy`` work a task through
``tgsuite serve-tools`` (mcp's client API, ``mcp.Client``), as an external agent with its own scaffold would.

The conversation it shows the policy is built from what the server gives every client: the ``task`` prompt (the
problem statement) as the user's message, each tool call's result as a ``tool`` message. Each ``<tool_call>`` in
the policy's turn becomes one ``tools/call``; the agent stops after ``finish`` or when a result says the episode is
over. The policy runs in a worker thread (scripted policies may screen code in sandboxes, which blocks).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from harness.schema import Message
from harness.tools import parse_tool_calls

OVER = "The episode is over"


@dataclass
class PlayLog:
    """What the client saw: the instructions, the tools listed, and (tool, is_error, text) per call."""

    instructions: str | None = None
    tool_names: list[str] = field(default_factory=list)
    calls: list[tuple[str, bool, str]] = field(default_factory=list)


async def play(client: Any, policy: Any, *, max_turns: int = 40, seed: int = 0) -> PlayLog:
    """Let ``policy`` work the served task through ``client`` (an entered ``mcp.Client``)."""
    log = PlayLog(instructions=client.instructions)
    listed = await client.list_tools()
    log.tool_names = [t.name for t in listed.tools]
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": t.input_schema}} for t in listed.tools]
    prompt = await client.get_prompt("task")
    messages = [Message(role="system", content=client.instructions or ""),
                Message(role="user", content=prompt.messages[0].content.text)]
    rng = random.Random(seed)
    for turn in range(max_turns):
        out = await anyio.to_thread.run_sync(lambda: policy.act(list(messages), tools=tools, rng=rng))
        calls = parse_tool_calls(out.text)
        messages.append(Message(role="assistant", content=out.text, turn=turn, tool_calls=calls))
        for call in calls:
            res = await client.call_tool(call.name, call.arguments)
            text = "".join(getattr(c, "text", "") for c in res.content)
            log.calls.append((call.name, res.is_error, text))
            messages.append(Message(role="tool", content=text, turn=turn, tool_name=call.name))
            if call.name == "finish" and not res.is_error or OVER in text:
                return log
    return log
