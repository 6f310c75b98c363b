"""Reports of a plan's analysis that fit the plan: each reason said once, a zero-width sensitivity interval marked
not informative, no paper panel and no empty study panel for a plan that is not the paper's, and the arms'
endpoint, model and settings in the header."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalsuite.analyze import analyze
from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
from harness.rundir import load_run
from harness.schema import ArmSpec
from protocols.freeze import freeze_plan
from protocols.load import load_plan, protocol_from_dict
from reports.build import build_view

ROOT = Path(__file__).resolve().parents[2]
SHA = "a" * 64
STUDY_PANELS = {"paper", "noisy", "compute", "cando", "labels", "probes", "tiers"}


def _analysis(root: Path, arms: tuple[str, str], p_treat: float, p_base: float):  # noqa: ANN202
    data = load_plan(ROOT / "protocols" / "plans" / "smoke.toml").model_dump(mode="json")
    data["task_set"] = {**data["task_set"], "sha256": SHA}
    data["arms"] = [{**data["arms"][0], "name": arms[0]}, {**data["arms"][1], "name": arms[1]}]
    frozen = freeze_plan(protocol_from_dict(data), now="2026-01-01T00:00:00Z", anchor=False)
    design = SyntheticDesign(arms=(SyntheticArm(arms[0], p_treat, p_treat, seeds=(0, 1)),
                                   SyntheticArm(arms[1], p_base, p_base, seeds=(0, 1))), n_repos=4, tasks_per_repo=3)
    runs = write_synthetic_runs(root, design, rng=np.random.default_rng(0), protocol_hash=frozen.sha256,
                                task_set_sha256=SHA)
    loaded = [load_run(Path(r)) for r in runs]
    return analyze(frozen, runs), [r.manifest for r in loaded if r.manifest], [e for r in loaded for e in r.results]


def _view(a, manifests, eps):  # noqa: ANN001, ANN202
    return build_view(a, protocol=None, manifests=manifests, eps=eps, paged=set(), training_runs=None, max_pages=5,
                      now="2026-01-02T00:00:00Z")


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return _analysis(tmp_path_factory.mktemp("floor"), ("tg", "grpo"), 0.0, 0.0)


@pytest.fixture(scope="module")
def separated(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return _analysis(tmp_path_factory.mktemp("sep"), ("cand", "prod"), 1.0, 0.0)


def test_each_reason_is_said_once(floor) -> None:  # noqa: ANN001
    a, manifests, eps = floor
    assert any("no valid lower bound (" in r for r in a.decision.reasons)  # what the analysis repeats
    view = _view(a, manifests, eps)
    banner = [c.text for c in view.verdict.criterion_reasons] + view.verdict.decision_reasons
    for endpoint in ("code_ok", "behaviour_ok", "joint_ok"):
        line = next(t for t in banner if t.startswith(endpoint))
        assert line.count("not evidence") == 1 and "no valid lower bound" not in line
    assert sum(t.count("not evidence") for t in banner) == 3  # once per criterion, none in the decision's list
    criteria = next(s for s in view.sections if s.id == "criteria")
    assert not any("not evidence" in n for n in criteria.notes)  # not again under the table
    ids = {s.id for s in view.sections}
    assert STUDY_PANELS <= ids  # the paper's plan keeps its panels, "not run" where not run


def test_zero_width_sensitivity_is_not_informative_and_no_paper_panels(separated) -> None:  # noqa: ANN001
    a, manifests, eps = separated
    gee = next(s for c in a.criteria for s in c.sensitivity if s.name == "gee" and s.status == "ok")
    assert gee.ci_low == gee.ci_high and gee.verdict == "pass"
    spec = ArmSpec(name="cand@s0", policy="openai:http://127.0.0.1:8000/v1#m",
                   generation={"endpoint": "http://127.0.0.1:8000/v1/chat/completions", "model": "m",
                               "temperature": 0.0, "max_tokens": 512})
    view = _view(a, [manifests[0].model_copy(update={"arms": [*manifests[0].arms, spec]})], eps)
    sens = next(t for s in view.sections for t in s.tables if t.id == "sensitivity-table")
    gee_rows = [[c.text for c in r] for r in sens.rows if r[1].text == "gee" and r[3].text == "ok"]
    assert gee_rows and all(r[7] == "PASS (not informative)" and r[8] == "n/a" for r in gee_rows)
    assert all("zero-width interval" in r[9] for r in gee_rows)
    assert not any("gee" in w for s in view.sections for w in s.warnings)
    rates = next(t for s in view.sections for t in s.tables if t.id == "arm-rates")
    assert rates.header[-1] == "tests touched" and [r[-1].text for r in rates.rows] == ["—", "—"]  # synthetic runs: no grade
    ids = {s.id for s in view.sections}
    assert not ids & STUDY_PANELS  # none was run, and the plan is not the paper's
    text = " ".join([s.intro for s in view.sections] + [n for s in view.sections for n in s.notes])
    assert "TG" not in text and "GRPO" not in text and "paper" not in text
    facts = {f.key: f.value for f in view.facts}
    assert facts["model arm cand@s0"] == "http://127.0.0.1:8000/v1/chat/completions · m; temperature 0.0, max_tokens 512"
