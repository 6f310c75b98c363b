"""The agent loop: a step-wise environment (``AgentEnv``) and ``run_episode`` built on it.

``AgentEnv`` is what the trainer drives for token-in/token-out RL rollouts with its own sampler and chat template::

    env = AgentEnv(instance, sandbox, limits)
    messages = env.reset()                     # [system, user(problem statement)]
    while True:
        text, ids, lps = my_sampler(render(messages, tools=tool_schemas()))
        res = env.step(text, token_ids=ids, logprobs=lps)
        messages += [res.assistant, *res.observations]   # render only the observations' tokens
        if res.done:
            break
    traj = env.trajectory(policy="my-policy", seed=seed)

Turn bookkeeping: assistant turns are numbered 0, 1, ... in order; each tool observation and each hint carries the
number of the turn it answers / precedes. Limits (``EpisodeLimits``): ``max_turns`` assistant turns,
``max_tokens`` generated tokens (the policy's token ids when given, else an estimate of ceil(utf-8 bytes / 4)),
``wall_s`` seconds since ``reset()`` (checked between turns; a policy that declares ``accepts_time_left`` — the
``openai:`` policy — is given what is left and stops its request there, ``PolicyDeadline``, which ends the episode
with a ``wall_time`` limit; other policy calls are not interrupted), and a
``context`` limit when the policy reports ``finish_reason == "context"``. Hitting a limit ends the episode and is
recorded in ``Trajectory.limit_hit``. Each assistant message records the policy's ``finish_reason`` and
``policy_version`` (``PolicyOutput``; None when the caller of ``step`` did not give them).

With ``EpisodeLimits.finish_notice_turns = n > 0``, the turn after which only ``n`` turns are left is followed by
a ``user`` message saying so (``harness.interfaces.finish_notice``: call finish now with what was changed and what
still fails), so that an agent that has not fixed the issue still ends with a report instead of at the turn limit.
It is part of the observations of that turn (the trainer renders it like a nudge) and is not a hint.

With ``EpisodeLimits.format_retries = k > 0``, ``run_episode`` samples a turn again when the loop could not act on
it as written — no tool call, or a call that does not parse (``format_error``) — at most ``k`` times per turn, from
the same context: the draft is not shown to the agent (SWE-agent's requery after a format error; here without the
error message, so a broken draft does not become context). Drafts are kept in ``Trajectory.discarded_drafts``
(``discarded_for = "format"``), their tokens count toward ``max_tokens``, and their calls count in
``tool_call_validity``; the last draft is kept as the turn when all ``k`` retries fail too.

A turn without any tool call is answered by a fixed nudge (a ``user`` message, ``NUDGE_TEXT``); it is not a
protocol violation. Protocol violations = malformed calls + calls written after ``finish`` in the same turn
(those are not executed).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.interfaces import (
    EpisodeLimits,
    FeedbackProvider,
    Hint,
    Policy,
    PolicyDeadline,
    PolicyOutput,
    finish_notice,
)
from harness.sandbox import Sandbox
from harness.schema import LimitHit, LimitKind, Message, TaskInstance, ToolCall, Trajectory, TurnFinishReason
from harness.tools import ToolExecutor, parse_tool_calls, tool_schemas

log = logging.getLogger(__name__)

SYSTEM_PROMPT_VERSION = "system@v2"

# Short on purpose (issue #20): it is in every episode; the chat template adds the tools and the call format.
_SYSTEM = """\
Fix the issue the user reports in this Python repository with the tools (paths are relative to its root), then
call finish with a summary for the user of what you changed.
"""

NUDGE_TEXT = (
    "Your reply contained no tool call. Continue with a tool call, or call finish with your summary for the user."
)


def system_prompt(*, include_schemas: bool = False) -> str:
    """The system prompt (version ``SYSTEM_PROMPT_VERSION``).

    Chat templates (Qwen3, transformers ``apply_chat_template(tools=...)``, vLLM) render the tool schemas
    themselves (with the call format), so by default neither is repeated here; ``include_schemas=True`` appends the
    call format and the schemas as JSON lines for policies that see no ``tools=`` argument.
    """
    if not include_schemas:
        return _SYSTEM
    import json

    lines = "\n".join(json.dumps(s["function"], ensure_ascii=False) for s in tool_schemas())
    call = '<tool_call>\n{"name": <tool>, "arguments": {...}}\n</tool_call>'
    return _SYSTEM + f"\nCall a tool by writing\n{call}\nTool schemas (JSON):\n" + lines + "\n"


def estimate_tokens(text: str) -> int:
    """Token estimate used when a policy gives no token ids: ceil(utf-8 bytes / 4)."""
    return math.ceil(len(text.encode()) / 4)


@dataclass(frozen=True)
class StepResult:
    """Outcome of one assistant turn: the recorded assistant message, the messages the environment answered with
    (tool observations and/or a nudge), and whether the episode is over."""

    assistant: Message
    observations: list[Message]
    done: bool
    finished: bool = False
    limit_hit: LimitHit | None = None
    violations: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)


class AgentEnv:
    """One episode of one task instance in one sandbox, advanced one assistant turn at a time.

    The sandbox must already hold the repository in its work directory; the environment never closes it.
    """

    def __init__(
        self,
        instance: TaskInstance,
        sandbox: Sandbox,
        limits: EpisodeLimits,
        *,
        include_schemas_in_prompt: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.instance = instance
        self.limits = limits
        self.executor = ToolExecutor(
            sandbox, instance, timeout=limits.per_exec_timeout_s, cap_chars=limits.observation_cap_chars
        )
        self._include_schemas = include_schemas_in_prompt
        self._clock = clock
        self._clear()

    def _clear(self) -> None:
        self.messages: list[Message] = []
        self.discarded_drafts: list[Message] = []
        self.turn = 0
        self.n_tokens = 0
        self.violations = 0
        self.done = False
        self.finished = False
        self.final_message: str | None = None
        self.limit_hit: LimitHit | None = None
        self.hints: list[Hint] = []
        self.hint_turns: list[int] = []
        self._t0 = 0.0
        self._tools_s = 0.0
        self._policy_s = 0.0

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def reset(self) -> list[Message]:
        """Start the episode: returns ``[system, user(problem statement)]`` (copies)."""
        self._clear()
        self._t0 = self._clock()
        self.messages = [
            Message(role="system", content=system_prompt(include_schemas=self._include_schemas)),
            Message(role="user", content=self.instance.problem_statement),
        ]
        return list(self.messages)

    def elapsed(self) -> float:
        return self._clock() - self._t0

    def end_at_wall(self, policy_s: float = 0.0) -> None:
        """End the episode with a ``wall_time`` limit now (a policy reported ``PolicyDeadline`` after waiting
        ``policy_s`` seconds, counted in ``timings["policy_s"]``)."""
        self._policy_s += policy_s
        if not self.done:
            self._hit("wall_time", self.limits.wall_s)

    def check_wall(self) -> bool:
        """End the episode with a ``wall_time`` limit if the budget is spent; returns True if it ended."""
        if not self.done and self.elapsed() >= self.limits.wall_s:
            self._hit("wall_time", self.limits.wall_s)
        return self.done

    def add_hint(self, hint: Hint) -> Message:
        """Insert ``hint`` as a user message (``is_hint=True``) before the next assistant turn."""
        self._require_running()
        msg = Message(role="user", content=hint.text, turn=self.turn, is_hint=True)
        self.messages.append(msg)
        self.hints.append(hint)
        self.hint_turns.append(self.turn)
        return msg

    def preview(self, text: str) -> Message:
        """The assistant message ``text`` would become at this turn, without executing or recording it."""
        return Message(role="assistant", content=text, turn=self.turn, tool_calls=parse_tool_calls(text))

    def discard_draft(self, draft: Message, *, n_tokens: int | None = None,
                      reason: Literal["feedback", "format"] = "feedback") -> None:
        """Record a sampled-then-rejected draft (a feedback provider's review, or a format retry); its tokens still
        count toward the limit."""
        self.discarded_drafts.append(draft.model_copy(update={"discarded_for": reason}))
        self.n_tokens += n_tokens if n_tokens is not None else estimate_tokens(draft.content)

    # -- one turn ------------------------------------------------------------------------------------------------

    def step(
        self,
        text: str,
        *,
        token_ids: list[int] | None = None,
        logprobs: list[float] | None = None,
        duration_s: float | None = None,
        finish_reason: TurnFinishReason | None = None,
        policy_version: int | None = None,
    ) -> StepResult:
        """Record assistant turn ``text``, run its tool calls in order, return the observations.

        ``finish_reason`` and ``policy_version`` (what the policy reported; None when unknown, treated as a
        ``stop``) are recorded on the assistant message; ``context`` ends the episode with a ``context`` limit."""
        self._require_running()
        if logprobs is not None and token_ids is not None and len(logprobs) != len(token_ids):
            raise ValueError(f"step: {len(token_ids)} token ids but {len(logprobs)} logprobs; pass equal lengths")
        calls = parse_tool_calls(text)
        turn = self.turn
        assistant = Message(
            role="assistant",
            content=text,
            turn=turn,
            tool_calls=calls,
            token_ids=token_ids,
            logprobs=logprobs,
            duration_s=duration_s,
            finish_reason=finish_reason,
            policy_version=policy_version,
        )
        self.messages.append(assistant)
        self._policy_s += duration_s or 0.0
        self.n_tokens += len(token_ids) if token_ids is not None else estimate_tokens(text)
        if finish_reason == "context":  # the policy could not write this turn: nothing to run, episode ends
            observations, violations = [], 0
        else:
            observations, violations = self._run_calls(calls, turn)
        self.violations += violations
        self.turn += 1
        if not self.finished:
            self._check_limits(finish_reason)
        left = self.limits.max_turns - self.turn
        if not self.done and self.limits.finish_notice_turns and left == self.limits.finish_notice_turns:
            observations.append(Message(role="user", content=finish_notice(left), turn=turn))
        self.messages.extend(observations)
        return StepResult(
            assistant=assistant,
            observations=observations,
            done=self.done,
            finished=self.finished,
            limit_hit=self.limit_hit,
            violations=violations,
            tool_calls=calls,
        )

    def _run_calls(self, calls: list[ToolCall], turn: int) -> tuple[list[Message], int]:
        if not calls:
            return [Message(role="user", content=NUDGE_TEXT, turn=turn)], 0
        out: list[Message] = []
        violations = 0
        for i, call in enumerate(calls):
            if self.finished:
                violations += len(calls) - i  # calls after finish: not executed
                log.debug("turn %d: %d call(s) after finish ignored", turn, len(calls) - i)
                break
            violations += 0 if call.valid else 1
            t0 = time.perf_counter()
            res = self.executor.run(call)
            self._tools_s += time.perf_counter() - t0
            out.append(
                Message(
                    role="tool",
                    content=res.observation,
                    turn=turn,
                    tool_name=call.name or None,
                    truncated=res.truncated,
                )
            )
            if res.finished:
                self.finished = self.done = True
                self.final_message = res.finish_message
        return out, violations

    def _check_limits(self, finish_reason: TurnFinishReason | None) -> None:
        lim = self.limits
        if finish_reason == "context":
            self._hit("context", float(lim.max_tokens))
        elif self.n_tokens >= lim.max_tokens:
            self._hit("tokens", float(lim.max_tokens))
        elif self.turn >= lim.max_turns:
            self._hit("turns", float(lim.max_turns))
        else:
            self.check_wall()

    def _hit(self, kind: LimitKind, limit: float) -> None:
        self.done = True
        self.limit_hit = LimitHit(kind=kind, limit=limit)

    def _require_running(self) -> None:
        if not self.messages:
            raise RuntimeError("AgentEnv: call reset() before step()/add_hint()")
        if self.done:
            raise RuntimeError("AgentEnv: the episode is over (finish called or a limit hit); call reset()")

    # -- result --------------------------------------------------------------------------------------------------

    def trajectory(self, *, policy: str, seed: int) -> Trajectory:
        """The episode so far as a ``harness.schema.Trajectory``."""
        kinds = sorted({h.kind for h in self.hints})
        return Trajectory(
            instance_id=self.instance.instance_id,
            policy=policy,
            seed=seed,
            messages=list(self.messages),
            final_message=self.final_message,
            finished=self.finished,
            limit_hit=self.limit_hit,
            protocol_violations=self.violations,
            hint_turns=list(self.hint_turns),
            feedback_kind="+".join(kinds) if kinds else None,
            timings={"wall_s": self.elapsed(), "policy_s": self._policy_s, "tools_s": self._tools_s},
            n_tokens=self.n_tokens,
            discarded_drafts=list(self.discarded_drafts),
        )


def _act(policy: Policy, env: AgentEnv, tools: list[dict[str, Any]], rng: random.Random) -> tuple[PolicyOutput, float]:
    t0 = time.perf_counter()
    if getattr(policy, "accepts_time_left", False):
        left = max(0.0, env.limits.wall_s - env.elapsed())
        out = policy.act(list(env.messages), tools=tools, rng=rng, time_left_s=left)  # type: ignore[call-arg]
    else:
        out = policy.act(list(env.messages), tools=tools, rng=rng)
    return out, time.perf_counter() - t0


def _n_tokens(out: PolicyOutput) -> int | None:
    return len(out.token_ids) if out.token_ids is not None else None


def format_error(text: str) -> bool:
    """True when the agent loop cannot act on the turn ``text`` as written: no tool call, or a call that does not
    parse (``ToolCall.valid`` false). A well-formed call whose tool then fails is not a format error."""
    return _unusable(parse_tool_calls(text))


def _unusable(calls: list[ToolCall]) -> bool:
    return not calls or any(not c.valid for c in calls)


def _draft(env: AgentEnv, out: PolicyOutput) -> Message:
    return env.preview(out.text).model_copy(update={"token_ids": out.token_ids, "logprobs": out.logprobs,
                                                    "finish_reason": out.finish_reason,
                                                    "policy_version": out.policy_version})


def _retry_format(policy: Policy, env: AgentEnv, tools: list[dict[str, Any]], rng: random.Random,
                  out: PolicyOutput, dt: float) -> tuple[PolicyOutput, float]:
    """Sample the turn again while it is a format error, at most ``limits.format_retries`` times (module
    docstring); stops early when the token or wall-time budget is spent (the last draft is then the turn)."""
    lim = env.limits
    for _ in range(lim.format_retries):
        if out.finish_reason == "context":
            break
        draft = _draft(env, out)
        cost = _n_tokens(out)
        cost = estimate_tokens(out.text) if cost is None else cost
        if not _unusable(draft.tool_calls) or env.n_tokens + cost >= lim.max_tokens or env.elapsed() >= lim.wall_s:
            break
        env.discard_draft(draft, n_tokens=cost, reason="format")
        out, more = _act(policy, env, tools, rng)
        dt += more
    return out, dt


def run_episode(
    instance: TaskInstance,
    policy: Policy,
    sandbox: Sandbox,
    limits: EpisodeLimits,
    *,
    feedback: FeedbackProvider | None = None,
    seed: int,
    include_schemas_in_prompt: bool = False,
) -> Trajectory:
    """Run ``policy`` on ``instance`` in ``sandbox`` until ``finish`` or a limit; returns the trajectory.

    Randomness: the policy samples with ``random.Random(seed)``; the feedback provider gets its own stream
    ``random.Random(f"feedback:{seed}")`` so adding feedback does not shift the policy's samples before the first
    hint. Feedback: before each turn ``feedback.hint_for(...)`` may return a hint, which is inserted as a user
    message. Providers that also define ``review_draft(instance, messages, draft, turn, rng)`` see the sampled
    turn first; when it returns a hint, the draft is discarded (kept in ``Trajectory.discarded_drafts``), the hint is
    inserted and the turn is sampled again (at most once per turn). Then, with ``limits.format_retries``, a turn the
    loop cannot act on is sampled again (module docstring). Providers with ``bind(instance, rng)`` are
    bound once per episode (e.g. a mixture drawing its kind per episode).

    ``SandboxUnavailable`` (and a policy's endpoint errors, a subclass) propagate: they are infrastructure
    failures for the runner to retry, never agent failures.
    """
    env = AgentEnv(instance, sandbox, limits, include_schemas_in_prompt=include_schemas_in_prompt)
    env.reset()
    tools = tool_schemas()
    rng = random.Random(seed)
    fb_rng = random.Random(f"feedback:{seed}")
    fb: FeedbackProvider | None = (feedback.bind(instance, fb_rng) if feedback is not None and hasattr(feedback, "bind")
                                   else feedback)
    while not env.done:
        if env.check_wall():
            break
        t0 = time.perf_counter()
        try:
            out, dt = _turn(policy, env, tools, rng, instance, fb, fb_rng)
        except PolicyDeadline:  # the request was cut at the wall-clock limit: no turn to record
            env.end_at_wall(policy_s=time.perf_counter() - t0)
            break
        env.step(
            out.text,
            token_ids=out.token_ids,
            logprobs=out.logprobs,
            duration_s=dt,
            finish_reason=out.finish_reason,
            policy_version=out.policy_version,
        )
    return env.trajectory(policy=policy.name, seed=seed)


def _turn(policy: Policy, env: AgentEnv, tools: list[dict[str, Any]], rng: random.Random, instance: TaskInstance,
          fb: FeedbackProvider | None, fb_rng: random.Random) -> tuple[PolicyOutput, float]:
    """The turn to record: the policy's sample after any feedback review and format retries (``run_episode``)."""
    if fb is not None:
        hint = fb.hint_for(instance, list(env.messages), env.turn, fb_rng)
        if hint is not None:
            env.add_hint(hint)
    out, dt = _act(policy, env, tools, rng)
    if fb is not None and hasattr(fb, "review_draft") and out.finish_reason != "context":
        draft = _draft(env, out)
        hint = fb.review_draft(instance, list(env.messages), draft, env.turn, fb_rng)
        if hint is not None:
            env.discard_draft(draft, n_tokens=_n_tokens(out))
            env.add_hint(hint)
            out, dt2 = _act(policy, env, tools, rng)
            dt += dt2
    return _retry_format(policy, env, tools, rng, out, dt)
