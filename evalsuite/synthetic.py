"""SYNTHETIC run directories for tests, benchmarks and demos of the analysis — never real results.

Writes the same layout the harness runner writes (``manifest.json`` + ``episodes/<instance>/<arm>/s<seed>/
a<attempt>/result.json``) from a logit model with seed, repository and task effects, so the full
``tgsuite analyze`` path can be exercised without models or Docker. Every manifest carries
``host = {"synthetic": true}`` and run ids start with ``synthetic-``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import special

from harness.schema import ArmSpec, EpisodeMetrics, EpisodeResult, RunManifest


@dataclass(frozen=True)
class SyntheticArm:
    name: str
    p_behaviour: float
    p_code: float
    seeds: tuple[int, ...] = (0, 1, 2)


@dataclass(frozen=True)
class SyntheticDesign:
    arms: tuple[SyntheticArm, ...]
    n_repos: int = 4
    tasks_per_repo: int = 5
    episodes: int = 1
    seed_sd: float = 0.2
    task_sd: float = 1.0
    infra_rate: float = 0.0
    drop: tuple[tuple[str, int, str], ...] = field(default_factory=tuple)  # (arm, seed, instance) without result
    arm_style: str = "at"  # "at": runner arm '<arm>@s<seed>' in one run; "per_run": one run per arm x seed


def _result(run_id: str, inst: str, repo: str, arm: str, ep_seed: int, attempt: int, b: bool, c: bool,
            infra: bool, difficulty: str) -> EpisodeResult:  # fmt: skip
    if infra:
        return EpisodeResult(run_id=run_id, instance_id=inst, repo=repo, cluster=repo, arm=arm, policy="synthetic",
                             seed=ep_seed, attempt=attempt, status="infra_error", failure_class="infra",
                             infra_kind="synthetic", difficulty=difficulty)  # fmt: skip
    return EpisodeResult(
        run_id=run_id, instance_id=inst, repo=repo, cluster=repo, arm=arm, policy="synthetic", seed=ep_seed,
        attempt=attempt, status="ok" if c else "tests_failed", failure_class="none" if c else "agent", resolved=c,
        behaviour_ok=b, joint_ok=b and c, difficulty=difficulty,
        metrics=EpisodeMetrics(steps=int(5 + 3 * (not c)), tool_calls=6, tool_call_validity=0.9 if b else 0.7,
                               hallucinations=int(not b)),
    )  # fmt: skip


def _manifest(run_id: str, instances: list[str], arms: list[ArmSpec], seeds: list[int], protocol_hash: str | None,
              task_set_sha256: str, created_at: str) -> RunManifest:  # fmt: skip
    return RunManifest(run_id=run_id, created_at=created_at, task_set_name="synthetic",
                       task_set_sha256=task_set_sha256, instance_ids=instances, arms=arms, seeds=seeds,
                       sandbox="local", isolated=False, protocol_hash=protocol_hash, host={"synthetic": True})  # fmt: skip


def write_synthetic_runs(
    root: str | Path,
    design: SyntheticDesign,
    *,
    rng: np.random.Generator,
    protocol_hash: str | None,
    task_set_sha256: str,
    created_at: str = "2100-01-01T00:00:00Z",
) -> list[Path]:
    """Write synthetic runs under ``root``; return the run directories."""
    root = Path(root)
    repos = [f"repo{g}" for g in range(design.n_repos)]
    instances = [f"{r}__t{t}" for r in repos for t in range(design.tasks_per_repo)]
    task_eff = rng.normal(0, design.task_sd, len(instances))
    diff = ["easy" if i % 2 == 0 else "hard" for i in range(len(instances))]
    dirs: dict[str, Path] = {}
    specs: dict[str, list[ArmSpec]] = {}
    for arm in design.arms:
        for s in arm.seeds:
            seed_eff = rng.normal(0, design.seed_sd, 2)
            run_id = "synthetic-all" if design.arm_style == "at" else f"synthetic-{arm.name}-s{s}"
            runner_arm = f"{arm.name}@s{s}" if design.arm_style == "at" else arm.name
            specs.setdefault(run_id, []).append(ArmSpec(name=runner_arm, policy="synthetic", train_seed=s))
            rd = dirs.setdefault(run_id, root / run_id)
            for i, inst in enumerate(instances):
                if (arm.name, s, inst) in design.drop:
                    continue
                pb = special.expit(special.logit(arm.p_behaviour) + seed_eff[0] + task_eff[i])
                pc = special.expit(special.logit(arm.p_code) + seed_eff[1] + task_eff[i])
                for k in range(design.episodes):
                    infra = bool(rng.random() < design.infra_rate)
                    res = _result(run_id, inst, inst.split("__")[0], runner_arm, k, 0, bool(rng.random() < pb),
                                  bool(rng.random() < pc), infra, diff[i])  # fmt: skip
                    out = rd / "episodes" / inst / runner_arm / f"s{k}" / "a0" / "result.json"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(res.model_dump_json(), encoding="utf-8")
    seeds = list(range(design.episodes))
    for run_id, rd in dirs.items():
        m = _manifest(run_id, instances, specs[run_id], seeds, protocol_hash, task_set_sha256, created_at)
        (rd / "manifest.json").write_text(m.model_dump_json(indent=2), encoding="utf-8")
    return list(dirs.values())
