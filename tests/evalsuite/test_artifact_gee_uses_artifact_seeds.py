"""For the artifact estimand GEE (and the Bayesian model) analyse the two artifact checkpoints' episodes, not every
trained seed pooled: pooled, GEE estimated another quantity (code_ok +0.095 against the primary's +0.050 on the
data below) and its verdict still counted toward "sensitivity disagrees" (GEE is informative for this estimand)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from evalsuite.analyze import analyze
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from protocols.freeze import freeze_plan

sys.path.insert(0, str(Path(__file__).parent))
from test_evalsuite_analyze import SHA, make_plan  # noqa: E402


def test_gee_estimates_the_artifact_difference(tmp_path: Path) -> None:
    rec = freeze_plan(make_plan(estimand="artifact", arms=[
        {"name": "tg", "role": "treatment", "artifact_seed": 1}, {"name": "grpo", "role": "baseline", "artifact_seed": 0}],
        sensitivity=["gee"]), now="2026-01-01T00:00:00Z")  # fmt: skip
    seeds = (0, 1, 2, 3, 4)
    d = SyntheticDesign(arms=(SyntheticArm("tg", 0.5, 0.6, seeds=seeds), SyntheticArm("grpo", 0.5, 0.6, seeds=seeds)),
                        n_repos=8, tasks_per_repo=5, seed_sd=0.8)  # fmt: skip
    runs = write_synthetic_runs(tmp_path, d, rng=np.random.default_rng(4), protocol_hash=rec.sha256,
                                task_set_sha256=SHA)  # fmt: skip
    res = analyze(rec, runs)
    for c in res.criteria:
        gee = c.sensitivity[0]
        assert gee.name == "gee" and gee.status == "ok"
        assert gee.estimate == pytest.approx(c.estimate), c.endpoint
