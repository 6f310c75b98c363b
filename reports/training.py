"""Training-run metrics for the report: read ``metrics.jsonl`` files and shape them into curves.

Input: a mapping ``{arm: {seed: path}}`` where each path is a training run directory (containing ``metrics.jsonl``)
or the ``metrics.jsonl`` file itself. Each line is one JSON object with ``step`` and namespaced keys
(``behaviour/compliance``, ``reward/task``, ``loss/kl`` …).

What is computed here is descriptive only, at the level of formatting a log: the across-seed mean curve at each
step (over the seeds that logged that step, and the count is kept), and the paper's display statistic, the mean ±
std (ddof = 0, METHOD §6.11) of a metric over the last ``window`` logged steps. No test, interval or p-value is
computed; those belong to ``evalsuite``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# (candidate keys in order of preference, title): `tgsuite train` logs the pass rate as task/pass_rate; reward/task
# is accepted too (the per-component task reward, 0/1 per episode).
CURVE_METRICS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("behaviour/compliance",), "behaviour compliance"),
    (("task/pass_rate", "reward/task"), "pass rate"),
    # the gate diagnostics of targeted guidance (repro.trainer_step, METHOD §6.11): how many turns the gate guides,
    # and the divergence and the teacher-student gap P_T(v*) - P_S(v*) at the behaviour's first token; an inactive
    # gate or a hint that does not move the teacher shows as 0 here (GRPO runs log no teacher: no curve)
    (("guidance/guided_turn_frac",), "share of turns gated"),
    (("guidance/anchor_kl",), "KL at the behaviour's first token"),
    (("guidance/anchor_gap",), "P_T − P_S at the behaviour's first token"),
)
DEFAULT_WINDOW = 32
CONTRIB_PREFIX = "reward/contrib/"  # sign·w·R_k per reward term (repro.rewards); reward/<term> is R_k itself


class MetricsError(ValueError):
    """A metrics.jsonl file that cannot be read; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class SeedCurve:
    seed: str
    steps: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class WindowStat:
    """Mean ± std (ddof = 0) of a logged metric over the last ``n`` logged steps (``first_step``…``last_step``)."""

    mean: float
    std: float
    n: int
    first_step: float
    last_step: float


@dataclass(frozen=True)
class ArmCurves:
    arm: str
    metric: str
    seeds: tuple[SeedCurve, ...]
    mean_steps: tuple[float, ...]
    mean_values: tuple[float, ...]
    mean_counts: tuple[int, ...]  # how many seeds logged each step of the mean curve


def pick_key(runs: Mapping[str, Mapping[str, list[dict[str, float]]]], candidates: tuple[str, ...]) -> str:
    """The first candidate key that any logged row carries (the first candidate when none does)."""
    for key in candidates:
        if any(key in row for per_seed in runs.values() for rows in per_seed.values() for row in rows):
            return key
    return candidates[0]


def reward_terms(runs: Mapping[str, Mapping[str, list[dict[str, float]]]]) -> list[str]:
    """The reward terms any run logged a breakdown for (``reward/contrib/<term>``), in first-seen order."""
    seen: dict[str, None] = {}
    for per_seed in runs.values():
        for rows in per_seed.values():
            for row in rows:
                seen.update({k[len(CONTRIB_PREFIX):]: None for k in row if k.startswith(CONTRIB_PREFIX)})
    return list(seen)


def metrics_file(path: str | Path) -> Path:
    """Resolve a run directory or a metrics file to the ``metrics.jsonl`` path."""
    p = Path(path)
    return p / "metrics.jsonl" if p.is_dir() else p


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """Read one ``metrics.jsonl``; every line must be a JSON object with a numeric ``step``."""
    f = metrics_file(path)
    if not f.is_file():
        raise MetricsError(f"{f}: no metrics.jsonl here; pass a training run directory written by `tgsuite train`")
    rows: list[dict[str, float]] = []
    with f.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MetricsError(f"{f}:{i}: not valid JSON ({exc.msg}); each line must be one JSON object") from exc
            if not isinstance(obj, dict) or not isinstance(obj.get("step"), int | float):
                raise MetricsError(f"{f}:{i}: field 'step' missing or not a number; each line needs \"step\": <int>")
            rows.append(obj)
    return rows


def seed_curve(rows: list[dict[str, float]], metric: str, seed: str) -> SeedCurve:
    """The (step, value) points of one metric; lines without a finite numeric value for it are not points."""
    pts = sorted(
        (float(r["step"]), float(r[metric]))
        for r in rows
        if isinstance(r.get(metric), int | float) and not isinstance(r.get(metric), bool) and math.isfinite(r[metric])
    )
    return SeedCurve(seed=seed, steps=tuple(s for s, _ in pts), values=tuple(v for _, v in pts))


def window_stat(curve_steps: tuple[float, ...], values: tuple[float, ...], window: int) -> WindowStat | None:
    """Mean ± std (ddof = 0) over the last ``window`` points; None when nothing was logged."""
    if not values:
        return None
    tail = values[-window:]
    m = sum(tail) / len(tail)
    sd = math.sqrt(sum((v - m) ** 2 for v in tail) / len(tail))
    return WindowStat(mean=m, std=sd, n=len(tail), first_step=curve_steps[-len(tail)], last_step=curve_steps[-1])


def arm_curves(arm: str, metric: str, per_seed: Mapping[str, list[dict[str, float]]]) -> ArmCurves:
    """Per-seed curves and the across-seed mean at each step (over the seeds that logged that step)."""
    seeds = tuple(seed_curve(rows, metric, s) for s, rows in sorted(per_seed.items(), key=lambda kv: str(kv[0])))
    acc: dict[float, list[float]] = {}
    for c in seeds:
        for s, v in zip(c.steps, c.values, strict=True):
            acc.setdefault(s, []).append(v)
    steps = tuple(sorted(acc))
    return ArmCurves(
        arm=arm,
        metric=metric,
        seeds=seeds,
        mean_steps=steps,
        mean_values=tuple(sum(acc[s]) / len(acc[s]) for s in steps),
        mean_counts=tuple(len(acc[s]) for s in steps),
    )


def load_training(
    training_metrics: Mapping[str, Mapping[Any, str | Path]],
) -> dict[str, dict[str, list[dict[str, float]]]]:
    """Read every ``{arm: {seed: path}}`` metrics file into ``{arm: {seed: rows}}`` (seed keys as strings)."""
    out: dict[str, dict[str, list[dict[str, float]]]] = {}
    for arm, seeds in training_metrics.items():
        out[arm] = {str(seed): read_metrics(path) for seed, path in seeds.items()}
        log.debug("training metrics: arm %s, %d seeds", arm, len(out[arm]))
    return out
