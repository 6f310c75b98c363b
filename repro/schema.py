"""Records of the training library that are written to disk: one pydantic model each (frozen, no extra fields)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DistillExample(BaseModel):
    """One trajectory to distil on (also the line format of RL's ``best.jsonl``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_id: str
    reward: float
    step: int = 0
    ids: list[int]
    act: list[int]
