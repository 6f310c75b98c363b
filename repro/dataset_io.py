"""Training reads imported datasets (``tgsuite data import`` / ``data filter``): rewards, SFT conversations, distill
examples.

- :func:`record_reward`: the reward of an imported record with the configured weights (``repro.rewards``), from
  its messages, its logged outcome (``resolved``, ``code_runs``) and its user feedback (a logged rating, or the
  drafts a feedback provider rejected). ``None`` when the log does not say whether the task was resolved.
- :func:`sft_trajectories`: the records' trajectories for ``repro.sft`` (``SFTConfig.dataset``).
- :func:`distill_examples`: the records encoded with the student's tokenizer as ``DistillExample`` (ids, assistant
  mask, reward), for ``repro.distill`` (``distill.dataset``).

Token ids logged with the messages (a tgsuite run of another checkpoint) belong to that policy's tokenizer; they
are dropped and the text is encoded afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.behaviour import get_checker, turn_verdicts
from harness.schema import Message, Trajectory
from harness.signals import episode_signals
from harness.trajdata.dataset import read_dataset
from harness.trajdata.schema import TrajectoryRecord
from repro.config import ConfigError, RewardCfg, TrainConfig
from repro.rewards import reward_components, total_reward

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerFast

    from repro.schema import DistillExample

log = logging.getLogger(__name__)


@dataclass
class ModelSetup:
    """What distilling from a dataset needs: the model, its tokenizer and the tool schemas (no tasks, no sandboxes)."""

    tokenizer: PreTrainedTokenizerFast
    model: torch.nn.Module
    tools: list[dict[str, Any]]


def model_setup(cfg: TrainConfig) -> ModelSetup:
    from harness.tools import tool_schemas
    from repro.rl_setup import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(cfg)
    return ModelSetup(tokenizer=tok, model=model, tools=tool_schemas())


def record_reward(record: TrajectoryRecord, weights: RewardCfg) -> float | None:
    """R(τ) of an imported record with ``weights``; None when ``resolved`` is unknown."""
    if record.outcome.resolved is None:
        return None
    traj = record.trajectory
    sig = episode_signals(traj.messages, resolved=record.outcome.resolved, code_runs=record.outcome.code_runs,
                          rating=record.outcome.feedback_rating, corrections=sum(d.discarded_for != "format" for d in traj.discarded_drafts))
    verdicts = turn_verdicts(get_checker(weights.checker), traj.messages)
    return total_reward(reward_components(sig, verdicts, weights), weights)


def load_records(path: str | Path) -> list[TrajectoryRecord]:
    try:
        records, _ = read_dataset(path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not records:
        raise ConfigError(f"{path}: the dataset has no records (see its card.md for what the filters removed); "
                          "relax the filters or import more logs")
    return records


def _plain(messages: list[Message]) -> list[Message]:
    return [m.model_copy(update={"token_ids": None, "logprobs": None}) for m in messages]


def sft_trajectories(path: str | Path) -> list[Trajectory]:
    """The dataset's trajectories, logged token ids dropped (module docstring)."""
    return [r.trajectory.model_copy(update={"messages": _plain(r.trajectory.messages)}) for r in load_records(path)]


def distill_examples(path: str | Path, tokenizer: PreTrainedTokenizerFast, tools: list[dict[str, Any]],
                     weights: RewardCfg) -> tuple[list[DistillExample], int]:
    """(``DistillExample`` per record with a known reward, number of records without one)."""
    from repro.schema import DistillExample
    from repro.tokenizer import ChatEncoder

    enc = ChatEncoder(tokenizer)
    out, unscored = [], 0
    for r in load_records(path):
        reward = record_reward(r, weights)
        if reward is None:
            unscored += 1
            continue
        e = enc.encode(_plain(r.trajectory.messages), tools=tools)
        out.append(DistillExample(instance_id=r.trajectory.instance_id, reward=reward, ids=e.ids, act=e.act))
    if unscored:
        log.warning("%s: %d records have no resolved outcome and cannot be ranked; they are not distilled (filter "
                    "with `tgsuite data filter --resolved-only` to drop them explicitly)", path, unscored)
    return out, unscored
