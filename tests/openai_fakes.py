"""A strict OpenAI-style chat-completions server on 127.0.0.1 for tests of ``openai:`` arms.

It checks each request the way OpenAI's API does and answers HTTP 400 naming the problem:

- a ``tool`` message must carry a ``tool_call_id`` naming a call of the assistant message right before it that is
  not answered yet; every call of an assistant message must be answered before the next non-``tool`` message;
- ``tool_calls`` entries need ``id``, ``type: "function"``, a non-empty ``function.name`` and ``function.arguments``
  as a string that parses as JSON (vLLM's and SGLang's chat servers ``json.loads`` it before rendering the chat
  template and answer 400 with the decoder's message when it does not);
- assistant ``content`` holding Qwen ``<tool_call>`` markup is refused (a strict server does not parse it);
- ``messages`` must not be empty and roles must be system/user/assistant/tool.

The answer to a valid request comes from ``respond(body) -> (status, json body or str, delay seconds)``; a delay of
``HANG`` keeps the connection open without answering until the server closes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = float("inf")
Responder = Callable[[dict[str, Any]], tuple[int, Any, float]]


def check_openai_messages(messages: Any) -> str | None:
    """The first OpenAI rule ``messages`` breaks (module docstring), or None."""
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "user", "assistant", "tool"):
            return f"messages[{i}].role {role!r} is invalid"
        if role == "tool":
            tid = m.get("tool_call_id")
            if tid not in pending:
                return f"messages[{i}]: tool_call_id {tid!r} does not answer a call of the preceding assistant message"
            pending.discard(tid)
            continue
        if pending:
            return (f"messages[{i}]: an assistant message with 'tool_calls' must be followed by tool messages "
                    f"responding to each 'tool_call_id' (missing {sorted(pending)})")
        if role == "assistant":
            if "<tool_call>" in (m.get("content") or ""):
                return f"messages[{i}].content holds <tool_call> markup; send calls as tool_calls"
            for j, c in enumerate(m.get("tool_calls") or []):
                fn = c.get("function") or {}
                if not c.get("id") or c.get("type") != "function" or not fn.get("name") or \
                        not isinstance(fn.get("arguments"), str):
                    return f"messages[{i}].tool_calls[{j}] is not a valid function call: {c!r}"
                try:
                    json.loads(fn["arguments"] or "{}")
                except ValueError as exc:  # vLLM: create_error_response(f"{e} {e.__cause__}")
                    return f"{exc} None"
                if c["id"] in pending:
                    return f"messages[{i}].tool_calls[{j}]: duplicate id {c['id']!r}"
                pending.add(c["id"])
        elif not isinstance(m.get("content"), str):
            return f"messages[{i}].content must be a string"
    return None


def completion(content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return {"id": "cmpl", "object": "chat.completion", "usage": {"completion_tokens": 5},
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if tool_calls else "stop"}]}


def call(name: str, arguments: dict[str, Any] | str, cid: str = "srv") -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


class StrictServer:
    """The server (module docstring). ``bodies``: every request body; ``rejected``: the 400 reasons sent."""

    def __init__(self, respond: Responder) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.rejected: list[str] = []
        self._stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                problem = check_openai_messages(body.get("messages"))
                if problem:
                    outer.rejected.append(problem)
                    status, data, delay = 400, {"error": {"message": problem, "type": "invalid_request_error"}}, 0.0
                else:
                    status, data, delay = respond(body)
                if delay == HANG:
                    outer._stop.wait()
                    return
                time.sleep(delay)
                raw = (data if isinstance(data, str) else json.dumps(data)).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
