"""Metrics tracking: one JSON line per step in ``metrics.jsonl``, optional TensorBoard, a tqdm progress bar.

TensorBoard (config key ``run.tracker = "tensorboard"``, e.g. ``--set run.tracker=tensorboard``): every numeric
metric of a step is also written as a scalar of the same key to ``<run dir>/tb`` through
``torch.utils.tensorboard.SummaryWriter`` (install the ``tensorboard`` extra; watch with
``tensorboard --logdir <run dir>/tb``). ``null`` values are skipped there (TensorBoard has no missing value). A
requested tracker that cannot be loaded is an error, never a silent fall-back. On resume, TensorBoard's own
``purge_step`` drops the events written after the checkpoint.

Keys are namespaced (METHOD §6.11): ``loss/*``, ``reward/*``, ``guidance/*``, ``behaviour/*``, ``task/*``,
``pg/*``, ``kl/*``, ``async/*``, ``time/*``. Values that cannot be computed for a step (e.g. KL statistics on a step
without KL tokens) are written as ``null`` — never as a number that looks valid. On resume the file is truncated
to the steps before the checkpoint, so a resumed run's file equals an uninterrupted one's.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _clean(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _clean(value.item())
    return value


class MetricsWriter:
    """Append-only JSONL writer with an optional TensorBoard mirror (``tensorboard=True``; module docstring)."""

    def __init__(self, path: Path, *, resume_from_step: int | None = None, tensorboard: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step is not None and self.path.exists():
            kept = [ln for ln in self.path.read_text().splitlines() if ln and json.loads(ln)["step"] <= resume_from_step]
            self.path.write_text("".join(ln + "\n" for ln in kept))
        elif resume_from_step is None:
            self.path.write_text("")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise RuntimeError(f"run.tracker = 'tensorboard' but TensorBoard cannot be loaded ({exc}); fix: "
                                   "pip install 'tgsuite[tensorboard]', or set run.tracker = 'jsonl'") from exc
            purge = None if resume_from_step is None else resume_from_step + 1
            self._tb = SummaryWriter(str(self.path.parent / "tb"), purge_step=purge)

    def log(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        row = {"step": int(step), **{k: _clean(v) for k, v in sorted(metrics.items())}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for key, value in row.items():
                if isinstance(value, int | float) and not isinstance(value, bool) and key != "step":
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        return row

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


def progress(total: int, initial: int, enabled: bool, desc: str = "train") -> Any:
    """A tqdm bar on stderr (disabled → a no-op object with the same methods)."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc=desc, unit="step", dynamic_ncols=True)


def last_k_summary(rows: list[dict[str, Any]], key: str, k: int = 32) -> dict[str, float | int | None]:
    """Mean ± std (ddof = 0, METHOD §6.11) of ``key`` over the last ``k`` steps that have it."""
    vals = [r[key] for r in rows if r.get(key) is not None][-k:]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    return {"mean": mean, "std": std, "n": len(vals)}
