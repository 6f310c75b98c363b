"""Format retries (``EpisodeLimits.format_retries``): a turn the agent loop cannot act on — no tool call, or a call
that does not parse — is sampled again from the same context, at most k times; the drafts stay in the trajectory
and in the metrics, and well-formed calls whose tool fails are never resampled."""

from __future__ import annotations

import pytest

from harness.agent import NUDGE_TEXT, format_error, run_episode
from harness.interfaces import EpisodeLimits
from harness.metrics import RepoIndex, compute_metrics
from harness.tools import format_tool_call as fc
from tests.harness import test_agent
from tests.harness.test_agent import SOLVE, Script

calc = test_agent.calc  # the fixture: a one-bug repository in a DirSandbox
READ = fc("read_file", {"path": "calc.py"})
BROKEN = '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc.py"\n</tool_call>'


def test_what_counts_as_a_format_error() -> None:
    assert format_error("I will read the file now.") and format_error(BROKEN)
    assert format_error(READ + BROKEN)  # one good call does not excuse a broken one
    assert not format_error(READ) and not format_error(fc("read_file", {"path": "missing.py"}))


def test_a_broken_turn_is_sampled_again_from_the_same_context(calc) -> None:
    inst, sbx = calc
    policy = Script(["no call here", BROKEN, *SOLVE])
    traj = run_episode(inst, policy, sbx, EpisodeLimits(max_turns=6, format_retries=2), seed=0)
    assert traj.finished
    kept = [m.content for m in traj.messages if m.role == "assistant"]
    assert kept == SOLVE and NUDGE_TEXT not in [m.content for m in traj.messages]
    assert [d.content for d in traj.discarded_drafts] == ["no call here", BROKEN]
    assert {d.discarded_for for d in traj.discarded_drafts} == {"format"} and traj.discarded_drafts[0].turn == 0
    assert policy.seen[0] == policy.seen[1] == policy.seen[2]  # the drafts never became context
    # the drafts' tokens are spent; their calls count in validity (one broken call of five)
    assert traj.n_tokens > sum(len(t) for t in SOLVE) // 4
    m = compute_metrics(traj, RepoIndex.from_dir(sbx.root))
    assert m.format_retries == 2 and m.tool_calls == 5 and m.tool_call_validity == pytest.approx(4 / 5)


def test_retries_run_out_and_the_last_draft_is_the_turn(calc) -> None:
    inst, sbx = calc
    policy = Script(["still no call"])
    traj = run_episode(inst, policy, sbx, EpisodeLimits(max_turns=2, format_retries=3), seed=0)
    assert [m.content for m in traj.messages if m.role == "assistant"] == ["still no call"] * 2
    assert [m.content for m in traj.messages if m.role == "user"][1:] == [NUDGE_TEXT] * 2
    assert len(traj.discarded_drafts) == 6 and len(policy.seen) == 8
    assert traj.limit_hit is not None and traj.limit_hit.kind == "turns"


def test_off_by_default_and_a_failing_well_formed_call_is_not_resampled(calc) -> None:
    inst, sbx = calc
    off = run_episode(inst, Script(["no call here", READ]), sbx, EpisodeLimits(max_turns=2), seed=0)
    assert not off.discarded_drafts and NUDGE_TEXT in [m.content for m in off.messages]
    missing = fc("read_file", {"path": "missing.py"})
    on = run_episode(inst, Script([missing, READ]), sbx, EpisodeLimits(max_turns=2, format_retries=3), seed=0)
    assert not on.discarded_drafts
    assert [m.content for m in on.messages if m.role == "assistant"] == [missing, READ]


def test_the_token_budget_stops_the_retries(calc) -> None:
    inst, sbx = calc
    policy = Script(["x" * 400])  # ~100 estimated tokens a draft
    traj = run_episode(inst, policy, sbx, EpisodeLimits(max_turns=5, max_tokens=250, format_retries=5), seed=0)
    assert traj.limit_hit is not None and traj.limit_hit.kind == "tokens"
    # two drafts (200 tokens) fit; the third would spend 300 >= 250, so it is the turn, and the episode ends
    assert len(traj.discarded_drafts) == 2 and traj.n_tokens == 300 and len(policy.seen) == 3


def test_bad_retry_settings_name_the_field_and_the_fix() -> None:
    for bad in (-1, 9):
        with pytest.raises(ValueError, match=r"format_retries \(--format-retries\).*fix: 0"):
            EpisodeLimits(format_retries=bad)
    assert EpisodeLimits(format_retries=8).format_retries == 8
