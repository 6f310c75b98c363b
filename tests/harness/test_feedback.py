"""Feedback providers: kinds, placements, max_hints, seeded mixtures (proportions), spec parsing."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from harness.behaviour import MARKDOWN_HINT
from harness.feedback import (
    IRRELEVANT_HINTS,
    WRONG_HINTS,
    MixtureFeedback,
    ReminderFeedback,
)
from harness.feedback_spec import parse_feedback
from harness.interfaces import FeedbackProvider, Hint
from harness.schema import Message, TaskInstance
from harness.tools import format_tool_call as fc
from harness.tools import parse_tool_calls

INST = TaskInstance(
    instance_id="t-1", repo="r", base_commit="abc", problem_statement="p", patch="", test_patch="",
    FAIL_TO_PASS=["tests/test_a.py::test_a"],
)
BASE = [Message(role="system", content="s"), Message(role="user", content="u")]


def _draft(text: str) -> Message:
    return Message(role="assistant", content=text, tool_calls=parse_tool_calls(text))


GOOD_FIN = _draft(fc("finish", {"message": "## Fix\n\n- `add()` in `calc.py` now adds.\n- Tests pass."}))
BAD_FIN = _draft(fc("finish", {"message": "I fixed add() in calc.py so the visible tests pass again now."}))
TOOL = _draft(fc("list_files", {}))


def test_kinds_texts() -> None:
    rng = random.Random(0)
    assert ReminderFeedback("correct").text(rng) == MARKDOWN_HINT
    assert ReminderFeedback("wrong").text(rng) == WRONG_HINTS["markdown@v1"]
    assert "plain text" in WRONG_HINTS["markdown@v1"] and "no Markdown" in WRONG_HINTS["markdown@v1"]
    seen = {ReminderFeedback("irrelevant").text(rng) for _ in range(50)}
    assert seen == set(IRRELEVANT_HINTS)
    assert all("Markdown" not in h and "format" not in h for h in IRRELEVANT_HINTS)
    both = ReminderFeedback("correct", checkers=("markdown@v1", "tool_protocol@v1")).text(rng)
    assert both.startswith(MARKDOWN_HINT) and "finish" in both


def test_providers_satisfy_the_protocol() -> None:
    assert isinstance(ReminderFeedback("correct"), FeedbackProvider)
    assert isinstance(MixtureFeedback({"correct": 1.0}), FeedbackProvider)


@pytest.mark.parametrize(
    ("placement", "turn_index", "turns_hinted"),
    [("first_turn", None, [0]), ("every_turn", None, [0, 1, 2, 3]), ("turn", 2, [2]),
     ("before_finish", None, []), ("before_failing_turn", None, [])],
)
def test_pre_sampling_placements(placement, turn_index, turns_hinted) -> None:
    fb = ReminderFeedback("correct", placement, turn_index, max_hints=10)
    rng = random.Random(0)
    hinted = [t for t in range(4) if fb.hint_for(INST, BASE, t, rng) is not None]
    assert hinted == turns_hinted


def test_draft_placements() -> None:
    rng = random.Random(0)
    fin = ReminderFeedback("correct", "before_finish")
    assert fin.review_draft(INST, BASE, GOOD_FIN, 3, rng) == Hint(text=MARKDOWN_HINT, kind="correct")
    assert fin.review_draft(INST, BASE, TOOL, 3, rng) is None
    fail = ReminderFeedback("wrong", "before_failing_turn")
    assert fail.review_draft(INST, BASE, BAD_FIN, 0, rng) == Hint(text=WRONG_HINTS["markdown@v1"], kind="wrong")
    assert fail.review_draft(INST, BASE, GOOD_FIN, 0, rng) is None  # markdown@v1 passes it
    assert fail.review_draft(INST, BASE, TOOL, 0, rng) is None  # NA
    assert ReminderFeedback("correct", "first_turn").review_draft(INST, BASE, GOOD_FIN, 0, rng) is None


def test_max_hints_counts_hint_messages() -> None:
    fb = ReminderFeedback("correct", "every_turn", max_hints=2)
    rng = random.Random(0)
    hint_msg = Message(role="user", content="h", is_hint=True)
    assert fb.hint_for(INST, [*BASE, hint_msg], 1, rng) is not None
    assert fb.hint_for(INST, [*BASE, hint_msg, hint_msg], 2, rng) is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "nice"}, "kind 'nice' unknown"),
        ({"kind": "correct", "placement": "whenever"}, "placement 'whenever' unknown"),
        ({"kind": "correct", "placement": "turn"}, "turn_index"),
        ({"kind": "correct", "turn_index": 2}, "turn_index"),
        ({"kind": "correct", "checkers": ("markdown@v9",)}, "unknown behaviour checker"),
    ],
)
def test_bad_config_is_refused(kwargs, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReminderFeedback(**kwargs)


def test_mixture_proportions_and_seeding() -> None:
    mix = MixtureFeedback({"correct": 0.6, "wrong": 0.3, "none": 0.1}, "before_finish")
    rng = random.Random(123)
    n = 4000
    kinds = Counter()
    for _ in range(n):
        bound = mix.bind(INST, rng)
        hint = bound.review_draft(INST, BASE, GOOD_FIN, 0, rng) if hasattr(bound, "review_draft") else None
        kinds[hint.kind if hint else "none"] += 1
    for kind, p in (("correct", 0.6), ("wrong", 0.3), ("none", 0.1)):
        se = (p * (1 - p) / n) ** 0.5
        assert abs(kinds[kind] / n - p) < 4 * se, kinds
    # same seed, same draws
    a = [mix.draw(random.Random(5)) for _ in range(3)]
    assert a == [mix.draw(random.Random(5)) for _ in range(3)]


def test_mixture_per_hint_draws_each_time() -> None:
    mix = MixtureFeedback({"correct": 0.5, "irrelevant": 0.5}, "every_turn", max_hints=100, per="hint")
    rng = random.Random(1)
    assert mix.bind(INST, rng) is mix
    kinds = {mix.hint_for(INST, BASE, t, rng).kind for t in range(40)}  # type: ignore[union-attr]
    assert kinds == {"correct", "irrelevant"}


@pytest.mark.parametrize("weights", [{}, {"great": 1.0}, {"correct": -1.0, "wrong": 2.0}, {"correct": 0.0}])
def test_mixture_bad_weights(weights) -> None:
    with pytest.raises(ValueError, match="mixture weights"):
        MixtureFeedback(weights)


def test_parse_feedback_specs() -> None:
    assert parse_feedback("none") is None
    fb = parse_feedback("wrong@before_failing_turn")
    assert isinstance(fb, ReminderFeedback) and fb.kind == "wrong" and fb.placement == "before_failing_turn"
    fb2 = parse_feedback("correct@turn=3")
    assert isinstance(fb2, ReminderFeedback) and fb2.placement == "turn" and fb2.turn_index == 3
    mix = parse_feedback("mix:correct=0.7,wrong=0.3")
    assert isinstance(mix, MixtureFeedback) and dict(mix.weights) == {"correct": 0.7, "wrong": 0.3}
    assert mix.placement == "before_finish"
    with pytest.raises(ValueError, match="mix:correct=0.7,wrong=0.3"):
        parse_feedback("mix:correct")
