"""Interfaces between the agent loop, policies, feedback providers and the trainer.

The text format is Qwen3's: an assistant turn may start with ``<think>…</think>`` and contains zero or more
``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` blocks. Tool results come back as ``tool`` messages.
The episode ends when the agent calls ``finish(message)``; that message is the summary for the user and is
what behaviour checkers such as ``markdown@v1`` judge.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.schema import Message, TaskInstance, TurnFinishReason


@dataclass(frozen=True)
class PolicyOutput:
    """One assistant turn. ``token_ids``/``logprobs`` are the sampled completion tokens and their behaviour
    log-probabilities under the sampling policy, when the policy can give them (HF models, vLLM).
    ``finish_reason``: ``stop`` (a stop token or a complete answer), ``length`` (``max_new_tokens``) or ``context``
    (the context window is full; the episode ends with a ``context`` limit). ``policy_version``: the version stamp
    of the weights that sampled the turn, from the engine (``RolloutEngine.current_version``); None when the policy
    has no versions (scripted, API models). The agent loop records both on the assistant ``Message``."""

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: TurnFinishReason = "stop"
    policy_version: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


class PolicyDeadline(Exception):
    """Raised by a policy that was given ``time_left_s`` (it declares ``accepts_time_left = True``) when the
    episode's wall-clock budget ran out before the turn was written: the agent loop ends the episode with a
    ``wall_time`` limit, as it would had the turn come back after the limit."""


@runtime_checkable
class Policy(Protocol):
    """Anything that writes the next assistant turn from the conversation so far. A policy may also declare
    ``accepts_time_left = True`` and take ``act(..., time_left_s=...)`` (``PolicyDeadline``)."""

    name: str

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput: ...


@dataclass(frozen=True)
class EpisodeLimits:
    """Per-episode limits; every one must be positive (``ValueError`` naming the field and the fix otherwise: a
    zero or negative limit would end every episode as an agent failure)."""

    max_turns: int = 30
    max_tokens: int = 32_768
    wall_s: float = 600.0
    per_exec_timeout_s: float = 60.0
    observation_cap_chars: int = 8_000
    # when > 0: once only this many assistant turns are left, the agent loop tells the agent so
    # (``finish_notice``), so that an agent that has not fixed the issue can still report what it found
    finish_notice_turns: int = 0
    # when > 0: a sampled turn the loop cannot act on (no tool call, or a call that does not parse) is sampled again
    # from the same context, at most this many times per turn (SWE-agent's requery on a format error); the drafts
    # are kept in ``Trajectory.discarded_drafts`` and their tokens count toward ``max_tokens``
    format_retries: int = 0

    def __post_init__(self) -> None:
        flags = {"max_turns": "--max-turns", "wall_s": "--wall-s", "finish_notice_turns": "--finish-notice",
                 "format_retries": "--format-retries"}
        for name in ("max_turns", "max_tokens", "wall_s", "per_exec_timeout_s", "observation_cap_chars"):
            value = getattr(self, name)
            if not value > 0:
                where = f" ({flags[name]})" if name in flags else ""
                raise ValueError(f"EpisodeLimits.{name}{where} = {value!r} must be > 0; fix: give a positive value "
                                 f"(default {EpisodeLimits.__dataclass_fields__[name].default})")
        if not 0 <= self.finish_notice_turns < self.max_turns:
            raise ValueError(f"EpisodeLimits.finish_notice_turns ({flags['finish_notice_turns']}) = "
                             f"{self.finish_notice_turns!r} "
                             f"must be >= 0 and below max_turns ({self.max_turns}); fix: 0 (no notice) or e.g. 2")
        if not 0 <= self.format_retries <= MAX_FORMAT_RETRIES:
            raise ValueError(f"EpisodeLimits.format_retries ({flags['format_retries']}) = {self.format_retries!r} must "
                             f"be between 0 and {MAX_FORMAT_RETRIES}; fix: 0 (every turn as sampled) or e.g. 3")


MAX_FORMAT_RETRIES = 8

_NOTICE = re.compile(r"\A(\d+) turns? left\. Call finish now")


def finish_notice(turns_left: int) -> str:
    """What the agent loop tells the agent when ``turns_left`` assistant turns remain
    (``EpisodeLimits.finish_notice_turns``): a ``user`` message after that turn's observations."""
    unit = "turn" if turns_left == 1 else "turns"
    return (f"{turns_left} {unit} left. Call finish now with your summary for the user: what you changed, and what "
            "still fails if the issue is not fixed.")


def is_finish_notice(text: str) -> bool:
    return bool(_NOTICE.match(text))


@dataclass(frozen=True)
class Hint:
    """A hint message inserted before a chosen assistant turn (training and diagnostics)."""

    text: str
    kind: str  # e.g. "correct", "irrelevant", "wrong"


@runtime_checkable
class FeedbackProvider(Protocol):
    """Decides whether to insert a hint before assistant turn ``turn`` (0-based) and which one."""

    def hint_for(self, instance: TaskInstance, messages: list[Message], turn: int, rng: random.Random) -> Hint | None: ...
