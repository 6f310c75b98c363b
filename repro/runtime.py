"""One runtime object for one process or many: :class:`Runtime`, and :class:`LocalRuntime` for a single process.

``repro.train`` trains through a ``Runtime`` whatever the number of processes (as TRL calls one ``Accelerator`` API):
``repro.distributed.init`` returns a :class:`LocalRuntime` for a plain run and a
:class:`repro.distributed.DistContext` (FSDP2 over torchrun ranks) with ``cluster.fsdp = true``. The RL loop never
asks which one it holds; where one process and many differ, a ``Runtime`` method says how:

- place: ``main`` (this process writes the run directory), ``rank``, ``world``, ``device``;
- collectives: ``barrier``, ``gather`` (every rank's object, in rank order), ``sum`` (floats summed over ranks),
  ``full_state`` (the unsharded state dict); one process: no-ops and identities;
- the model: ``place`` (where it lives before sharding), ``wait_turn`` / ``end_turn`` (build one rank at a time),
  ``shard``, ``sampling_copy`` / ``publish`` (the weights rollouts sample with), ``backward`` (the gradient is the
  single-process sum on every rank);
- the checkpoint writer and reader: ``save_checkpoint`` (``repro.checkpoint`` layout; FSDP adds the sharded
  ``dcp/`` folder, ``repro.dcp_checkpoint``) and ``load_checkpoint``;
- ``manifest_host`` / ``manifest_notes`` (what ``manifest.json`` says about the processes), ``close``.

One process computes exactly what it computed before the runtime existed: every identity above returns its input
unchanged (``gather(x) == [x]``, ``sum(a) == [a]``), so runs are bit for bit the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from repro import checkpoint as ck
from repro.config import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from repro.checkpoint import Tokenizer
    from repro.engine import RolloutEngine
    from repro.trainer_step import LossRoot

    EngineFactory = Callable[[nn.Module, int], RolloutEngine]  # as repro.rl_setup.EngineFactory

T = TypeVar("T")


class Runtime(Protocol):
    """This process's place among the training processes and what differs between one and many (module doc)."""

    @property
    def rank(self) -> int: ...

    @property
    def world(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def main(self) -> bool:
        """The process that writes the run directory (rank 0)."""
        ...

    def barrier(self) -> None: ...

    def gather(self, obj: T) -> list[T]:
        """``obj`` of every rank, in rank order."""
        ...

    def sum(self, *values: float) -> list[float]:
        """Each value summed over the ranks."""
        ...

    def full_state(self, lm: nn.Module) -> dict[str, torch.Tensor]:
        """The unsharded state dict of ``lm`` on every rank."""
        ...

    def wait_turn(self) -> None:
        """With :meth:`end_turn`: the code between them runs on rank 0, then rank 1, …"""
        ...

    def end_turn(self) -> None: ...

    def place(self, model: nn.Module) -> nn.Module:
        """Where the freshly built model lives until :meth:`shard` (this process's device, or the CPU)."""
        ...

    def sampling_copy(self, model: nn.Module, engine: str) -> nn.Module | None:
        """An unsharded copy of ``model`` that rollouts sample with (``rollout.engine``); None: they sample with the
        training model itself or on external servers. Called before :meth:`shard`."""
        ...

    def shard(self, root: LossRoot, precision: str) -> None: ...

    def publish(self, model: nn.Module, copy: nn.Module | None, engine_factory: EngineFactory, version: int) -> None:
        """Hand the training weights of ``version`` to the sampler (the ``copy`` or the engine's servers)."""
        ...

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate one micro-batch's share of the batch loss (the gradient is the batch's sum)."""
        ...

    def save_checkpoint(self, out: Path, step: int, *, root: LossRoot, opt: torch.optim.Optimizer,
                        copy: nn.Module | None, tokenizer: Tokenizer, state: dict[str, Any],
                        ledger: dict[str, Any], config_sha256: str, arm: str, seed: int,
                        keep: int) -> ck.CheckpointInfo:
        """Write ``checkpoints/step_<step>/``: the weights, teacher copy, optimizer, RNG states and compute
        ``ledger`` (a ``ComputeLedger`` snapshot), and ``state`` (scheduler, step, task cursor, counters)."""
        ...

    def load_checkpoint(self, ckpt: Path, *, root: LossRoot, opt: torch.optim.Optimizer) -> dict[str, Any]:
        """Load the teacher copy and optimizer of ``ckpt`` into ``root`` / ``opt``; return its trainer state
        (``rng`` and ``compute``: this process's)."""
        ...

    def manifest_host(self) -> dict[str, int]:
        """What ``manifest.json``'s ``host`` says about the processes."""
        ...

    def manifest_notes(self) -> list[str]: ...

    def close(self, *, failed: bool = False) -> None: ...


@dataclass(frozen=True)
class LocalRuntime:
    """One process: rank 0 of a world of 1 on ``device``; collectives are identities, the model is not sharded and
    rollouts sample with the training model itself."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return True

    def barrier(self) -> None:
        pass

    def gather(self, obj: T) -> list[T]:
        return [obj]

    def sum(self, *values: float) -> list[float]:
        return list(values)

    def full_state(self, lm: nn.Module) -> dict[str, torch.Tensor]:
        return dict(lm.state_dict())

    def wait_turn(self) -> None:
        pass

    def end_turn(self) -> None:
        pass

    def place(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def sampling_copy(self, model: nn.Module, engine: str) -> nn.Module | None:
        return None

    def shard(self, root: LossRoot, precision: str) -> None:
        pass

    def publish(self, model: nn.Module, copy: nn.Module | None, engine_factory: EngineFactory, version: int) -> None:
        pass  # the engines read the training model (or push it themselves: repro.vllm_http)

    def backward(self, loss: torch.Tensor) -> None:
        if loss.requires_grad:  # a micro-batch without PG or KL tokens has a constant loss
            loss.backward()

    def save_checkpoint(self, out: Path, step: int, *, root: LossRoot, opt: torch.optim.Optimizer,
                        copy: nn.Module | None, tokenizer: Tokenizer, state: dict[str, Any],
                        ledger: dict[str, Any], config_sha256: str, arm: str, seed: int,
                        keep: int) -> ck.CheckpointInfo:
        head = {"optimizer": opt.state_dict(), "scheduler": state["scheduler"], "rng": ck.rng_state({}),
                "compute": ledger}
        return ck.save_checkpoint(out, step, model=root.lm, tokenizer=tokenizer, trainer_state={**head, **state},
                                  config_sha256=config_sha256, arm=arm, seed=seed, compute=ledger, keep=keep,
                                  teacher=root.teacher_lm)

    def load_checkpoint(self, ckpt: Path, *, root: LossRoot, opt: torch.optim.Optimizer) -> dict[str, Any]:
        if root.teacher_lm is not None:
            ck.load_teacher(ckpt, root.teacher_lm)
        state = ck.load_trainer_state(ckpt)
        if "optimizer" not in state:
            raise ConfigError(f"--resume: {ckpt} was written by an FSDP run (its optimizer state is in dcp/); "
                              "resume it under torchrun with the same cluster settings")
        opt.load_state_dict(state["optimizer"])
        return state

    def manifest_host(self) -> dict[str, int]:
        return {}

    def manifest_notes(self) -> list[str]:
        return []

    def close(self, *, failed: bool = False) -> None:
        pass


ONE_PROCESS = LocalRuntime()  # a CPU runtime for callers of repro.train.optimizer_step outside train_rl


def train_device(want: str) -> torch.device:
    """``model.device`` (``auto``: CUDA when visible) as a device; ``cuda`` without a visible GPU is refused."""
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("model.device = 'cuda' but no CUDA device is visible; use model.device = 'cpu' or 'auto'")
    return torch.device(want)
