"""``evalsuite.run_summary``: the descriptive per-arm aggregate (aggregate.json) of one run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.run_summary import aggregate_run, aggregate_run_dir
from harness.rundir import RunDirError
from harness.schema import EpisodeMetrics, EpisodeResult


def _r(iid: str, arm: str, repo: str, *, resolved: bool = False, behaviour: bool = False, status: str = "tests_failed",
       fc: str = "agent", steps: int = 3, validity: float | None = 0.5) -> EpisodeResult:
    return EpisodeResult(run_id="r", instance_id=iid, repo=repo, cluster=repo, arm=arm, policy=f"p-{arm}", seed=0,
                         status="ok" if resolved else status, failure_class="none" if resolved else fc,  # type: ignore[arg-type]
                         resolved=resolved, behaviour_ok=behaviour, joint_ok=resolved and behaviour,
                         metrics=EpisodeMetrics(steps=steps, tool_call_validity=validity))


def test_rates_denominators_2x2_per_repo_and_secondary() -> None:
    res = [_r("a1", "x", "A", resolved=True, behaviour=True, steps=2), _r("a2", "x", "A", resolved=True, steps=4),
           _r("b1", "x", "B", behaviour=True, steps=6, validity=None), _r("b2", "x", "B", status="empty_patch"),
           _r("b3", "x", "B", status="infra_error", fc="infra"),
           _r("b4", "x", "B", status="invalid_instance", fc="invalid_instance")]
    (arm,) = aggregate_run(res, now="t").arms
    assert (arm.n_episodes, arm.n_scored) == (6, 4)
    assert arm.statuses == {"empty_patch": 1, "infra_error": 1, "invalid_instance": 1, "ok": 2, "tests_failed": 1}
    code = {r.endpoint: r for r in arm.rates}["code_ok"]
    assert (code.successes, code.n, code.rate) == (2, 4, 0.5)
    # Wilson 95% for 2/4 (Newcombe 1998, Table I style; statsmodels proportion_confint(2, 4, method="wilson"))
    assert code.ci_low == pytest.approx(0.1500, abs=1e-4) and code.ci_high == pytest.approx(0.8500, abs=1e-4)
    assert code.se_clustered is not None  # two repositories
    jt = arm.joint_table
    assert (jt.both, jt.code_only, jt.behaviour_only, jt.neither) == (1, 1, 1, 1)
    per = {repo: {r.endpoint: r for r in rates} for repo, rates in arm.per_repo.items()}
    assert per["A"]["code_ok"].n == 2 and per["A"]["code_ok"].rate == 1.0 and per["B"]["code_ok"].n == 2
    sec = {m.metric: m for m in arm.secondary}
    assert sec["steps"].mean == 3.75 and sec["steps"].n == 4  # (2 + 4 + 6 + 3) / 4: scored episodes only
    assert sec["tool_call_validity"].n == 3 and sec["tool_call_validity"].mean == 0.5


def test_empty_arm_and_run_dir(tmp_path: Path) -> None:
    (arm,) = aggregate_run([_r("a", "x", "A", status="infra_error", fc="infra")], now="t").arms
    assert arm.n_scored == 0 and all(r.rate is None for r in arm.rates)
    with pytest.raises(RunDirError, match="no manifest.json"):
        aggregate_run_dir(tmp_path)


def test_aggregate_is_written_next_to_results(tmp_path: Path) -> None:
    from harness.runner import run_eval
    from harness.schema import TaskSet
    from tests.harness_fakes import FakeFactory, FixPolicy, NullFinishPolicy, make_calc_task

    inst, repo = make_calc_task(tmp_path / "repos", "calc-0")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="d" * 64, instances=[inst])
    out = tmp_path / "run"
    run_eval(ts, {"fix": FixPolicy(), "null": NullFinishPolicy()}, [0, 1], out, sandbox_factory=FakeFactory(
        {"calc-0": repo}))
    agg = aggregate_run_dir(out, config={"generation.temperature": 0.7})
    on_disk = json.loads((out / "aggregate.json").read_text())
    assert on_disk == json.loads(agg.model_dump_json())
    assert [a.arm for a in agg.arms] == ["fix", "null"] and agg.config["generation.temperature"] == 0.7
    assert agg.task_set_sha256 == "d" * 64 and agg.config["sandbox"] == "local" and agg.config["max_turns"] == 30
    assert {r.endpoint: r.rate for r in agg.arms[0].rates}["code_ok"] == 1.0
