"""Command-line feedback specs (``--feedback``, ``KIND[@PLACEMENT]``) to providers: reminders and mixtures of
``harness.feedback`` and the side-effect probes of ``harness.probes``.

Its own module because ``harness.probes`` builds on ``harness.feedback``: the parser that knows both sits above
them, so neither imports the other back.
"""

from __future__ import annotations

from harness.feedback import MixtureFeedback, ReminderFeedback
from harness.interfaces import FeedbackProvider
from harness.probes import probe_feedback


def parse_feedback(spec: str, *, checkers: tuple[str, ...] = ("markdown@v1",)) -> FeedbackProvider | None:
    """Build a provider from a command-line spec ``KIND[@PLACEMENT]``.

    ``KIND`` is ``none``, ``correct``, ``irrelevant``, ``wrong`` or ``mix:correct=0.7,wrong=0.3`` (per-episode
    draw), or ``probe:NAME`` (``harness.probes``; default placement: the probe's own); ``PLACEMENT`` is one of
    ``Placement`` or ``turn=N`` (default ``before_finish``).
    Examples: ``correct``, ``wrong@before_failing_turn``, ``mix:correct=0.5,none=0.5@turn=0``, ``probe:explain``.
    """
    kind, _, place = spec.partition("@")
    placement, turn_index = (place or "before_finish"), None
    if placement.startswith("turn="):
        placement, turn_index = "turn", int(placement[5:])
    if kind == "none":
        return None
    if kind.startswith("probe:"):
        return probe_feedback(kind[6:], placement if place else None, turn_index)  # type: ignore[arg-type]
    if kind.startswith("mix:"):
        try:
            weights = {k: float(v) for k, v in (item.split("=") for item in kind[4:].split(","))}
        except ValueError:
            raise ValueError(f"feedback spec {spec!r}: write mixtures as mix:correct=0.7,wrong=0.3") from None
        return MixtureFeedback(weights, placement, turn_index, checkers=checkers)  # type: ignore[arg-type]
    return ReminderFeedback(kind, placement, turn_index, checkers=checkers)  # type: ignore[arg-type]
