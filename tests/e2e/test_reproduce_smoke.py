"""`tgsuite reproduce --preset smoke` end to end: every stage, real models, Docker evaluation, a verdict, a report.

Nothing here is faked: tasks are generated and validated in Docker, the SFT base and the RL arms are trained, the
checkpoints are evaluated by hidden tests, the frozen plan is analysed and the report is rendered. The smoke preset is
tiny, so the verdict itself means nothing; the test checks the pipeline's contracts (order, hashes, resume).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.schema import RunManifest
from protocols.freeze import load_frozen
from protocols.run_registry import registrations, registry_repo
from tgsuite.pipeline.presets import SMOKE
from tgsuite.pipeline.reproduce import reproduce


@pytest.mark.docker
@pytest.mark.slow
def test_smoke_reproduction_end_to_end_and_resume(tmp_path: Path) -> None:
    lines: list[str] = []
    record = reproduce(SMOKE, tmp_path / "out", echo=lines.append)
    out = tmp_path / "out"
    assert record["decision"] in ("SHIP", "NO_SHIP", "INCONCLUSIVE")
    index = out / "report" / "index.html"
    assert index.is_file() and index.stat().st_size > 10_000
    html = index.read_text()
    assert record["decision"].replace("_", "-") in html

    # The protocol was frozen before any RL arm trained, and its hash travels into the evaluation manifests.
    frozen = load_frozen(out / "protocol" / "frozen.json")
    stage_times = {p.stem: json.loads(p.read_text())["started_at"] for p in (out / "stages").glob("*.json")}
    assert all(stage_times["protocol"] <= t for k, t in stage_times.items() if k.startswith("train_"))
    for arm in SMOKE.arms:
        for seed in SMOKE.seeds:
            train_manifest = json.loads((out / "train" / arm / f"s{seed}" / "manifest.json").read_text())
            assert train_manifest["protocol_hash"] == frozen.sha256
    manifest = RunManifest.model_validate_json((out / "eval" / "arms" / "manifest.json").read_text())
    assert manifest.protocol_hash == frozen.sha256
    assert manifest.sandbox == "docker" and manifest.isolated
    assert {a.name for a in manifest.arms} == {f"{a}@s{s}" for a in SMOKE.arms for s in SMOKE.seeds}
    # ... and both main evaluations were registered under it before their first episode (protocols.run_registry);
    # the analysis found every registered run of the plan's cells among those it analysed.
    base = RunManifest.model_validate_json((out / "eval" / "base" / "manifest.json").read_text())
    assert manifest.registration is not None and base.registration is not None
    _, repo = registry_repo(out / "protocol" / "frozen.json")
    regs = {r.run_id for r in registrations(repo) if r.protocol_sha256 == frozen.sha256}
    assert regs == {manifest.run_id, base.run_id}
    analysis = json.loads((out / "analysis" / "analysis.json").read_text())
    checks = {c["name"]: c["status"] for c in analysis["prereg_checks"]}
    assert checks["registered_runs"] == "pass" and checks["no_earlier_runs"] == "pass"

    # Every (checkpoint, task) episode has a result; none is an infra error scored as a failure.
    results = [json.loads(line) for line in (out / "eval" / "arms" / "results.jsonl").read_text().splitlines()]
    n_tasks = SMOKE.heldout_repos * SMOKE.heldout_tasks_per_repo
    assert len(results) == n_tasks * len(SMOKE.arms) * len(SMOKE.seeds)
    assert all(r["failure_class"] != "infra" or not r["resolved"] for r in results)

    # Re-running skips every stage (inputs unchanged) and gives the same decision.
    lines.clear()
    again = reproduce(SMOKE, out, echo=lines.append)
    assert again["decision"] == record["decision"]
    assert all(v["skipped"] for v in again["stages"].values()), again["stages"]
