"""The paper's headline table beside this run's numbers (issue #13, item 2).

The paper ("Stabilizing On-Policy Targeted Guidance in Agentic Reinforcement Learning", 2026; docs/METHOD.md §2)
reports, for Qwen3-Coder-30B after 200 RL steps of 32 groups × 32 rollouts, training-time Markdown compliance
0.85 ± 0.09 (TG) vs 0 (GRPO) and coding pass rate 0.33 ± 0.05 vs 0.33 ± 0.07, where ± is the standard deviation
over the **last 32 training steps** (not over seeds, not an interval). This section puts beside it:

- the same display statistic on this run's training logs (``reports.training.window_stat`` of the across-seed
  mean curve; N = the window, or fewer where fewer steps were logged, always stated), and
- the preregistered held-out rates of the analysis (Wilson 95 % intervals over pooled episodes), which the paper
  does not report.

Nothing here compares the two numerically: they differ in model, scale, task world and kind of uncertainty, and
the table says so. Descriptive only; decisions belong to ``evalsuite``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evalsuite.schema import AnalysisResult
from reports import format as fmt
from reports import training
from reports.model import Cell, Section, Table


@dataclass(frozen=True)
class PaperCell:
    mean: float
    std: float | None  # None: the paper gives no spread (GRPO's compliance is reported as 0)


# (row title, training metric candidates, held-out endpoint, paper TG, paper GRPO)
PAPER_ROWS: tuple[tuple[str, tuple[str, ...], str, PaperCell, PaperCell], ...] = (
    ("Markdown compliance", ("behaviour/compliance",), "behaviour_ok", PaperCell(0.85, 0.09), PaperCell(0.0, None)),
    ("coding pass rate", ("task/pass_rate", "reward/task"), "code_ok", PaperCell(0.33, 0.05), PaperCell(0.33, 0.07)),
)
PAPER_WINDOW = 32
PAPER_SCALE = "Qwen3-Coder-30B + SFT, 200 steps × 32 groups × 32 rollouts, multi-turn SWE tasks"


def _paper_text(c: PaperCell) -> str:
    return fmt.num(c.mean, digits=2) if c.std is None else fmt.mean_std(c.mean, c.std, as_pct=False, digits=0)


def _train_text(runs: Mapping[str, Mapping[str, list[dict[str, float]]]] | None, arm: str | None,
                candidates: tuple[str, ...], window: int) -> str:
    if not runs or arm is None or arm not in runs:
        return f"{fmt.DASH} (no training log given)"
    key = training.pick_key(runs, candidates)
    c = training.arm_curves(arm, key, runs[arm])
    w = training.window_stat(c.mean_steps, c.mean_values, window)
    if w is None:
        return f"{fmt.DASH} ('{key}' not logged)"
    seeds = len(c.seeds)
    return (f"{fmt.mean_std(w.mean, w.std, as_pct=False)} (last {w.n} of steps "
            f"{fmt.num(w.first_step, digits=0)}–{fmt.num(w.last_step, digits=0)}, mean of {seeds} seed(s))")


def _heldout_text(a: AnalysisResult | None, arm: str | None, endpoint: str) -> str:
    if a is None or arm is None:
        return fmt.DASH
    for s in a.arm_summaries:
        if s.arm == arm:
            for r in s.rates:
                if r.endpoint == endpoint and r.rate is not None:
                    ci = (f" [{fmt.num(r.ci_low)}, {fmt.num(r.ci_high)}]"
                          if r.ci_low is not None and r.ci_high is not None else "")
                    return f"{fmt.num(r.rate)}{ci} (n = {r.n})"
    return f"{fmt.DASH} (not in the analysis)"


PAPER_ARMS = frozenset({"tg", "grpo"})


def is_paper_plan(a: AnalysisResult) -> bool:
    """The plan asks the paper's question: its arms are the reproduction's ``tg`` and ``grpo`` (the bundled plans
    ``smoke``, ``mini``, ``paper_claims``). Reports of other plans (your own two agents) show no paper panel, no
    TG/GRPO labels and no study panel that was not run."""
    return {a.arms.get("treatment"), a.arms.get("baseline")} == PAPER_ARMS


def paper_section(a: AnalysisResult | None,
                  runs: Mapping[str, Mapping[str, list[dict[str, float]]]] | None, *,
                  arms: Sequence[str | None] = (None, None), window: int = PAPER_WINDOW) -> Section:
    """The paper's table (TG, GRPO) beside this run's (treatment, baseline) = ``arms``: training-time last-N mean ±
    std, and the held-out preregistered rates."""
    treat, base = (list(arms) + [None, None])[:2]
    rows = []
    for title, candidates, endpoint, p_tg, p_grpo in PAPER_ROWS:
        rows.append([Cell(text=title), Cell(text="paper (training time)"), Cell(text=_paper_text(p_tg)),
                     Cell(text=_paper_text(p_grpo))])
        rows.append([Cell(text=title), Cell(text="this run (training time)"),
                     Cell(text=_train_text(runs, treat, candidates, window)),
                     Cell(text=_train_text(runs, base, candidates, window))])
        rows.append([Cell(text=title), Cell(text="this run (held-out, preregistered)"),
                     Cell(text=_heldout_text(a, treat, endpoint)), Cell(text=_heldout_text(a, base, endpoint))])
    table = Table(
        id="paper-beside-ours",
        header=["quantity", "source", f"TG / treatment ({treat or fmt.DASH})", f"GRPO / baseline ({base or fmt.DASH})"],
        rows=rows,
        caption=(f"Different scales: the paper is {PAPER_SCALE}; this run is the model and task world named in its "
                 "manifest. Different kinds of uncertainty: the paper's ± is the standard deviation over its last "
                 f"{PAPER_WINDOW} training steps (not seeds); this run's training-time ± is the same statistic over "
                 f"the last N logged steps of the mean-over-seeds curve (N stated; at most {window}); the held-out "
                 "brackets are Wilson 95 % intervals over pooled episodes, from the preregistered analysis. "
                 "The paper reports no held-out numbers. Read side by side, not as a test."))
    return Section(id="paper", title="The paper's numbers beside ours", tables=[table])


__all__ = ["PAPER_ARMS", "PAPER_ROWS", "PAPER_SCALE", "PAPER_WINDOW", "PaperCell", "is_paper_plan", "paper_section"]
