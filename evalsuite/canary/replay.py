"""Replay a `tgsuite eval` run of two checkpoints as a synthetic production log, so the canary flow runs offline.

What is synthetic and what is not:
* **outcomes** come from real graded episodes: each logged episode copies one scored ``EpisodeResult`` of its arm
  (``resolved`` -> task_completed; ``metrics.edits > 0`` -> code_produced; ``metrics.test_runs > 0`` -> code_ran;
  ``metrics.edits``; ``metrics.rework > 0`` -> rework; ``metrics.tool_calls`` and the invalid share of them ->
  tool_errors; ``metrics.hallucinations`` -> hallucination_reports). Infra and invalid-instance episodes are never
  used (they are not model outcomes) and are counted in the summary;
* **traffic** is simulated with the explicit ``rng``: ``n_units`` units (repositories of production users) arrive
  uniformly over ``days`` (a Poisson process given its count), each assigned to the canary with probability
  ``canary_share``; a unit has 1 + Poisson(``extra_episodes``) episodes, the first at arrival and then exponential
  gaps of mean ``gap_hours``; **clustering**: each unit is tied to one repository of the eval run and all its
  episodes are drawn from that repository's episodes, so units differ the way repositories do;
* **user feedback** does not exist in an eval run: a resolved episode gets a thumbs-up with probability
  ``p_up``, an unresolved one a thumbs-down with probability ``p_down``, else no rating.

``aa=True`` draws both arms from the control arm's episodes: an A/A log on which every null hypothesis is true.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from evalsuite.canary.schema import CanaryAssignment, CanaryEpisode
from evalsuite.rates import StatsInputError
from harness.rundir import load_run
from harness.schema import EpisodeResult


@dataclass(frozen=True)
class ReplayConfig:
    start: datetime  # aware (UTC): the first possible arrival
    n_units: int = 3000
    canary_share: float = 0.1
    days: float = 14.0
    extra_episodes: float = 4.0
    gap_hours: float = 3.0
    p_up: float = 0.3
    p_down: float = 0.3
    control_model: str = "prod-current"
    canary_model: str = "tg-candidate"
    aa: bool = False


@dataclass(frozen=True)
class ReplayLog:
    episodes: tuple[CanaryEpisode, ...]
    assignments: tuple[CanaryAssignment, ...]
    source_episodes: dict[str, int]  # scored eval episodes available per arm
    excluded_infra: int  # eval episodes not used (infra / invalid instance)


def _arm_matches(runner_arm: str, wanted: str) -> bool:
    return runner_arm == wanted or runner_arm.split("@")[0] == wanted


def pool_by_repo(run_dirs: Sequence[str | Path], arm: str) -> tuple[dict[str, list[EpisodeResult]], int]:
    """Scored episodes of ``arm`` (runner arm name or its part before ``@``) by repository, and the infra count."""
    pool: dict[str, list[EpisodeResult]] = defaultdict(list)
    excluded = 0
    for d in run_dirs:
        for r in load_run(d).results:
            if not _arm_matches(r.arm, arm):
                continue
            if r.scored:
                pool[r.repo].append(r)
            else:
                excluded += 1
    if not pool:
        raise StatsInputError(f"replay: no scored episodes of arm {arm!r} in {', '.join(map(str, run_dirs))}; "
                              "name an arm of the run (its manifest lists them)")  # fmt: skip
    return dict(pool), excluded


def _row(r: EpisodeResult, *, eid: str, unit: str, arm: str, ts: datetime, model: str, fb: str | None
         ) -> CanaryEpisode:  # fmt: skip
    m = r.metrics
    produced = m.edits > 0
    errors = 0 if m.tool_call_validity is None else int(round(m.tool_calls * (1.0 - m.tool_call_validity)))
    return CanaryEpisode(episode_id=eid, unit_id=unit, arm=arm, ts=ts, served_model=model,  # type: ignore[arg-type]
                         task_completed=r.resolved, code_produced=produced,
                         code_ran=(m.test_runs > 0) if produced else None, n_edits=m.edits, rework=m.rework > 0,
                         feedback=fb, tool_calls=m.tool_calls, tool_errors=min(errors, m.tool_calls),  # type: ignore[arg-type]
                         hallucination_reports=m.hallucinations)  # fmt: skip


def replay(run_dirs: Sequence[str | Path], *, treatment: str, control: str, cfg: ReplayConfig,
           rng: np.random.Generator) -> ReplayLog:  # fmt: skip
    """Build the synthetic log (see the module docstring); deterministic given ``rng``'s state."""
    if cfg.start.tzinfo is None:
        raise StatsInputError("replay: start must carry a time zone (UTC)")
    ctrl, ex_c = pool_by_repo(run_dirs, control)
    trt, ex_t = (ctrl, 0) if cfg.aa else pool_by_repo(run_dirs, treatment)
    repos = sorted(set(ctrl) & set(trt))
    if not repos:
        raise StatsInputError(f"replay: arms {treatment!r} and {control!r} share no repository")
    arrival = np.sort(rng.uniform(0.0, cfg.days * 24.0, cfg.n_units))
    canary = rng.random(cfg.n_units) < cfg.canary_share
    repo_of = rng.integers(0, len(repos), cfg.n_units)
    n_eps = 1 + rng.poisson(cfg.extra_episodes, cfg.n_units)
    episodes, assignments = [], []
    for u in range(cfg.n_units):
        unit, arm = f"u{u:06d}", "canary" if canary[u] else "control"
        t0 = cfg.start + timedelta(hours=float(arrival[u]))
        assignments.append(CanaryAssignment(unit_id=unit, arm=arm, assign_ts=t0))  # type: ignore[arg-type]
        pool = (trt if canary[u] else ctrl)[repos[repo_of[u]]]
        offsets = np.concatenate([[0.0], np.cumsum(rng.exponential(cfg.gap_hours, n_eps[u] - 1))])
        for j, off in enumerate(offsets):
            r = pool[int(rng.integers(0, len(pool)))]
            fb_draw = rng.random()
            fb = ("up" if fb_draw < cfg.p_up else None) if r.resolved else ("down" if fb_draw < cfg.p_down else None)
            episodes.append(_row(r, eid=f"{unit}-e{j}", unit=unit, arm=arm, ts=t0 + timedelta(hours=float(off)),
                                 model=cfg.canary_model if canary[u] else cfg.control_model, fb=fb))  # fmt: skip
    episodes.sort(key=lambda e: e.ts)
    return ReplayLog(episodes=tuple(episodes), assignments=tuple(assignments),
                     source_episodes={"control": sum(map(len, ctrl.values())), "canary": sum(map(len, trt.values()))},
                     excluded_infra=ex_c + ex_t)  # fmt: skip


def write_jsonl(rows: Sequence[CanaryEpisode] | Sequence[CanaryAssignment], path: str | Path) -> Path:
    """One JSON object per line (timestamps ISO 8601 UTC with a trailing Z), written atomically."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in rows:
            data = r.model_dump(mode="json")
            for key in ("ts", "assign_ts"):
                if key in data:
                    data[key] = data[key].replace("+00:00", "Z")
            fh.write(json.dumps(data, separators=(",", ":")) + "\n")
    tmp.replace(p)
    return p
