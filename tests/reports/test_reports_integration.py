"""The report over a REAL analysis: evalsuite.analyze on SYNTHETIC run directories (evalsuite.synthetic), then
build_report. Checks that what the analysis produces renders, and that the report shows its numbers unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evalsuite.analyze import analyze
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from protocols.freeze import freeze_plan
from protocols.schema import Protocol
from reports import format as fmt
from reports.build import build_report

SHA = "c" * 64


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object]:
    root = tmp_path_factory.mktemp("integ")
    plan = Protocol.model_validate({
        "name": "integ", "question": "does tg keep code success?", "estimand": "method", "analysis_seed": 1,
        "arms": [{"name": "tg", "role": "treatment"}, {"name": "grpo", "role": "baseline"}],
        "task_set": {"name": "synthetic", "sha256": SHA},
        "design": {"seeds_per_arm": 3, "n_tasks": 20, "n_repositories": 4},
        "endpoints": [{"id": e, "role": "primary"} for e in ("behaviour_ok", "code_ok", "joint_ok")],
        "criteria": [{"endpoint": "code_ok", "kind": "noninferiority", "margin": 0.2},
                     {"endpoint": "behaviour_ok", "kind": "superiority_margin", "threshold": 0.2},
                     {"endpoint": "joint_ok", "kind": "superiority"}],
        "sensitivity": ["gee", "conservative_df"], "bootstrap_resamples": 200, "coverage_threshold": 0.9,
    })
    frozen = freeze_plan(plan, now="2026-01-01T00:00:00Z")
    (root / "frozen.json").write_text(frozen.model_dump_json())
    design = SyntheticDesign(arms=(SyntheticArm("tg", 0.9, 0.6, seeds=(0, 1, 2)),
                                   SyntheticArm("grpo", 0.3, 0.6, seeds=(0, 1, 2))), n_repos=4, tasks_per_repo=5)
    runs = write_synthetic_runs(root / "runs", design, rng=np.random.default_rng(0), protocol_hash=frozen.sha256,
                                task_set_sha256=SHA)
    res = analyze(frozen, runs)
    (root / "analysis.json").write_text(res.model_dump_json())
    summary = build_report(root / "analysis.json", out_dir=root / "out", protocol=root / "frozen.json",
                           run_dirs=runs, max_trajectory_pages=10)
    return root, res, summary


def test_real_analysis_renders_its_own_numbers(real) -> None:  # noqa: ANN001
    root, res, summary = real
    doc = (root / "out" / "index.html").read_text()
    want = {"SHIP": "SHIP", "NO_SHIP": "NO-SHIP", "INCONCLUSIVE": "INCONCLUSIVE"}[res.decision.verdict]
    assert summary.verdict == want and f'id="verdict-word">{want}<' in doc
    for c, s in zip(res.criteria, summary.criteria, strict=True):
        assert (s.estimate, s.ci_low, s.ci_high, s.lower_one_sided) == (c.estimate, c.ci_low, c.ci_high, c.lower_one_sided)
        assert fmt.interval(c.ci_low, c.ci_high) in doc and fmt.pp(c.lower_one_sided) in doc
    assert summary.protocol_hash_verified is True
    assert summary.n_episodes == sum(1 for _ in (root / "runs").rglob("result.json"))
    for a in res.arm_summaries:
        assert f'id="joint-{a.arm}"' in doc and f"{a.joint_table.both:,} (" in doc


def test_real_analysis_trajectory_pages_say_what_is_missing(real) -> None:  # noqa: ANN001
    root, _, summary = real
    pages = sorted((root / "out" / "trajectories").glob("*.html"))
    assert len(pages) == summary.n_trajectory_pages == 10
    text = pages[0].read_text()
    # synthetic runs have no trajectory.jsonl / patch: the page says so instead of inventing content
    assert "trajectory.jsonl: not found" in text and "No patch.diff was recorded" in text
    data = json.loads((root / "out" / "summary.json").read_text())
    assert data["n_trajectory_pages"] == 10 and data["coverage_ok"] is True


def test_paper_table_sits_beside_this_runs_numbers(real) -> None:  # noqa: ANN001
    from reports.paper import paper_section

    root, res, _ = real
    doc = (root / "out" / "index.html").read_text()
    assert 'id="paper"' in doc and "0.85 ± 0.09" in doc and "0.33 ± 0.07" in doc  # the paper's cells
    assert "no training log given" in doc  # this report was given no training metrics: said, not invented
    # training logs: the paper's statistic (last-N mean ± std of the across-seed mean) over what was logged
    runs = {"tg": {"0": [{"step": s, "behaviour/compliance": v} for s, v in [(1, 0.0), (2, 0.5), (3, 1.0)]],
                   "1": [{"step": s, "behaviour/compliance": 1.0} for s in (1, 2, 3)]},
            "grpo": {"0": [{"step": 1, "task/pass_rate": 0.25}]}}
    sec = paper_section(res, runs, arms=("tg", "grpo"), window=2)
    cells = {(r[0].text, r[1].text): (r[2].text, r[3].text) for r in sec.tables[0].rows}
    tg, grpo = cells[("Markdown compliance", "this run (training time)")]
    assert tg.startswith("0.875 ± 0.125 (last 2 of steps 2–3, mean of 2 seed(s))"), tg  # means 0.75, 1.0
    assert "not logged" in grpo
    assert cells[("coding pass rate", "this run (training time)")][1].startswith("0.250 ± 0.000 (last 1 of steps 1–1")
    held_tg, _ = cells[("coding pass rate", "this run (held-out, preregistered)")]
    (code,) = [r for s in res.arm_summaries if s.arm == "tg" for r in s.rates if r.endpoint == "code_ok"]
    assert held_tg == f"{fmt.num(code.rate)} [{fmt.num(code.ci_low)}, {fmt.num(code.ci_high)}] (n = {code.n})"
