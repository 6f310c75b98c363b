"""Outcome tables from run directories (ARCHITECTURE §4 'Run directory'; STATS §8.1).

How a run encodes "arm × training seed" (decided here; the runner and the pipeline follow it):
1. preferred: the runner's arm name is ``<arm>@s<train_seed>``, e.g. ``tg@s0``, ``grpo@s3`` — one run can then hold
   every arm and seed;
2. otherwise the arm name is the plain protocol arm name (``tg``) and the run's manifest has an ``ArmSpec`` of that
   name with ``train_seed`` set — typically one run per training seed;
3. a plan with one training seed per arm (a single-checkpoint plan) also takes the plain arm name (``cand``) as
   that seed.
Anything else is an error naming the run and the fix. ``EpisodeResult.seed`` is the *episode* (sampling) seed:
the K episodes of a (arm, training seed, task) cell have distinct episode seeds.

Rules applied (and counted, never silently): the highest ``attempt`` per (run, instance, arm, episode seed) wins;
instances marked ``invalid_instance`` are dropped from every arm; an infra failure on the final attempt is excluded
(``infra = "exclude"``) or scored as a failure on every endpoint (``"count_as_failure"``); a (arm, seed, task) cell
with no scored episode is "missing", one with fewer than K is "partial" (missing for coverage, the drop-task rule
and the worst case); a cell holding one episode seed twice is refused. Expected cells are preregistered seeds ×
the manifests' instances × K. ``evalsuite.integrity`` adds the checkpoint and attempt rules.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from evalsuite.rates import StatsInputError
from harness.rundir import LoadedRun, load_run
from harness.schema import EpisodeResult, RunManifest
from protocols.schema import Protocol

log = logging.getLogger(__name__)

_ARM_SEED = re.compile(r"^(?P<arm>[A-Za-z0-9_.\-]+)@s(?P<seed>\d+)$")
BOOL_COLS = ("behaviour_ok", "code_ok", "joint_ok")
FLOAT_COLS = ("tool_call_validity", "steps", "hallucinations")
STR_COLS = ("arm", "role", "instance_id", "repo", "difficulty", "template_tier")  # required; "stratum" is optional
INT_COLS = ("train_seed", "episode_seed")


class EvalDataError(StatsInputError):
    """The run data do not fit the plan (unbalanced, missing arm, bad field). The message names the fix."""


def single_seed(protocol: Protocol) -> int | None:
    """The one preregistered training seed of a single-checkpoint plan (one seed per arm), else None."""
    seeds = protocol.design.planned_seeds
    return seeds[0] if len(seeds) == 1 else None


def parse_arm(arm: str, manifest: RunManifest, protocol_arms: set[str], single: int | None = None) -> tuple[str, int]:
    """Map a runner arm name to (protocol arm, training seed) by the rules in the module docstring; with ``single``
    (a single-checkpoint plan's one seed, :func:`single_seed`) a plain protocol arm name such as ``cand`` maps to
    that seed."""
    m = _ARM_SEED.match(arm)
    if m:
        return m["arm"], int(m["seed"])
    spec = next((a for a in manifest.arms if a.name == arm), None)
    if spec is not None and spec.train_seed is not None:
        return arm, int(spec.train_seed)
    if single is not None and arm in protocol_arms:
        return arm, single
    raise EvalDataError(
        f"run {manifest.run_id}: arm {arm!r} carries no training seed; name runner arms '<arm>@s<seed>' (e.g. "
        f"'{arm}@s0') or set ArmSpec.train_seed in the manifest. Protocol arms: {sorted(protocol_arms)}"
    )


def _row(res: EpisodeResult, arm: str, role: str, train_seed: int, infra: str) -> dict[str, object] | None:
    as_failure = res.failure_class == "infra" and infra == "count_as_failure"
    if not res.scored and not as_failure:
        return None
    m = res.metrics
    return {
        "run_id": res.run_id, "arm": arm, "role": role, "train_seed": train_seed, "instance_id": res.instance_id,
        "repo": res.cluster or res.repo, "episode_seed": res.seed, "status": res.status,
        "counted_as_failure": as_failure, "behaviour_ok": res.behaviour_ok and not as_failure,
        "code_ok": res.resolved and not as_failure, "joint_ok": res.joint_ok and not as_failure,
        "tool_call_validity": np.nan if m.tool_call_validity is None or as_failure else float(m.tool_call_validity),
        "steps": np.nan if as_failure else float(m.steps),
        "hallucinations": np.nan if as_failure else float(m.hallucinations),
        "difficulty": res.difficulty, "template_tier": res.template_tier, "stratum": res.stratum,
        "feedback_kind": res.feedback_kind or "",
    }  # fmt: skip


@dataclass(frozen=True)
class OutcomeTable:
    """Scored episodes of the two protocol arms plus everything needed to report coverage honestly."""

    episodes: pd.DataFrame
    arms: dict[str, str]  # role -> arm name
    seeds: dict[str, list[int]]  # arm -> training seeds found
    tasks: list[str]  # analysis tasks (complete in every arm × seed), sorted
    repo_of: dict[str, str]
    k: int
    expected_episodes: int
    n_expected_tasks: int = 0
    n_scored_all_tasks: int = 0  # scored episodes before incomplete tasks were dropped (coverage numerator)
    dropped_tasks: list[str] = field(default_factory=list)
    scored_per_arm: dict[str, int] = field(default_factory=dict)
    infra_excluded: int = 0
    infra_counted: int = 0
    invalid_instances: list[str] = field(default_factory=list)
    superseded: int = 0
    missing_cells: list[tuple[str, int, str, str]] = field(default_factory=list)  # arm, seed, task, reason
    runs: list[LoadedRun] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    missing_seeds: dict[str, list[int]] = field(default_factory=dict)  # arm -> preregistered seeds without results

    @property
    def per_arm_coverage(self) -> dict[str, float]:
        """Per arm: observed episodes that enter the analysis / preregistered seeds × tasks × K of that arm."""
        n_exp = self.expected_episodes / 2
        return {a: (self.scored_per_arm.get(a, 0) / n_exp if n_exp else 0.0) for a in self.arms.values()}

    @property
    def coverage(self) -> float:
        """The smaller per-arm coverage, counted after incomplete tasks are dropped (``per_arm_coverage``)."""
        cov = self.per_arm_coverage
        return min(cov.values()) if cov else 0.0

    def observed(self, arm: str | None = None) -> int:
        ep = self.episodes if arm is None else self.episodes[self.episodes["arm"] == arm]
        return int((ep["status"] != "missing").sum())

    def repo_labels(self) -> np.ndarray:
        return np.array([self.repo_of[t] for t in self.tasks])

    def cell_matrix(self, endpoint: str, role: Literal["treatment", "baseline"]) -> np.ndarray:
        """(seeds × tasks) cell means of ``endpoint`` for one arm over the analysis tasks."""
        return cell_matrix(self.episodes, endpoint, self.arms[role], self.seeds[self.arms[role]], self.tasks)


def validate_episode_frame(df: pd.DataFrame) -> None:
    """Check columns and types of an episode table; raise :class:`EvalDataError` naming the column and fix."""
    if not isinstance(df, pd.DataFrame):
        raise EvalDataError(f"expected a pandas DataFrame of episodes, got {type(df).__name__}")
    need = (*STR_COLS, *INT_COLS, *BOOL_COLS)
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise EvalDataError(f"episode table lacks columns {missing}; build it with evalsuite.outcomes.build_outcome_table")
    for c in BOOL_COLS:
        if df[c].dtype != bool:
            raise EvalDataError(f"episode table column {c!r} must be bool, got {df[c].dtype}; map outcomes to True/False")
    for c in INT_COLS:
        if not pd.api.types.is_integer_dtype(df[c]):
            raise EvalDataError(f"episode table column {c!r} must be integer, got {df[c].dtype}")
    bad = df["joint_ok"] != (df["behaviour_ok"] & df["code_ok"])
    if bad.any():
        raise EvalDataError(f"episode table: joint_ok != behaviour_ok & code_ok in {int(bad.sum())} rows")


def cell_matrix(df: pd.DataFrame, endpoint: str, arm: str, seeds: list[int], tasks: list[str]) -> np.ndarray:
    sub = df[df["arm"] == arm]
    if sub.empty:
        raise EvalDataError(f"arm {arm!r} has no scored episodes; check the runner's arm names")
    cells = sub.groupby(["train_seed", "instance_id"])[endpoint].mean().unstack("instance_id")
    cells = cells.reindex(index=seeds, columns=tasks)
    return cells.to_numpy(dtype=float)


def _collect_rows(
    runs: list[LoadedRun], protocol: Protocol, infra: str
) -> tuple[list[dict[str, object]], set[str], int, int, list[str]]:
    roles = {a.name: a.role for a in protocol.arms}
    pc = protocol.assay_sensitivity.positive_control
    ctrl = {pc.arm} if pc else set()
    rows: list[dict[str, object]] = []
    invalid: set[str] = set()
    n_infra_ex = n_infra_ct = 0
    foreign: set[str] = set()
    for run in runs:
        for res in run.results:
            arm, seed = parse_arm(res.arm, run.need_manifest(), set(roles) | ctrl, single_seed(protocol))
            if arm not in roles:
                foreign.add(arm)
                continue
            if res.failure_class == "invalid_instance":
                invalid.add(res.instance_id)
                continue
            row = _row(res, arm, roles[arm], seed, infra)
            if res.failure_class == "infra":
                n_infra_ct += row is not None
                n_infra_ex += row is None
            if row is not None:
                rows.append(row)
    warn = [f"runs contain arms {sorted(foreign)} that are not in the plan; they are ignored"] if foreign else []
    return rows, invalid, n_infra_ex, n_infra_ct, warn


def _expected_tasks(runs: list[LoadedRun], protocol: Protocol) -> tuple[list[str], list[str]]:
    shas = {r.need_manifest().task_set_sha256 for r in runs}
    if len(shas) > 1:
        raise EvalDataError(
            f"runs use different task sets {sorted(s[:12] for s in shas)}; analyse runs of one held-out set together"
        )
    tasks = sorted({i for r in runs for i in r.need_manifest().instance_ids})
    return tasks, []  # an instance list other than the plan's n_tasks: evalsuite.analyze.task_list_reason


MissingFill = Literal["plan", "worst_case"]


def _seeds(df: pd.DataFrame, arms: dict[str, str], protocol: Protocol) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Found and absent preregistered seeds per arm; an unplanned seed is an error (seeds are never chosen later)."""
    planned = protocol.design.planned_seeds
    found: dict[str, list[int]] = {}
    absent: dict[str, list[int]] = {}
    for role, name in arms.items():
        have = sorted(int(s) for s in df.loc[df["arm"] == name, "train_seed"].unique().tolist())
        if not have:
            raise EvalDataError(
                f"the {role} arm {name!r} has no scored episodes in the runs; check the runner's arm names "
                f"('{name}@s<seed>') and that the runs finished"
            )
        extra = [s for s in have if s not in planned]
        if extra:
            raise EvalDataError(
                f"arm {name}: training seeds {extra} are not preregistered (the plan's seeds are {planned}, "
                "design.seed_ids or 0..seeds_per_arm-1); remove those runs, or freeze a plan that lists them before "
                "training — seeds cannot be chosen after the results"
            )
        found[name] = have
        absent[name] = [s for s in planned if s not in have]
    return found, absent


def _frame(rows: list[dict[str, object]], invalid: set[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(_row_columns()))
    df = df.astype({c: bool for c in (*BOOL_COLS, "counted_as_failure")}).astype({c: "int64" for c in INT_COLS})
    return df[~df["instance_id"].isin(invalid)].reset_index(drop=True)


def build_outcome_table(
    protocol: Protocol, run_dirs: list[str | Path] | list[LoadedRun], *, infra: str | None = None,
    missing_fill: MissingFill = "plan",
) -> OutcomeTable:
    """Load runs and build the validated outcome table under the plan's missing-data rule (or ``infra``).

    ``missing_fill = "worst_case"`` scores every missing cell (including preregistered seeds without results) against
    the treatment — a failure in the treatment arm, a success in the baseline arm — for the worst-case sensitivity
    analysis. Coverage is per arm, over the episodes that enter the analysis (after incomplete tasks are dropped),
    against preregistered seeds × tasks × K; cells filled in by a rule are not counted as observed.
    """
    if not run_dirs:
        raise EvalDataError("no run directories given; pass --runs DIR (one or more `tgsuite eval` outputs)")
    runs = [r if isinstance(r, LoadedRun) else load_run(r) for r in run_dirs]
    rows, invalid, n_ex, n_ct, warnings = _collect_rows(runs, protocol, infra or protocol.missing_data.infra)
    all_tasks, w2 = _expected_tasks(runs, protocol)
    warnings += w2
    df = _frame(rows, invalid)
    expected_tasks = [t for t in all_tasks if t not in invalid]
    arms = {"treatment": protocol.arm("treatment").name, "baseline": protocol.arm("baseline").name}
    k = protocol.design.episodes_per_task
    found, absent = _seeds(df, arms, protocol)
    fill = "worst_case" if missing_fill == "worst_case" else (
        "failure" if protocol.missing_data.missing_cell == "count_as_failure" else "none")
    seeds = {a: (protocol.design.planned_seeds if fill != "none" else found[a]) for a in arms.values()}
    missing = _missing_cells(df, arms, found, expected_tasks, k)
    missing += [(a, s, t, "missing_seed") for a in arms.values() for s in absent[a] for t in expected_tasks]
    for a, miss in absent.items():
        if miss:
            warnings.append(f"arm {a}: preregistered training seed(s) {miss} have no results"
                            + (" and are scored as failures (intention to treat)" if fill == "failure" else ""))
    if fill != "none" and missing:
        df = _fill_missing(df, missing, arms, worst_case=fill == "worst_case", k=k)
    missing_tasks = set() if fill != "none" else {t for _, _, t, r in missing if r != "missing_seed"}
    repo_of = dict(zip(df["instance_id"], df["repo"], strict=False))
    tasks = [t for t in expected_tasks if t not in missing_tasks and t in repo_of]
    n_scored = int((df["status"] != "missing").sum())
    df = df[df["instance_id"].isin(tasks)].reset_index(drop=True)
    partial = {(a, s, t) for a, s, t, r in missing if r == "partial"}
    real = df[df["status"] != "missing"]
    in_partial = [(a, s, t) in partial for a, s, t in zip(real["arm"], real["train_seed"], real["instance_id"],
                                                           strict=True)] if partial else False  # fmt: skip
    real = real[~np.asarray(in_partial, dtype=bool)] if partial else real
    per_arm = {a: int((real["arm"] == a).sum()) for a in arms.values()}
    n_plan = len(protocol.design.planned_seeds)
    if missing_tasks:
        warnings.append(f"{len(missing_tasks)} task(s) lack a result in some arm x seed and were dropped from all arms")
    return OutcomeTable(
        episodes=df, arms=arms, seeds=seeds, tasks=tasks, repo_of={t: repo_of[t] for t in tasks}, k=k,
        expected_episodes=2 * n_plan * len(expected_tasks) * k, n_expected_tasks=len(expected_tasks),
        n_scored_all_tasks=n_scored, dropped_tasks=sorted(set(expected_tasks) - set(tasks)), scored_per_arm=per_arm,
        infra_excluded=n_ex, infra_counted=n_ct, invalid_instances=sorted(invalid),
        superseded=sum(r.superseded for r in runs), missing_cells=missing, runs=runs, warnings=warnings,
        missing_seeds={a: v for a, v in absent.items() if v},
    )  # fmt: skip


def _missing_cells(df: pd.DataFrame, arms: dict[str, str], seeds: dict[str, list[int]], tasks: list[str],
                   k: int) -> list[tuple[str, int, str, str]]:  # fmt: skip
    """Cells without K scored episodes: none ("no_result") or fewer than K ("partial": a partly observed cell is
    missing for coverage and the worst case, so deleting one bad episode of a cell cannot pass as observed)."""
    dup = df.groupby(["arm", "train_seed", "instance_id", "episode_seed"]).size()
    dup = dup[dup > 1]
    if len(dup):
        a, s, t, e = dup.index[0]
        raise EvalDataError(
            f"{len(dup)} cells hold the same episode seed more than once (e.g. arm {a} seed {s} task {t}: episode "
            f"seed {e} x{int(dup.iloc[0])}); each of a cell's K episodes is its own sampling seed, so a copy is not a "
            "new episode: remove the copied result.json (or duplicate run) and re-run that episode"
        )
    counts = df.groupby(["arm", "train_seed", "instance_id"]).size()
    over = counts[counts > k]
    if len(over):
        raise EvalDataError(
            f"{len(over)} cells have more than K={k} scored episodes (e.g. {over.index[0]}); the plan says "
            f"episodes_per_task = {k}: remove duplicate runs or fix design.episodes_per_task"
        )
    have = counts.to_dict()
    return [(a, s, t, "no_result" if (a, s, t) not in have else "partial") for a in arms.values() for s in seeds[a]
            for t in tasks if have.get((a, s, t), 0) < k]  # fmt: skip


def _row_columns() -> tuple[str, ...]:
    return (
        "run_id", "arm", "role", "train_seed", "instance_id", "repo", "episode_seed", "status", "counted_as_failure",
        *BOOL_COLS, *FLOAT_COLS, "difficulty", "template_tier", "stratum", "feedback_kind",
    )  # fmt: skip


def _fill_missing(
    df: pd.DataFrame, missing: list[tuple[str, int, str, str]], arms: dict[str, str], *, worst_case: bool, k: int
) -> pd.DataFrame:
    """Add a row per missing episode slot of each missing or partly observed cell: a failure (ITT), or with
    ``worst_case`` a failure in the treatment arm and a success in the baseline arm. Rows have status 'missing'
    (never counted as observed)."""
    role_of = {v: k for k, v in arms.items()}
    meta = df.drop_duplicates("instance_id").set_index("instance_id")
    have = df.groupby(["arm", "train_seed", "instance_id"]).size().to_dict()
    rows = []
    for arm, seed, task, _ in missing:
        if task not in meta.index:
            continue
        info, ok = meta.loc[task], worst_case and role_of[arm] == "baseline"
        rows += [{
            "run_id": "", "arm": arm, "role": role_of[arm], "train_seed": seed, "instance_id": task,
            "repo": info["repo"], "episode_seed": -1, "status": "missing", "counted_as_failure": not ok,
            "behaviour_ok": ok, "code_ok": ok, "joint_ok": ok, "tool_call_validity": np.nan,
            "steps": np.nan, "hallucinations": np.nan, "difficulty": info["difficulty"],
            "template_tier": info["template_tier"], "stratum": info["stratum"], "feedback_kind": "",
        }] * max(k - have.get((arm, seed, task), 0), 1)  # fmt: skip
    return pd.concat([df, pd.DataFrame(rows, columns=df.columns)], ignore_index=True) if rows else df
