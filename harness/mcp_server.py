"""The MCP server of ``tgsuite serve-tools``: one episode's sandbox tools for any MCP client (the ``mcp`` package,
imported only here and only when serving; install with ``pip install 'tgsuite[mcp]'``).

What the client gets:

- ``tools/list``: the tools ``tgsuite eval`` gives a model (``harness.tools.tool_schemas``: same names, argument
  names, descriptions and JSON schemas; ``finish(message)`` ends the episode and ``message`` is the summary that the
  behaviour checkers judge);
- ``tools/call``: executed in the episode's sandbox through ``harness.mcp_bridge.ToolBridge`` (the agent loop runs
  and records it); arguments are NOT validated here, so a malformed call reaches the loop and is recorded and
  answered as in eval (an error observation, a protocol violation);
- the server's ``instructions``: the system prompt eval's model gets (``harness.agent.system_prompt``) and the
  task's problem statement; the same statement as the prompt ``task`` (``prompts/get``).

Transports: stdio (``serve_stdio``), and streamable HTTP on the loopback interface only (``serve_http``; the
SDK's DNS-rebinding protection is on: only ``127.0.0.1`` / ``localhost`` hosts and origins are accepted).
"""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.agent import system_prompt
from harness.mcp_bridge import ToolBridge
from harness.schema import TaskInstance
from harness.tools import tool_schemas

if TYPE_CHECKING:  # the optional `mcp` extra: imported at run time only inside the functions that serve
    import mcp_types
    import uvicorn
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server

log = logging.getLogger(__name__)

SERVER_NAME = "tgsuite-tools"
TASK_PROMPT = "task"
LOOPBACK = "127.0.0.1"


def instructions_for(instance: TaskInstance) -> str:
    """The server's ``instructions``: eval's system prompt, then the problem statement."""
    return f"{system_prompt()}\n\nThe task (the user's message):\n\n{instance.problem_statement}"


def build_server(bridge: ToolBridge, instance: TaskInstance) -> Server:
    """A low-level ``mcp.server.lowlevel.Server`` serving ``bridge`` (module docstring)."""
    import anyio.to_thread
    import mcp_types as types
    from mcp.server.lowlevel import Server

    tools = [types.Tool(name=s["function"]["name"], description=s["function"]["description"],
                        input_schema=s["function"]["parameters"]) for s in tool_schemas()]
    schemas = {t.name: t.input_schema for t in tools}

    async def list_tools(ctx: ServerRequestContext,
                         params: mcp_types.PaginatedRequestParams | None) -> mcp_types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext,
                        params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        answer = await anyio.to_thread.run_sync(bridge.call, params.name, params.arguments, abandon_on_cancel=True)
        return types.CallToolResult(content=[types.TextContent(text=answer.text)], is_error=answer.error)

    async def list_prompts(ctx: ServerRequestContext,
                           params: mcp_types.PaginatedRequestParams | None) -> mcp_types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[types.Prompt(name=TASK_PROMPT,
                                                             description="the task: the user's problem statement")])

    async def get_prompt(ctx: ServerRequestContext,
                         params: mcp_types.GetPromptRequestParams) -> mcp_types.GetPromptResult:
        if params.name != TASK_PROMPT:
            from mcp.shared.exceptions import MCPError

            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown prompt {params.name!r}; use {TASK_PROMPT!r}")
        text = types.TextContent(text=instance.problem_statement)
        return types.GetPromptResult(description="the task", messages=[types.PromptMessage(role="user", content=text)])

    return Server(SERVER_NAME, instructions=instructions_for(instance), on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_prompts=list_prompts, on_get_prompt=get_prompt,
                  get_tool_input_schema=schemas.get)


def serve_stdio(server: Server) -> None:
    """Serve one client over this process's stdin / stdout until stdin closes (blocks)."""
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


@dataclass
class HttpServer:
    """A streamable-HTTP server running in a thread on ``http://127.0.0.1:<port>/mcp``; ``stop`` ends it."""

    port: int
    thread: threading.Thread
    uvicorn_server: uvicorn.Server

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/mcp"

    def stop(self, timeout: float = 10.0) -> None:
        self.uvicorn_server.should_exit = True
        self.thread.join(timeout)


def serve_http(server: Server, port: int = 0) -> HttpServer:
    """Start serving streamable HTTP on the loopback interface (``port`` 0: a free one); returns once it listens.
    Raises OSError naming the port when it cannot bind."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {LOOPBACK}:{port} ({exc}); fix: choose another --port (0 = any free)") from None
    app = server.streamable_http_app(host=LOOPBACK)
    userver = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=userver.run, kwargs={"sockets": [sock]}, name="mcp-http", daemon=True)
    thread.start()
    while not userver.started and thread.is_alive():
        threading.Event().wait(0.02)
    if not thread.is_alive():
        raise OSError(f"the MCP HTTP server on {LOOPBACK}:{sock.getsockname()[1]} did not start; see the log above")
    return HttpServer(port=sock.getsockname()[1], thread=thread, uvicorn_server=userver)


__all__ = ["HttpServer", "LOOPBACK", "SERVER_NAME", "TASK_PROMPT", "build_server", "instructions_for", "serve_http",
           "serve_stdio"]
