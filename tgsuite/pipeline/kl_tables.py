"""Tables and curves of the KL-direction study (``tgsuite.pipeline.kl_study``), from its runs' ``metrics.jsonl`` and
its P(heading) probe files. Pure apart from reading those files.

Per run (one cell, one seed), from the training log (``repro.train``, one row per RL step):

- ``compliance``: ``behaviour/compliance``, the share of the step's applicable assistant turns the behaviour checker
  passed (training-time, on the step's rollouts);
- ``pass_rate``: ``task/pass_rate``, the share of the step's rollouts that resolved their task;
- ``tool_call_validity``: ``rollout/tool_call_validity``, valid tool calls / tool calls in the step's rollouts;
- ``grad_ratio``: ``grad/norm_kl / grad/norm_pg``, i.e. λ‖∇L_KL‖ / ‖∇L_GRPO‖ (``run.log_grad_split``: the KL term
  is logged with its λ); 0 on a step where no turn was guided (no KL term), undefined (skipped) on a step whose
  GRPO gradient is 0 (every rollout of the group scored the same);
- ``step_s``: ``time/step_s``, the wall time of the step.

Each run's summary value is the mean over its last ``window`` steps that have the value; a cell's value is the mean
over its seeds (with the standard deviation over seeds, ddof 1, and n). From the probes: ``p_heading`` (unprompted)
and ``p_heading_hinted`` (the hint spliced where the teacher sees it), each the mean over the finish contexts of the
run's final checkpoint, then over seeds; the start model's values are given beside them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LOG_KEYS = {"compliance": "behaviour/compliance", "pass_rate": "task/pass_rate",
            "tool_call_validity": "rollout/tool_call_validity", "grad_norm_pg": "grad/norm_pg",
            "grad_norm_kl": "grad/norm_kl", "step_s": "time/step_s"}
TABLE_METRICS = ("compliance", "pass_rate", "tool_call_validity", "p_heading", "p_heading_hinted", "grad_ratio")
TITLES = {
    "compliance": "Behaviour compliance (training rollouts, last-window mean)",
    "pass_rate": "Pass rate (training rollouts, last-window mean)",
    "tool_call_validity": "Tool-call validity (training rollouts, last-window mean)",
    "p_heading": "P(heading), unprompted (held-out finish contexts, final checkpoint)",
    "p_heading_hinted": "P(heading) with the hint: the teacher's view (held-out finish contexts, final checkpoint)",
    "grad_ratio": "Gradient norm ratio λ‖∇KL‖ / ‖∇PG‖ (mean over all steps; 0 where no turn was guided)",
}
REFERENCE = "grpo"


def cell_label(direction: str, lam: float) -> str:
    """Run label of one cell, e.g. ``forward_lam0.1``."""
    return f"{direction}_lam{lam:g}"


def grad_ratio(row: dict[str, Any]) -> float | None:
    """λ‖∇L_KL‖ / ‖∇L_GRPO‖ of one step (module docstring); None when the GRPO gradient is 0 or not logged."""
    pg = row.get("grad/norm_pg")
    if pg is None or pg <= 0:
        return None
    return float(row.get("grad/norm_kl") or 0.0) / float(pg)


def run_curves(rows: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Per-step values of every logged metric and the gradient ratio, in step order."""
    rows = sorted(rows, key=lambda r: r["step"])
    out: dict[str, list[float | None]] = {name: [r.get(key) for r in rows] for name, key in LOG_KEYS.items()}
    out["grad_ratio"] = [grad_ratio(r) for r in rows]
    out["step"] = [r["step"] for r in rows]
    return out


def last_window(values: Sequence[float | None], window: int) -> float | None:
    """Mean of the values present among the last ``window`` steps (None when none is)."""
    vals = [v for v in values[-window:] if v is not None]
    return sum(vals) / len(vals) if vals else None


def _all_steps(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def seed_cell(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean, standard deviation (ddof 1; None for one value) and n over the seeds that have a value."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "sd": None, "n": 0, "values": list(values)}
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return {"mean": mean, "sd": sd, "n": len(vals), "values": list(values)}


def _read_rows(run_dir: str) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the run's training log is missing; re-run the study (its stages resume)")
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def run_summary(curves: dict[str, list[float | None]], probe: dict[str, Any] | None, window: int) -> dict[str, Any]:
    """One run's summary values (module docstring)."""
    out: dict[str, Any] = {k: last_window(curves[k], window) for k in ("compliance", "pass_rate", "tool_call_validity")}
    out["grad_ratio"] = _all_steps(curves["grad_ratio"])
    out["step_s"] = _all_steps(curves["step_s"])
    out["steps"] = len(curves["step"])
    out["p_heading"] = probe["unprompted"]["mean"] if probe else None
    out["p_heading_hinted"] = probe["hinted"]["mean"] if probe else None
    return out


def _mean_curve(per_seed: list[list[float | None]]) -> list[float | None]:
    n = max((len(c) for c in per_seed), default=0)
    return [_all_steps([c[i] for c in per_seed if i < len(c)]) for i in range(n)]


def build(directions: Sequence[str], lambdas: Sequence[float], seeds: Sequence[int], runs: dict[str, dict[int, str]],
          probes: dict[str, str], window: int) -> dict[str, Any]:
    """The study's ``runs`` (per label and seed: curves and summary), ``curves`` (per label: mean over seeds per
    step), ``tables`` (per metric: direction × λ cells and the grpo reference) and ``start_probe`` (the start model's
    P(heading)). ``runs`` maps label → seed → run directory, ``probes`` model name (``<label>_s<seed>``,
    ``start``) → probe file."""
    probe = {k: json.loads(Path(v).read_text()) for k, v in probes.items()}
    per_run: dict[str, dict[str, Any]] = {}
    for label, by_seed in runs.items():
        per_run[label] = {}
        for seed, run_dir in sorted(by_seed.items()):
            curves = run_curves(_read_rows(run_dir))
            per_run[label][str(seed)] = {"run_dir": run_dir, "curves": curves,
                                         "summary": run_summary(curves, probe.get(f"{label}_s{seed}"), window)}
    mean_curves = {label: {m: _mean_curve([r["curves"][m] for r in by_seed.values()])
                           for m in (*LOG_KEYS, "grad_ratio")} for label, by_seed in per_run.items()}

    def cell(label: str, metric: str) -> dict[str, Any] | None:
        if label not in per_run:
            return None
        return seed_cell([per_run[label].get(str(s), {}).get("summary", {}).get(metric) for s in seeds])

    tables = {m: {"lambdas": list(lambdas), "rows": {d: [cell(cell_label(d, lam), m) for lam in lambdas]
                                                      for d in directions},
                  "reference": cell(REFERENCE, m)} for m in (*TABLE_METRICS, "step_s")}
    start = probe.get("start")
    return {"runs": per_run, "curves": mean_curves, "tables": tables,
            "start_probe": None if start is None else {"p_heading": start["unprompted"]["mean"],
                                                 "p_heading_hinted": start["hinted"]["mean"], "n": start["n"]}}


def _fmt(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.3g}" if x != 0 and (abs(x) < 0.01 or abs(x) >= 1000) else f"{x:.4g}"


def _fmt_cell(c: dict[str, Any] | None) -> str:
    if c is None or c["mean"] is None:
        return "–"
    sd = f" ± {_fmt(c['sd'])}" if c["sd"] is not None else ""
    return f"{_fmt(c['mean'])}{sd} (n={c['n']})"


def markdown(record: dict[str, Any]) -> str:
    """The study as Markdown: one table per metric (direction × λ, mean ± sd over seeds) and the mean curves."""
    spec, tables = record["spec"], record["tables"]
    lams = [f"λ = {lam:g}" for lam in spec["lambdas"]]
    lines = ["# KL-direction study", "",
             f"Start model: `{record['start']['path']}`; preset `{record['preset']}` RL settings, "
             f"RL steps per run: {record['rl'].get('run.steps')}; seeds {spec['seeds']}; last window {record['window']} "
             f"step(s); {record['contexts']['contexts']} held-out finish contexts (dev task seed "
             f"{spec['dev_task_seed']}). Cells: mean ± sd over seeds (n = seeds with a value). Exploratory: it "
             "chooses defaults, it decides nothing.", ""]
    for metric in (*TABLE_METRICS, "step_s"):
        t = tables[metric]
        lines += [f"## {TITLES.get(metric, 'Seconds per RL step (mean over all steps)')}", "",
                  "| direction | " + " | ".join(lams) + " |", "|---|" + "---|" * len(lams)]
        lines += [f"| {d} | " + " | ".join(_fmt_cell(c) for c in row) + " |" for d, row in t["rows"].items()]
        if t["reference"] is not None:
            lines.append("| grpo (λ = 0) | " + _fmt_cell(t["reference"]) + " |" + " |" * (len(lams) - 1))
        if metric in ("p_heading", "p_heading_hinted") and record.get("start_probe") is not None:
            lines.append(f"\nStart model: {_fmt(record['start_probe'][metric])}")
        lines.append("")
    lines += ["## Curves (mean over seeds, per RL step)", ""]
    for metric in ("compliance", "pass_rate", "tool_call_validity", "grad_ratio"):
        curves = record["curves"]
        n = max((len(c[metric]) for c in curves.values()), default=0)
        lines += [f"### {metric}", "", "| run | " + " | ".join(str(i + 1) for i in range(n)) + " |",
                  "|---|" + "---|" * n]
        lines += [f"| {label} | " + " | ".join(_fmt(v) for v in c[metric]) + " |" for label, c in curves.items()]
        lines.append("")
    return "\n".join(lines)
