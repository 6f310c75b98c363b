"""``ToolBridge``: an agent in another process (an MCP client, ``tgsuite serve-tools``) as a ``Policy``.

The episode runs exactly as ``tgsuite eval`` runs it: ``harness.runner_episode.run_attempt`` opens the agent's
sandbox, ``harness.agent.run_episode`` drives the turns, the patch is graded in a fresh sandbox and behaviour is
judged on the trajectory. The only difference is who writes the assistant turns: here each turn is ONE tool call
that an MCP client made. The bridge sits between two threads:

- the transport thread calls ``call(name, arguments)`` for each ``tools/call`` request and blocks;
- the episode thread calls ``act(messages, ...)``: it waits for the next pending call and returns it as an
  assistant turn holding that call in the Qwen3 format (``harness.tools.format_tool_call``), so the agent loop
  parses, validates, executes and records it as it would a model's turn (a bad call is a protocol violation,
  answered with the same error observation). At the next ``act`` (or at ``end_episode`` when the episode is
  over) the observations of that turn are handed back to the waiting ``call``.

What reaches the client per call: the ``tool`` message(s) of the turn, then any ``user`` message the loop added
(the finish notice), and when the episode ended on that turn, why. Calls are served one at a time, in arrival order.

Time: the episode's wall clock (``EpisodeLimits.wall_s``) keeps running while the bridge waits for the client; if
no call comes before it is spent, the turn is empty and the loop ends the episode with a ``wall_time`` limit (an
agent outcome, as when a model is too slow). A client that goes away before ``finish`` (``close``, e.g. stdin
closed) is an INFRASTRUCTURE failure (``ClientGone``, kind ``MODEL_ENDPOINT``): it is never scored, and the next
``tgsuite serve-tools`` on the same run directory serves a new attempt.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.interfaces import PolicyOutput
from harness.schema import Message, Trajectory
from harness.tools import ERROR_PREFIX, format_tool_call

BRIDGE_SPEC = "mcp"  # the arm's policy spec in manifest.json (same for stdio and HTTP: the transport is no policy)


class ClientGone(RuntimeError):
    """The MCP client went away (or the server stopped) before the episode ended: an infrastructure failure."""

    kind = "MODEL_ENDPOINT"


@dataclass(frozen=True)
class CallAnswer:
    """What one tool call returns to the client: the observation text, whether it is an error, and whether the
    episode is over (no further call will be executed)."""

    text: str
    error: bool = False
    over: bool = False


def observations_after_last_turn(messages: list[Message]) -> tuple[str, bool]:
    """(text, error) of the messages that answered the last assistant turn: its ``tool`` observations, then any
    ``user`` message the loop added after them (e.g. the finish notice), blank-line separated."""
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    after = [m for m in messages[last + 1:] if m.role in ("tool", "user") and not m.is_hint]
    error = any(m.role == "tool" and m.content.startswith(ERROR_PREFIX) for m in after)
    return "\n\n".join(m.content for m in after), error


def _ending(traj: Trajectory) -> str:
    if traj.finished:
        return "The episode is over (finish was called) and recorded; no further tool calls are executed."
    if traj.limit_hit is not None:
        return (f"The episode is over: its {traj.limit_hit.kind} limit ({traj.limit_hit.limit:g}) was reached; it "
                "is recorded and no further tool calls are executed.")
    return "The episode is over; no further tool calls are executed."


class ToolBridge:
    """A ``harness.interfaces.Policy`` whose turns are the tool calls of an MCP client (module docstring).

    One bridge serves ONE episode. ``name`` is the arm; ``clock`` is injectable for tests.
    """

    spec = BRIDGE_SPEC
    thread_safe = True  # its own lock; the runner need not serialise it

    def __init__(self, name: str, *, wall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not wall_s > 0:
            raise ValueError(f"ToolBridge: wall_s {wall_s!r} must be > 0 seconds")
        self.name = name
        self._wall_s, self._clock = wall_s, clock
        self._cv = threading.Condition()
        self._request: tuple[str, dict[str, Any]] | None = None  # made by the client, not yet taken by the loop
        self._in_turn = False  # taken by the loop; its observations not yet handed back
        self._answer: CallAnswer | None = None
        self._final: CallAnswer | None = None  # the last call's answer, held until ``close`` (episode recorded)
        self._closed: str | None = None  # why no call will be executed any more
        self._over = False
        self._deadline: float | None = None
        self.started = threading.Event()  # set by the first call (or by close): the episode may start
        self.calls = 0  # tool calls the client made

    # -- the transport side ------------------------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any] | None) -> CallAnswer:
        """Execute one tool call in the episode and wait for its observation (blocks; transport thread)."""
        with self._cv:
            while (self._request is not None or self._in_turn) and not self._done():
                self._cv.wait()  # another call is in flight: one at a time
            if self._done():
                return self._refusal()
            self._request, self._answer = (name, dict(arguments or {})), None
            self.calls += 1
            self.started.set()
            self._cv.notify_all()
            while True:
                if self._answer is not None:
                    answer, self._answer = self._answer, None
                    self._cv.notify_all()
                    return answer
                if self._closed is not None or (self._over and self._final is None):
                    break
                self._cv.wait()
            self._request = None  # not taken by the loop (or its turn never ends): withdrawn, not executed
            return self._refusal()

    def close(self, reason: str) -> None:
        """No more calls: the client went away or the server stops. A waiting ``act`` raises ``ClientGone``;
        waiting and later ``call``s are refused with ``reason``. No effect once the episode is over."""
        with self._cv:
            if self._final is not None:  # the episode's last call: answered now that the episode is recorded
                self._answer, self._final = self._final, None
            if self._closed is None:
                self._closed = reason
            self.started.set()
            self._cv.notify_all()

    def _done(self) -> bool:
        return self._over or self._closed is not None

    def _refusal(self) -> CallAnswer:
        why = "the episode is over" if self._over else (self._closed or "the server is stopping")
        return CallAnswer(f"{ERROR_PREFIX}{why}; this call was not executed.", error=True, over=True)

    # -- the episode side (harness.interfaces.Policy) --------------------------------------------------------

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        """The next turn: the next tool call the client makes (module docstring). Raises ``ClientGone`` when the
        client went away; returns an empty turn when the episode's wall clock ran out while waiting."""
        with self._cv:
            if self._in_turn:
                text, error = observations_after_last_turn(messages)
                self._answer, self._in_turn = CallAnswer(text, error), False
                self._cv.notify_all()
            if self._deadline is None:
                self._deadline = self._clock() + self._wall_s
            while self._request is None and self._closed is None:
                left = self._deadline - self._clock()
                if left <= 0:
                    return PolicyOutput(text="", info={"bridge": "no call before the wall-clock limit"})
                self._cv.wait(timeout=left)
            if self._request is None:
                raise ClientGone(f"no further tool call will come ({self._closed}) and the episode has not ended; "
                                 "nothing is scored: serve the episode again to resume")
            name, arguments = self._request
            self._request, self._in_turn = None, True
            return PolicyOutput(text=format_tool_call(name, arguments), info={"bridge": "mcp"})

    def end_episode(self, trajectory: Trajectory) -> None:
        """Called by ``run_attempt`` when the agent loop ended. The last call's answer (its observations and why the
        episode ended) is HELD until ``close``, which the server calls once the episode is graded and recorded: a
        client that ends the connection (stdio: the server process is terminated) right after its last call then
        cannot cut the grading short. Every later call is refused."""
        with self._cv:
            if self._in_turn:
                text, error = observations_after_last_turn(trajectory.messages)
                ending = _ending(trajectory)
                self._final = CallAnswer(f"{text}\n\n{ending}" if text else ending, error, over=True)
                self._in_turn = False
            self._over = True
            self._cv.notify_all()


__all__ = ["BRIDGE_SPEC", "CallAnswer", "ClientGone", "ToolBridge", "observations_after_last_turn"]
