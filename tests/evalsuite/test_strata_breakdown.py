"""Per-stratum rates (twin / no_twin) reach the outcome table and the exploratory breakdowns; episodes without a
stratum add no breakdown (the report side: tests/reports/test_reports_strata.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evalsuite import describe
from evalsuite.outcomes import build_outcome_table
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from harness.schema import EpisodeResult
from protocols.freeze import freeze_plan
from protocols.schema import Protocol

SHA = "b" * 64


def _plan() -> Protocol:
    return Protocol.model_validate({
        "name": "t", "question": "q", "estimand": "method", "analysis_seed": 3,
        "arms": [{"name": "tg", "role": "treatment"}, {"name": "grpo", "role": "baseline"}],
        "task_set": {"name": "synthetic", "sha256": SHA},
        "design": {"seeds_per_arm": 2, "n_tasks": 8, "n_repositories": 2},
        "endpoints": [{"id": e, "role": "primary"} for e in ("behaviour_ok", "code_ok", "joint_ok")],
        "criteria": [{"endpoint": "code_ok", "kind": "noninferiority", "margin": 0.2}],
    })  # fmt: skip


def _runs(root: Path, stratify: bool) -> list[Path]:
    frozen = freeze_plan(_plan(), now="2026-01-01T00:00:00Z")
    d = SyntheticDesign(arms=(SyntheticArm("tg", 0.8, 0.5, seeds=(0, 1)), SyntheticArm("grpo", 0.2, 0.5, seeds=(0, 1))),
                        n_repos=2, tasks_per_repo=4)
    dirs = write_synthetic_runs(root, d, rng=np.random.default_rng(0), protocol_hash=frozen.sha256,
                                task_set_sha256=SHA)
    if stratify:  # tasks t0-t2 of each repository are twins, t3 is not (as a 3 + 1 design writes them)
        for f in root.rglob("result.json"):
            res = EpisodeResult.model_validate_json(f.read_text())
            stratum = "no_twin" if res.instance_id.endswith("__t3") else "twin"
            f.write_text(res.model_copy(update={"stratum": stratum}).model_dump_json())
    return dirs


def test_breakdown_by_stratum(tmp_path: Path) -> None:
    table = build_outcome_table(_plan(), _runs(tmp_path, stratify=True))
    assert set(table.episodes["stratum"]) == {"twin", "no_twin"}
    rows = [r for r in describe.breakdowns(table) if r.by == "stratum" and r.endpoint == "code_ok"]
    assert {r.level: r.n_tasks for r in rows} == {"twin": 6, "no_twin": 2}
    twin = table.episodes[(table.episodes["stratum"] == "twin") & (table.episodes["arm"] == "tg")]
    row = next(r for r in rows if r.level == "twin")
    assert row.treatment.n == len(twin) and row.treatment.successes == twin["code_ok"].sum()


def test_no_stratum_no_breakdown(tmp_path: Path) -> None:
    table = build_outcome_table(_plan(), _runs(tmp_path, stratify=False))
    assert set(table.episodes["stratum"]) == {"n/a"}
    assert not [r for r in describe.breakdowns(table) if r.by == "stratum"]
