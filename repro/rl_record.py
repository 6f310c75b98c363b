"""What the main process records of an RL run: the run directory's files (ARCHITECTURE §4) and its per-step log line.

``config.toml`` (the resolved config), ``manifest.json`` (:class:`repro.checkpoint.TrainManifest`), ``metrics.jsonl``
(one line per step, ``repro.track.MetricsWriter``) and ``best.jsonl`` (the best trajectory of each group, for
self-distillation: ``tgsuite train loop``). Every process of a run holds a :class:`RunRecord`; only the main one
(``Runtime.main``: rank 0, or the single process) writes, so ``repro.train`` calls the same methods on every rank.
Checkpoints are written by the runtime (``Runtime.save_checkpoint``), not here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from protocols.provenance import utc_now
from repro import checkpoint as ck
from repro.config import TrainConfig, to_toml
from repro.rl_metrics import gate_summary
from repro.rollout import RolloutSample
from repro.schema import DistillExample
from repro.track import MetricsWriter, last_k_summary, read_metrics

logger = logging.getLogger(__name__)

SUMMARY_KEYS = ("behaviour/compliance", "task/pass_rate", "reward/total")


class RunRecord:
    """The run directory ``out`` as the training loop writes it; ``writes``: this process is the one that writes
    (elsewhere every method does nothing)."""

    def __init__(self, out: Path, *, writes: bool) -> None:
        self.out, self.writes = out, writes
        self.metrics: MetricsWriter | None = None

    def create(self) -> None:
        if self.writes:
            self.out.mkdir(parents=True, exist_ok=True)

    def write_config(self, cfg: TrainConfig) -> None:
        if self.writes:
            (self.out / "config.toml").write_text(to_toml(cfg))

    def open(self, resume_from_step: int | None, *, tensorboard: bool) -> None:
        """Start ``metrics.jsonl`` (a resumed run keeps the lines up to ``resume_from_step``) and cut ``best.jsonl``
        back to the same step."""
        if self.writes:
            self.metrics = MetricsWriter(self.out / "metrics.jsonl", resume_from_step=resume_from_step,
                                         tensorboard=tensorboard)
            truncate_best(self.out / "best.jsonl", resume_from_step or 0)

    def write_manifest(self, manifest: ck.TrainManifest) -> None:
        if self.writes:
            ck.write_manifest(self.out, manifest)

    def step(self, step: int, metrics: dict[str, Any], groups: list[list[RolloutSample]], *, arm: str,
             gates: bool) -> None:
        """One finished step: its metrics line, its groups' best trajectories, and (``gates``: guided arms) the
        gate summary in the log."""
        if self.metrics is not None:
            self.metrics.log(step, metrics)
            append_best(self.out / "best.jsonl", groups, step)
        if gates and self.writes:
            logger.info("%s step %d: %s", arm, step, gate_summary(metrics))

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()

    def finish(self, manifest: ck.TrainManifest, steps: int, compute: dict[str, Any]) -> None:
        """The final ``manifest.json``: done after ``steps``, the run's ``compute``, the checkpoints and a summary of
        the last steps' metrics."""
        if not self.writes:
            return
        rows = read_metrics(self.out / "metrics.jsonl")
        summary = {k: last_k_summary(rows, k, 32) for k in SUMMARY_KEYS}
        ck.write_manifest(self.out, manifest.model_copy(update={
            "updated_at": utc_now(), "steps_done": steps, "status": "done", "compute": compute,
            "checkpoints": [str(p) for p in ck.list_checkpoints(self.out)], "summary": summary}))


def append_best(path: Path, groups: list[list[RolloutSample]], step: int) -> None:
    """The best trajectory of each group (for self-distillation: ``tgsuite train loop``)."""
    with path.open("a") as fh:
        for grp in groups:
            s = max(grp, key=lambda x: x.reward)
            ex = DistillExample(instance_id=s.instance_id, reward=s.reward, step=step, ids=s.encoded.ids,
                                 act=s.encoded.act)
            fh.write(ex.model_dump_json() + "\n")


def truncate_best(path: Path, step: int) -> None:
    """Keep the lines of ``best.jsonl`` up to ``step`` (a resumed run rewrites the steps after it)."""
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
    path.write_text("".join(ln + "\n" for ln in keep))
