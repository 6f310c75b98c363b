"""``tgsuite serve-tools``: one episode's sandbox tools as an MCP server, so an agent with its own scaffold works a
held-out task and is graded and behaviour-judged exactly as ``tgsuite eval`` grades a model (``harness.mcp_episode``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from harness.sandbox import SANDBOX_KINDS
from tgsuite.commands.common import CLIError

log = logging.getLogger(__name__)

EPILOG = """\
worked example (your agent over stdio: it launches this command as its MCP server, one task per launch):
  tgsuite tasks make-mini --out tasks/mini-heldout --split heldout --repos 2 --tasks-per-repo 2
  tgsuite serve-tools --tasks tasks/mini-heldout --instance lumen-co__jolly-ember-1 --out runs/my-agent \\
      --arm my-agent
  # e.g. in an MCP client's config: {"command": "tgsuite", "args": ["serve-tools", "--tasks", ...]}

Over HTTP (loopback only), e.g. for an agent already running:
  tgsuite serve-tools --tasks tasks/mini-heldout --instance lumen-co__jolly-ember-1 --out runs/my-agent \\
      --transport http --port 8765          # then point the agent at http://127.0.0.1:8765/mcp

What the agent gets: the tools `tgsuite eval` gives a model (list_files, read_file, search, edit_file, run_tests,
ask_user, finish; same schemas), the system prompt and the problem statement as the server's instructions and as
the prompt "task". Each tool call runs in the episode's sandbox (Docker by default). finish(message) ends the
episode: message is the summary for the user that the behaviour checkers judge. The episode starts at the first
tool call; --wall-s counts from then, waits for the agent included.

Output: the run directory `tgsuite eval` writes (arm --arm, policy "mcp"): manifest.json,
episodes/<instance>/<arm>/s<seed>/a<attempt>/{trajectory.jsonl, patch.diff, grade/, result.json}, results.jsonl,
aggregate.json; `tgsuite report RUN_DIR`, `tgsuite analyze` and `tgsuite export inspect RUN_DIR` read it. Serve
each instance (and seed) into the same --out to build a run.

Resume: serve the same episode again. A finished episode is not served again (the command says so and exits 0);
an attempt that crashed re-runs in place; an agent that disconnects before finish is an infrastructure error (not
scored) and is served again as a new attempt, up to --max-attempts. Nothing is written to stdout but the MCP
stream; progress and the result go to stderr.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve-tools", help="serve one episode's sandbox tools over MCP to your own agent; graded like eval",
        description="Serve the sandbox tools of one task instance as an MCP server (stdio, or HTTP on 127.0.0.1), "
                    "record the agent's calls as a trajectory, then grade and judge it exactly as `tgsuite eval`.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tasks", required=True, metavar="DIR", help="task set folder (with tasks.jsonl)")
    p.add_argument("--instance", required=True, metavar="ID", help="the instance_id to serve (one per server)")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory (created, or resumed)")
    p.add_argument("--arm", default="mcp", metavar="NAME", help="arm name of the results (default mcp)")
    p.add_argument("--seed", type=int, default=0, help="the episode's seed index, as eval's --seeds (default 0)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default: the agent launches this command) or streamable HTTP on 127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="with --transport http: the port (default 8765; 0 = free)")
    p.add_argument("--sandbox", choices=SANDBOX_KINDS, default="docker",
                   help="default docker; local runs the task's code on this machine, NOT isolated")
    p.add_argument("--max-turns", type=int, default=30, help="tool calls in the episode (default 30, as eval)")
    p.add_argument("--finish-notice", type=int, default=0, metavar="N",
                   help="when N calls are left, say so in the call's result (eval's user message); default 0 = never")
    p.add_argument("--wall-s", type=float, default=600.0, help="seconds from the first call (default 600)")
    p.add_argument("--grade-timeout", type=float, default=900.0, help="seconds for the hidden tests (default 900)")
    p.add_argument("--disk-mib", type=int, default=2048, metavar="MIB", help="writable space per Docker sandbox")
    p.add_argument("--max-attempts", type=int, default=3, help="attempts per episode on infra errors (default 3)")
    p.add_argument("--run-seed", type=int, default=0, help="mixed into the episode seed (default 0)")
    p.add_argument("--ignore-validation", action="store_true",
                   help="serve an instance that validation.json rejected, and run flaky tests it excluded")
    p.set_defaults(func=run)


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise CLIError("the MCP server needs the `mcp` package; fix: pip install 'tgsuite[mcp]'") from None


def _load(args: argparse.Namespace) -> tuple[Any, dict[str, list[str]]]:
    """The task set's runnable instances (eval's selection: validation applied) and its excluded tests."""
    from tgsuite.commands.eval import load_selection

    ts, excluded = load_selection(argparse.Namespace(tasks=args.tasks, split=None, instance=None, limit=None,
                                                     ignore_validation=args.ignore_validation))
    if args.instance not in ts.by_id():
        raise CLIError(f"--instance {args.instance!r} is not a runnable instance of {args.tasks} (not in tasks.jsonl, "
                       "or rejected by validation.json); fix: an instance_id from tasks.jsonl, or "
                       "--ignore-validation")
    return ts, excluded


def _start_transport(args: argparse.Namespace, server: Any, bridge: Any) -> Any:
    """Start serving in a thread; returns the HTTP server (to stop) or None for stdio."""
    from harness.mcp_server import serve_http, serve_stdio

    if args.transport == "http":
        try:
            http = serve_http(server, args.port)
        except OSError as exc:
            raise CLIError(str(exc)) from None
        print(f"serving {args.instance} at {http.url} (Ctrl-C stops; the episode starts at the first tool call)",
              file=sys.stderr, flush=True)
        return http

    def stdio() -> None:
        try:
            serve_stdio(server)
        except Exception as exc:  # noqa: BLE001 - the transport failed: the episode cannot go on
            log.warning("the stdio transport failed: %s", exc)
        finally:
            bridge.close("the client closed the connection (stdin)")

    threading.Thread(target=stdio, name="mcp-stdio", daemon=True).start()
    return None


def run(args: argparse.Namespace) -> int:
    _require_mcp()
    from harness.interfaces import EpisodeLimits
    from harness.mcp_episode import ServedEpisode, open_episode
    from harness.mcp_server import build_server
    from harness.run_control import RunInterrupted, sandbox_run_id
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxSpec, SandboxUnavailable

    if args.max_attempts < 1 or args.disk_mib < 1 or not 0 <= args.port < 65536:
        raise CLIError("--max-attempts and --disk-mib must be >= 1 and --port in 0..65535")
    ts, excluded = _load(args)
    out = Path(args.out)
    try:
        limits = EpisodeLimits(max_turns=args.max_turns, wall_s=args.wall_s, finish_notice_turns=args.finish_notice)
        settings = ServedEpisode(instance_id=args.instance, arm=args.arm, seed=args.seed, run_seed=args.run_seed,
                                 limits=limits, max_attempts=args.max_attempts, grade_timeout_s=args.grade_timeout,
                                 excluded_tests=excluded, argv=("tgsuite", *sys.argv[1:]))
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    inst = ts.by_id()[args.instance]
    factory = TaskSandboxFactory(ts.model_copy(update={"instances": [inst]}), kind=args.sandbox,
                                 run_id=sandbox_run_id(out), spec=SandboxSpec(disk_bytes=args.disk_mib << 20))
    http = None
    try:
        factory.preflight()
        with open_episode(out, ts, settings, factory=factory) as session:
            if session.plan.job is None:
                return _already(session.plan)
            server = build_server(session.bridge, inst)
            http = _start_transport(args, server, session.bridge)
            result = session.run(on_recorded=lambda _: _aggregate(out))
    except SandboxUnavailable as exc:
        raise CLIError(f"sandbox preflight failed ({exc.kind}): {exc}") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    except RunInterrupted as exc:
        factory.close()
        print(f"tgsuite serve-tools: {exc}; nothing recorded for this attempt. Serve it again to resume.",
              file=sys.stderr, flush=True)
        os._exit(exc.exit_code)  # the transport thread may be blocked reading stdin: do not wait for it
    finally:
        if http is not None:
            http.stop()
        factory.close()
    return _report(out, result, args.max_attempts)


def _already(plan: Any) -> int:
    r = plan.finished
    if plan.out_of_attempts:
        print(f"tgsuite serve-tools: {r.instance_id}/{r.arm}/s{r.seed} used all its attempts (last: {r.status}, "
              f"{r.infra_kind}); fix the environment, then serve it with a larger --max-attempts", file=sys.stderr)
        return 1
    print(f"tgsuite serve-tools: {r.instance_id}/{r.arm}/s{r.seed} is already finished (attempt {r.attempt}: "
          f"{r.status}, resolved={r.resolved}); not served again", file=sys.stderr)
    return 0


def _aggregate(out: Path) -> None:
    """RUN_DIR/aggregate.json, as eval writes it (before the client's last call is answered)."""
    from evalsuite.run_summary import aggregate_run_dir

    aggregate_run_dir(out, config={"source": "mcp"})


def _report(out: Path, result: Any, max_attempts: int) -> int:
    if result is None:
        print("tgsuite serve-tools: the client made no tool call; nothing recorded", file=sys.stderr)
        return 1
    print(f"{result.instance_id}/{result.arm}/s{result.seed} attempt {result.attempt}: {result.status} "
          f"({result.failure_class}); resolved={result.resolved} behaviour_ok={result.behaviour_ok} "
          f"joint_ok={result.joint_ok}\nresults: {out / 'results.jsonl'}  aggregate: {out / 'aggregate.json'}",
          file=sys.stderr)
    if result.failure_class == "infra":
        more = "serve it again to resume" if result.attempt + 1 < max_attempts else "no attempts left"
        print(f"infrastructure error ({result.infra_kind}: {result.error}); not scored; {more}", file=sys.stderr)
        return 1
    return 0
