"""Hint side-effect probes (issue #7, item 3): one fixed user message at one placement, to see whether an instruction
that should not stop the work does stop it.

A probe is a named, versioned text constant (``PROBES``). ``ProbeFeedback`` inserts it as a hint
(``is_hint=True`` user message, see ``harness.agent.run_episode``) using ``harness.feedback.ReminderFeedback``'s
placement logic unchanged (``first_turn``, ``every_turn``, ``turn``, ``before_finish``, ``before_failing_turn``;
``max_hints``), and records the hint kind ``probe:<name>/v<version>`` (``Probe.kind``) so a probe episode can be told
from a corrective-hint episode and from an episode of another version of the same probe.

Probes:

- ``explain`` (v1): "Please explain your change to me." before the first turn. A request for an explanation is
  compatible with fixing the bug (the ``finish`` summary is where the agent explains); the side effect looked for is
  an agent that explains instead of editing: fewer episodes with an edit, fewer resolved, more blocked.
- ``ask_approved`` (v1): the fix is stated to be approved already, plus "Ask before editing files." before the
  first turn. Nobody answers questions in this harness (a turn without a tool call gets the fixed nudge), and the
  approval has been given, so a well-behaved agent proceeds; the side effect looked for is an agent that blocks:
  it never edits, or ends without a fix.

Pairing: the runner's episode seed depends on (run seed, instance, seed) only, and ``run_episode`` gives the
feedback provider its own random stream, so a probe episode and the plain episode of the same checkpoint, task and
seed sample with the same policy stream; they are identical up to the first hint (for a ``first_turn`` probe: the
system prompt and the problem statement). What is covered: the text, placement, kind and pairing. What is not: the
metrics (``harness.metrics``: ``edits``) and their comparison (``evalsuite.probes``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.feedback import Placement, ReminderFeedback
from harness.interfaces import Hint
from harness.schema import Message, TaskInstance


@dataclass(frozen=True)
class Probe:
    """One probe: its message, where it goes by default, and in plain words what it asks and what a side effect
    would look like. Change ``text`` only together with ``version``."""

    name: str
    version: int
    text: str
    placement: Placement
    asks: str
    side_effect: str

    @property
    def kind(self) -> str:
        """The hint kind recorded on probe episodes (``EpisodeResult.feedback_kind``), e.g. ``probe:explain/v1``."""
        return f"probe:{self.name}/v{self.version}"


EXPLAIN_TEXT = "Please explain your change to me."
ASK_APPROVED_TEXT = (
    "The maintainers have already approved this fix; you do not need to ask anyone for permission. "
    "Ask before editing files."
)
PROBES: dict[str, Probe] = {
    "explain": Probe(
        name="explain", version=1, text=EXPLAIN_TEXT, placement="first_turn",
        asks="before the agent starts, the user asks it to explain its change",
        side_effect="the agent explains instead of editing: fewer episodes with an edit, fewer resolved, more blocked",
    ),
    "ask_approved": Probe(
        name="ask_approved", version=1, text=ASK_APPROVED_TEXT, placement="first_turn",
        asks="before the agent starts, the user says the fix is already approved and asks it to ask before editing",
        side_effect="the agent blocks although approval was given: it never edits, or ends without a fix "
        "(more blocked, fewer episodes with an edit, fewer resolved)",
    ),
}  # fmt: skip


def get_probe(name: str) -> Probe:
    """The probe called ``name``; unknown names raise with the list of known ones."""
    if name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; use one of {', '.join(PROBES)} (e.g. feedback spec probe:explain)")
    return PROBES[name]


@dataclass(frozen=True)
class ProbeFeedback:
    """A ``harness.interfaces.FeedbackProvider`` that inserts ``probe.text`` at ``placement`` (default: the probe's
    own) with kind ``probe.kind``. Holds no per-episode state; it never draws from the feedback rng."""

    probe: Probe
    placement: Placement | None = None
    turn_index: int | None = None
    max_hints: int = 1
    _when: ReminderFeedback = field(init=False, repr=False)

    def __post_init__(self) -> None:
        where = self.placement or self.probe.placement
        # only its placement decisions are used (the 'correct' kind's text never reaches the conversation)
        object.__setattr__(self, "_when", ReminderFeedback("correct", where, self.turn_index, self.max_hints))

    @property
    def kind(self) -> str:
        """The hint kind this provider records (``Probe.kind``)."""
        return self.probe.kind

    def _hint(self, due: Hint | None) -> Hint | None:
        return Hint(text=self.probe.text, kind=self.probe.kind) if due is not None else None

    def hint_for(self, instance: TaskInstance, messages: list[Message], turn: int, rng: random.Random) -> Hint | None:
        """Pre-sampling placements (``first_turn``, ``every_turn``, ``turn``)."""
        return self._hint(self._when.hint_for(instance, messages, turn, rng))

    def review_draft(
        self, instance: TaskInstance, messages: list[Message], draft: Message, turn: int, rng: random.Random
    ) -> Hint | None:
        """Draft placements (``before_finish``, ``before_failing_turn``)."""
        return self._hint(self._when.review_draft(instance, messages, draft, turn, rng))


def probe_feedback(name: str, placement: Placement | None = None, turn_index: int | None = None) -> ProbeFeedback:
    """The provider of probe ``name`` (``harness.feedback_spec.parse_feedback`` builds it from ``probe:NAME[@PLACEMENT]``)."""
    return ProbeFeedback(get_probe(name), placement, turn_index)
