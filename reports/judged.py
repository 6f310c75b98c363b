"""Which arms were not behaviour-judged, so that their reports say "n/a" instead of 0.

An arm of a ``tgsuite grade`` run is graded patches from another harness: there is no conversation, so no behaviour
checker ran (``EpisodeResult.behaviour`` empty, ``behaviour_ok`` False by construction) and no per-turn metric
exists (steps 0, no tool calls). Reporting those as 0 % and 0 ± 0 would read as a measured failure. An arm is *not
judged* when every scored episode of it has no behaviour result and no assistant step; an agent episode always has
behaviour results (at least the tool protocol checker's), even one cut at its first turn. Counting only.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.schema import EpisodeResult

NOT_JUDGED = "n/a"
NOT_JUDGED_WHY = ("not judged: graded patches without a conversation (`tgsuite grade`), so no behaviour checker "
                  "ran and there are no per-turn metrics")
JUDGED_ENDPOINTS = ("behaviour_ok", "joint_ok")  # endpoints that need a conversation; code_ok does not


def unjudged_arms(eps: Sequence[EpisodeResult]) -> set[str]:
    """Runner arm names whose scored episodes carry no behaviour verdict and no step (module docstring)."""
    by_arm: dict[str, list[EpisodeResult]] = {}
    for e in eps:
        if e.scored:
            by_arm.setdefault(e.arm, []).append(e)
    return {arm for arm, es in by_arm.items() if all(not e.behaviour and e.metrics.steps == 0 for e in es)}


def base_arm(arm: str) -> str:
    """The plan arm of a runner arm name (``tg@s0`` → ``tg``)."""
    return arm.split("@s", 1)[0]


def unjudged_plan_arms(eps: Sequence[EpisodeResult]) -> frozenset[str]:
    """Plan arms (``base_arm``) all of whose runner arms are not judged."""
    unjudged = unjudged_arms(eps)
    runner = {e.arm for e in eps if e.scored}
    return frozenset(b for b in {base_arm(a) for a in runner}
                     if all(a in unjudged for a in runner if base_arm(a) == b))


def tests_touched(eps: Sequence[EpisodeResult], arm: str, *, plan_arm: bool = False) -> tuple[int, int]:
    """(graded patches of ``arm`` that changed test files or test configuration, graded patches):
    ``Grade.tests_touched``; ``plan_arm``: ``arm`` is a plan arm and every runner arm ``arm@s<seed>`` counts."""
    graded = [e for e in eps if (base_arm(e.arm) if plan_arm else e.arm) == arm and e.scored and e.grade is not None]
    return sum(e.grade.tests_touched for e in graded if e.grade is not None), len(graded)


def touched_text(counts: tuple[int, int]) -> str:
    k, n = counts
    return f"{k:,} of {n:,}" if n else "—"


TOUCHED_CAPTION = ("Tests touched: graded patches that changed test files or test configuration (grading resets them "
                   "to the task's version before the hidden tests run).")


__all__ = ["JUDGED_ENDPOINTS", "NOT_JUDGED", "NOT_JUDGED_WHY", "base_arm", "TOUCHED_CAPTION", "tests_touched", "touched_text", "unjudged_arms",
           "unjudged_plan_arms"]
