"""Budget episodes for SFT (``SFTConfig.budget_share``): the expert under a short turn limit with the agent loop's
finish notice, so SFT sees the notice followed by a ``finish`` that reports what was changed and what still fails."""

from __future__ import annotations

import pytest

from harness.interfaces import is_finish_notice


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> list:
    from harness.minirepos import make_mini
    from repro.sft import collect_expert_trajectories

    d = tmp_path_factory.mktemp("budget")
    make_mini(d / "train", split="train", repos=2, tasks_per_repo=3, seed=0)
    return collect_expert_trajectories(d / "train", episodes=10, hint_share=0.0, think=True, seed=0, workers=2,
                                       budget_share=1.0, finish_notice_turns=2)


@pytest.mark.slow  # ~8 s: ten real expert episodes in LocalSandboxes
def test_every_budget_episode_ends_with_the_experts_finish_right_after_the_notice(budgeted: list) -> None:
    assert len(budgeted) == 10
    reports = 0
    for tr in budgeted:
        turns = [i for i, m in enumerate(tr.messages) if m.role == "assistant"]
        assert tr.finished and len(turns) <= 9 - 1, tr.instance_id  # the limit is 4-9; it finished before it
        notices = [i for i, m in enumerate(tr.messages) if m.role == "user" and is_finish_notice(m.content)]
        assert len(notices) <= 1
        if notices:  # the expert answers the notice with its finish (the next assistant turn is the last)
            assert turns[-1] > notices[0] and [t for t in turns if t > notices[0]] == [turns[-1]]
            reports += "ran out of turns" in (tr.final_message or "")
    assert reports >= 3  # most limits of 4-9 come before the expert's fix is confirmed (7 turns)


def test_budget_share_needs_the_notice() -> None:
    from repro.sft import SFTConfig

    with pytest.raises(ValueError, match="budget_share needs the finish notice"):
        SFTConfig(train_tasks="t", budget_share=0.5)
    assert SFTConfig(train_tasks="t", budget_share=0.5, finish_notice_turns=2).budget_share == 0.5
