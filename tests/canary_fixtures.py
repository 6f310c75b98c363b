"""Shared fixtures for the canary tests: a small `tgsuite eval`-shaped run directory and a test plan."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from harness.schema import ArmSpec, EpisodeMetrics, EpisodeResult, RunManifest
from protocols.canary import canary_plan_from_dict
from protocols.canary_schema import CanaryPlan

PLAN_TOML = Path(__file__).resolve().parents[1] / "protocols" / "plans" / "canary" / "gray_release.toml"


def write_eval_run(root: Path, *, arms: dict[str, float], n_repos: int = 8, tasks: int = 10, seeds: int = 3,
                   rng: np.random.Generator, infra: int = 0) -> Path:  # fmt: skip
    """A run dir with arms -> success probability; repositories differ (logit sd 1), episodes carry edits etc."""
    run = root / "run"
    repo_eff = rng.normal(0.0, 1.0, n_repos)
    insts = [f"repo{g}__t{t}" for g in range(n_repos) for t in range(tasks)]
    for arm, p in arms.items():
        for inst in insts:
            g = int(inst.split("__")[0][4:])
            pc = 1 / (1 + np.exp(-(np.log(p / (1 - p)) + repo_eff[g])))
            for s in range(seeds):
                ok = bool(rng.random() < pc)
                edits = int(rng.integers(0, 4))
                m = EpisodeMetrics(steps=6, tool_calls=int(rng.integers(2, 9)), tool_call_validity=float(rng.uniform(0.7, 1)),
                                   edits=edits, test_runs=int(rng.integers(0, 3)), rework=int(rng.random() < 0.2),
                                   hallucinations=int(rng.random() < 0.1))  # fmt: skip
                r = EpisodeResult(run_id="r", instance_id=inst, repo=inst.split("__")[0], cluster="c", arm=arm,
                                  policy="p", seed=s, status="ok" if ok else "tests_failed",
                                  failure_class="none" if ok else "agent", resolved=ok, metrics=m)  # fmt: skip
                _write(run, r)
    for k in range(infra):
        r = EpisodeResult(run_id="r", instance_id=insts[k], repo=insts[k].split("__")[0], cluster="c",
                          arm=next(iter(arms)), policy="p", seed=100 + k, status="infra_error", failure_class="infra")
        _write(run, r)
    man = RunManifest(run_id="r", created_at="2026-01-01T00:00:00Z", task_set_name="t", task_set_sha256="a" * 64,
                      instance_ids=insts, arms=[ArmSpec(name=a, policy="p") for a in arms], seeds=list(range(seeds)),
                      sandbox="local", isolated=False)  # fmt: skip
    (run / "manifest.json").write_text(man.model_dump_json(), encoding="utf-8")
    return run


def _write(run: Path, r: EpisodeResult) -> None:
    out = run / "episodes" / r.instance_id / r.arm / f"s{r.seed}" / "a0" / "result.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(r.model_dump_json(), encoding="utf-8")


def small_plan(**over: Any) -> CanaryPlan:
    """The bundled plan scaled to a few thousand units (so tests run in seconds)."""
    import tomllib

    data = tomllib.loads(PLAN_TOML.read_text(encoding="utf-8"))
    data.update(horizon_units=3000, min_units_per_arm=50, min_duration_hours=72, max_duration_hours=600)
    data.update(over)
    return canary_plan_from_dict(data, source="small_plan")


def promotable_plan() -> CanaryPlan:
    """``small_plan`` at half share with 0.04 margins: an A/A replay of 6,000 units over 20 days PROMOTEs."""
    metrics = [{**m.model_dump(), "margin": 0.04} if m.margin is not None else m.model_dump() for m in small_plan().metrics]
    return small_plan(canary_share=0.5, horizon_units=20_000, min_duration_hours=72, max_duration_hours=2000,
                      metrics=metrics)  # fmt: skip


def write_replay_log(run: Path, out: Path, *, start: datetime, aa: bool) -> tuple[Path, Path]:
    """A 6,000-unit, half-share, 20-day replay of ``run`` (tg as canary, grpo as control) written as the two logs."""
    from evalsuite.canary.replay import ReplayConfig, replay, write_jsonl

    log = replay([run], treatment="tg", control="grpo", rng=np.random.default_rng(1),
                 cfg=ReplayConfig(start=start, n_units=6000, canary_share=0.5, aa=aa, days=20))  # fmt: skip
    write_jsonl(log.episodes, out / "episodes.jsonl")
    write_jsonl(log.assignments, out / "assignments.jsonl")
    return out / "episodes.jsonl", out / "assignments.jsonl"
