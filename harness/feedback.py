"""Feedback (hint) providers: correct, irrelevant, wrong, and seeded mixtures of them.

A provider decides WHEN a hint goes into the conversation (the placement) and WHAT it says (the kind). The hint is
inserted by ``harness.agent.run_episode`` as a ``user`` message with ``is_hint=True`` before the chosen turn.

Kinds (the text, for requirement checkers ``checkers``, default ``("markdown@v1",)``):

- ``correct``: the requirement's reminder, ``harness.behaviour.hint_text(checker)`` (METHOD §6.8's Markdown
  reminder for ``markdown@v1``);
- ``irrelevant``: a true remark unrelated to the requirement (about the tools), drawn with the feedback rng from
  ``IRRELEVANT_HINTS``;
- ``wrong``: a reminder asking for the opposite of the requirement (``WRONG_HINTS``; plain text, no Markdown);
- mixtures: ``MixtureFeedback({"correct": 0.7, "wrong": 0.3})`` draws the kind with the feedback rng, once per
  episode (``per="episode"``, default) or at every hint (``per="hint"``); the kind ``none`` means "no hint".

Placements (``Placement``):

- ``first_turn``: before assistant turn 0;  ``every_turn``: before every turn;  ``turn``: before turn
  ``turn_index``. These are decided before the turn is sampled (``hint_for``).
- ``before_finish``: the turn is sampled first; if that draft calls ``finish`` (the final/summary turn), the draft
  is discarded, the hint inserted and the turn sampled again (``review_draft``).
- ``before_failing_turn``: likewise, when one of ``checkers`` judges the draft turn FAIL in the context of the
  earlier turns (``harness.behaviour.turn_verdicts``).

At most ``max_hints`` hints per episode (default 1), counted from the ``is_hint`` messages so far; a provider
holds no per-episode state, so one instance can serve concurrent episodes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from harness.behaviour import get_checker, turn_verdicts
from harness.interfaces import FeedbackProvider, Hint
from harness.schema import Message, TaskInstance

FeedbackKind = Literal["correct", "irrelevant", "wrong"]
Placement = Literal["first_turn", "every_turn", "turn", "before_finish", "before_failing_turn"]
_KINDS: tuple[str, ...] = get_args(FeedbackKind)
_PLACEMENTS: tuple[str, ...] = get_args(Placement)

IRRELEVANT_HINTS: tuple[str, ...] = (
    "Note: the paths you pass to the tools are relative to the repository root.",
    "Note: the run_tests tool runs only the repository's visible tests, with pytest.",
    "Note: edit_file replaces text only when the old text occurs exactly once in the file.",
    "Note: the search tool takes an extended regular expression, like grep -E.",
)
WRONG_HINTS: dict[str, str] = {
    "markdown@v1": (
        "Reminder: write your reply to the user as plain text only — no Markdown: no headings, no bullet lists, "
        "no backticks and no code fences."
    ),
    "tool_protocol@v1": "Reminder: you do not need to call finish; simply stop writing when you are done.",
    # v2 differs from v1 only in which turns it judges (harness.behaviour): the same requirement, the same hints
    "markdown@v2": (
        "Reminder: write your reply to the user as plain text only — no Markdown: no headings, no bullet lists, "
        "no backticks and no code fences."
    ),
    "tool_protocol@v2": "Reminder: you do not need to call finish; simply stop writing when you are done.",
    "tool_args@v1": "Reminder: call edit_file with path, old and new only; leave out any other argument.",
    "ask_first@v1": "Reminder: do not ask the user anything; make the changes you need without waiting for approval.",
}
WRONG_HINTS.update({f"{c.split('@')[0]}@v2": WRONG_HINTS[c] for c in ("markdown@v1", "tool_args@v1", "ask_first@v1")})
WRONG_HINTS["markdown@v3"] = WRONG_HINTS["markdown@v1"]  # v3 adds a rule (quoted code), same requirement


def _hints_so_far(messages: list[Message]) -> int:
    return sum(1 for m in messages if m.is_hint)


@dataclass(frozen=True)
class ReminderFeedback:
    """One kind of hint at one placement (see the module docstring)."""

    kind: FeedbackKind
    placement: Placement = "before_finish"
    turn_index: int | None = None
    max_hints: int = 1
    checkers: tuple[str, ...] = ("markdown@v1",)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"feedback kind {self.kind!r} unknown; use one of {', '.join(_KINDS)}")
        if self.placement not in _PLACEMENTS:
            raise ValueError(f"feedback placement {self.placement!r} unknown; use one of {', '.join(_PLACEMENTS)}")
        if (self.placement == "turn") != (self.turn_index is not None):
            raise ValueError("feedback: give turn_index exactly when placement is 'turn' (e.g. turn_index=2)")
        if not self.checkers:
            raise ValueError("feedback: checkers must name at least one behaviour checker, e.g. ('markdown@v1',)")
        for c in self.checkers:
            get_checker(c)  # raises with the list of known ids

    def text(self, rng: random.Random) -> str:
        """The hint text of this kind (``irrelevant`` draws from ``IRRELEVANT_HINTS`` with ``rng``)."""
        if self.kind == "correct":
            return "\n".join(get_checker(c).hint_text for c in self.checkers)
        if self.kind == "wrong":
            missing = [c for c in self.checkers if c not in WRONG_HINTS]
            if missing:
                raise ValueError(f"no 'wrong' hint defined for {missing}; add one to harness.feedback.WRONG_HINTS")
            return "\n".join(WRONG_HINTS[c] for c in self.checkers)
        return IRRELEVANT_HINTS[rng.randrange(len(IRRELEVANT_HINTS))]

    def _room(self, messages: list[Message]) -> bool:
        return _hints_so_far(messages) < self.max_hints

    def hint_for(self, instance: TaskInstance, messages: list[Message], turn: int, rng: random.Random) -> Hint | None:
        """Pre-sampling placements: ``first_turn``, ``every_turn``, ``turn``."""
        wanted = (
            (self.placement == "first_turn" and turn == 0)
            or self.placement == "every_turn"
            or (self.placement == "turn" and turn == self.turn_index)
        )
        return Hint(text=self.text(rng), kind=self.kind) if wanted and self._room(messages) else None

    def review_draft(
        self, instance: TaskInstance, messages: list[Message], draft: Message, turn: int, rng: random.Random
    ) -> Hint | None:
        """Draft placements: ``before_finish`` and ``before_failing_turn``."""
        if self.placement == "before_finish":
            wanted = any(c.valid and c.name == "finish" for c in draft.tool_calls)
        elif self.placement == "before_failing_turn":
            wanted = any(turn_verdicts(get_checker(c), [*messages, draft])[-1] == "FAIL" for c in self.checkers)
        else:
            return None
        return Hint(text=self.text(rng), kind=self.kind) if wanted and self._room(messages) else None


@dataclass(frozen=True)
class _Silent:
    """The ``none`` component of a mixture: never hints."""

    def hint_for(self, instance: TaskInstance, messages: list[Message], turn: int, rng: random.Random) -> Hint | None:
        return None


@dataclass(frozen=True)
class MixtureFeedback:
    """Seeded mixture of kinds with given proportions, e.g. ``{"correct": 0.8, "wrong": 0.2}``.

    Allowed keys: ``correct``, ``irrelevant``, ``wrong``, ``none``. Proportions are normalised to sum to 1.
    ``per="episode"`` draws one kind per episode (``bind``); ``per="hint"`` draws at every hint.
    """

    weights: Mapping[str, float]
    placement: Placement = "before_finish"
    turn_index: int | None = None
    max_hints: int = 1
    checkers: tuple[str, ...] = ("markdown@v1",)
    per: Literal["episode", "hint"] = "episode"
    _base: ReminderFeedback = field(init=False, repr=False)

    def __post_init__(self) -> None:
        allowed = (*_KINDS, "none")
        bad = [k for k in self.weights if k not in allowed]
        if bad or not self.weights:
            raise ValueError(f"mixture weights: unknown kinds {bad}; use {', '.join(allowed)}")
        if any(w < 0 for w in self.weights.values()) or sum(self.weights.values()) <= 0:
            raise ValueError("mixture weights must be >= 0 with a positive sum, e.g. {'correct': 0.7, 'wrong': 0.3}")
        if self.per not in ("episode", "hint"):
            raise ValueError("mixture per must be 'episode' or 'hint'")
        base = ReminderFeedback("correct", self.placement, self.turn_index, self.max_hints, self.checkers)
        object.__setattr__(self, "_base", base)

    def draw(self, rng: random.Random) -> str:
        """One kind drawn with probability proportional to its weight (keys in sorted order, for stability)."""
        kinds = sorted(self.weights)
        return rng.choices(kinds, weights=[self.weights[k] for k in kinds], k=1)[0]

    def _provider(self, kind: str) -> Any:
        if kind == "none":
            return _Silent()
        return ReminderFeedback(kind, self.placement, self.turn_index, self.max_hints, self.checkers)  # type: ignore[arg-type]

    def bind(self, instance: TaskInstance, rng: random.Random) -> FeedbackProvider:
        """The provider for one episode: a fixed drawn kind (``per="episode"``) or the per-hint mixture itself."""
        return self._provider(self.draw(rng)) if self.per == "episode" else self

    def _redraw(self, hint: Hint | None, rng: random.Random) -> Hint | None:
        if hint is None:
            return None
        kind = self.draw(rng)
        return None if kind == "none" else Hint(text=self._provider(kind).text(rng), kind=kind)

    def hint_for(self, instance: TaskInstance, messages: list[Message], turn: int, rng: random.Random) -> Hint | None:
        return self._redraw(self._base.hint_for(instance, messages, turn, rng), rng)

    def review_draft(
        self, instance: TaskInstance, messages: list[Message], draft: Message, turn: int, rng: random.Random
    ) -> Hint | None:
        return self._redraw(self._base.review_draft(instance, messages, draft, turn, rng), rng)


def corrective_feedback(checker_id: str, kind: FeedbackKind = "correct") -> ReminderFeedback:
    """The reminder for one requirement at the placement its checker declares (``Checker.hint_placement``:
    ``before_finish`` for Markdown, where the summary is written; ``first_turn`` for requirements that must hold
    from the start)."""
    placement = get_checker(checker_id).hint_placement
    return ReminderFeedback(kind, placement, checkers=(checker_id,))  # type: ignore[arg-type]
