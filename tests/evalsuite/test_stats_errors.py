"""Bad input raises an error that names the problem — never a plausible-looking number (STATS §8.4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalsuite import (
    StatsInputError,
    crossed_effect,
    hierarchical_bootstrap,
    ni_test,
    paired_clustered_diff,
    power_ni_crossed,
    rd_ci,
    rd_ci_paired,
    variance_components,
)  # fmt: skip
from evalsuite.outcomes import EvalDataError, validate_episode_frame

REPO = np.array([0, 0, 1, 1, 2, 2])


def test_one_seed_is_refused():
    with pytest.raises(StatsInputError, match="2 training seeds per arm"):
        crossed_effect(np.ones((1, 6)), np.zeros((3, 6)), REPO)


def test_unbalanced_design_is_refused():
    with pytest.raises(StatsInputError, match="same task columns"):
        crossed_effect(np.ones((3, 6)), np.zeros((3, 5)), REPO)
    with pytest.raises(StatsInputError, match="one label per task"):
        crossed_effect(np.ones((3, 6)), np.zeros((3, 6)), REPO[:5])


def test_nan_cell_is_refused():
    yt = np.ones((3, 6))
    yt[1, 4] = np.nan
    with pytest.raises(StatsInputError, match="NaN/inf at seed row 1, task column 4"):
        crossed_effect(yt, np.zeros((3, 6)), REPO)


def test_empty_arm_is_refused():
    with pytest.raises(StatsInputError, match="empty"):
        crossed_effect(np.zeros((0, 6)), np.zeros((3, 6)), REPO)
    with pytest.raises(StatsInputError, match="n=0 must be >= 1"):
        rd_ci(0, 0, 3, 10, method="mn")
    with pytest.raises(StatsInputError, match="empty"):
        rd_ci_paired(0, 0, 0, 0)


def test_one_repository_is_refused():
    with pytest.raises(StatsInputError, match="2 repositories"):
        crossed_effect(np.ones((3, 4)), np.zeros((3, 4)), np.zeros(4))
    with pytest.raises(StatsInputError, match="2 repositories"):
        paired_clustered_diff(np.ones(4), np.zeros(4), np.zeros(4))


def test_wrong_types_and_values():
    with pytest.raises(StatsInputError, match="numeric"):
        crossed_effect(np.array([["a", "b"], ["c", "d"]]), np.zeros((2, 2)), [0, 1])
    with pytest.raises(StatsInputError, match="whole number"):
        rd_ci(2.5, 10, 3, 10, method="mn")
    with pytest.raises(StatsInputError, match="between 0 and n"):
        rd_ci(11, 10, 3, 10, method="newcombe")
    with pytest.raises(StatsInputError, match="must be a number"):
        rd_ci("3", 10, 3, 10, method="newcombe")
    with pytest.raises(StatsInputError, match="unknown method"):
        rd_ci(3, 10, 3, 10, method="score")
    with pytest.raises(StatsInputError, match="margin"):
        ni_test(3, 10, 3, 10, margin=-0.1)
    with pytest.raises(StatsInputError, match="alpha"):
        rd_ci(3, 10, 3, 10, method="mn", alpha=1.5)
    with pytest.raises(StatsInputError, match="rng"):
        hierarchical_bootstrap(np.ones((3, 6)), np.zeros((3, 6)), REPO, rng=42)
    with pytest.raises(StatsInputError, match="2 seeds and >= 2 tasks"):
        variance_components(np.ones((1, 5)))
    with pytest.raises(StatsInputError, match="seeds per arm"):
        power_ni_crossed(margin=0.03, seeds_treatment=1, seeds_baseline=3, n_tasks=100, tasks_per_repo=10,
                         sigma_seed=0.02, tau=0.1, icc_repo=0.1, sigma_e2=0.25)  # fmt: skip


def _frame(**over):
    df = pd.DataFrame({
        "arm": ["tg", "grpo"], "role": ["treatment", "baseline"], "instance_id": ["t1", "t1"], "repo": ["r", "r"],
        "difficulty": ["easy"] * 2, "template_tier": ["n/a"] * 2, "train_seed": [0, 0], "episode_seed": [0, 0],
        "behaviour_ok": [True, False], "code_ok": [True, True], "joint_ok": [True, False],
    })  # fmt: skip
    for k, v in over.items():
        df[k] = v
    return df


def test_episode_frame_column_types():
    validate_episode_frame(_frame())
    with pytest.raises(EvalDataError, match="'code_ok' must be bool"):
        validate_episode_frame(_frame(code_ok=[1.0, 0.0], joint_ok=[True, False]))
    with pytest.raises(EvalDataError, match="'train_seed' must be integer"):
        validate_episode_frame(_frame(train_seed=["0", "1"]))
    with pytest.raises(EvalDataError, match="lacks columns"):
        validate_episode_frame(_frame().drop(columns=["repo"]))
    with pytest.raises(EvalDataError, match="joint_ok != behaviour_ok & code_ok"):
        validate_episode_frame(_frame(joint_ok=[True, True]))
