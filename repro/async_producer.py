"""Asynchronous RL: a rollout producer thread and the trainer overlap, with bounded staleness.

Shape (METHOD §5–6.13, SCALE §5): the trainer publishes its weights as version ``v`` after every optimizer step
(:class:`WeightStore`); a producer thread keeps its own copy of the model, loads the newest published version before
each work item, generates it, and puts it in a bounded queue. In the RL loop a work item is one step's batch (all
``groups`` groups sampled in lock-step, one sampling call per turn for the whole batch). The trainer pops items and
computes the staleness ``version_now − item.version``; items with staleness > ``max_staleness`` are **dropped and
counted** (``async/dropped_groups``, in groups), the rest are trained on with the importance ratio taken against the
behaviour log-probs recorded at sampling time.

Two knobs, as in prime-rl (async level vs ``max_off_policy_steps``):

- ``max_lead`` — the producer may start work for step ``j`` only once version ``j − max_lead`` exists. This bounds
  how far ahead it runs. Staleness of a consumed item is at most ``max_lead`` by construction.
- ``max_staleness`` (S_max) — the drop filter. With ``max_lead ≤ max_staleness`` nothing is ever dropped; with a
  larger lead (a producer kept busier) the filter drops what arrives too old.
- ``max_lead = max_staleness = 0`` is exactly the synchronous loop: same rollouts, same losses (tested).

What overlaps on a 2-core CPU: torch releases the GIL inside its kernels, so the producer's sampling and the
environment's subprocesses (tests run by ``LocalSandbox``) run while the trainer's forward/backward runs. Both
threads share the two cores, so set ``model.threads = 1`` (one core each); the producer thread copies the trainer's
thread count (OpenMP counts are per OS thread — without that the producer started a 2-thread pool, oversubscribed
the cores and async was SLOWER than sync). Measured on this project's shared 2-core machine (mini model, 4 groups ×
8 rollouts × 64 tokens, 6 steps, S_max = 1, other jobs running): async took 0.66× of the synchronous wall time
without environment latency (one run) and 0.66× / 1.02× with 50 ms per environment step (two runs) — the gain
depends on how busy the machine is, and two cores bound it at 2×. Sampling goes through the same Python-level decode
loop in the producer thread, so GIL hand-offs limit the overlap for very small models. On a GPU cluster the producer is replaced by vLLM servers (SCALE §5) and the same queue/staleness logic applies.

Determinism: with ``max_lead = 0`` the run is deterministic (each group's sampling generator is derived from the
run seed and the item index, not from a shared stream). With a lead > 0 *which* version a group sees depends on
thread timing; it is recorded per group (``async/staleness_hist``) but runs are not bit-reproducible.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

logger = logging.getLogger(__name__)

T = TypeVar("T")


class WeightStore:
    """The latest published weights and their version; thread-safe; waiters block until a version appears."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = -1
        self._state: dict[str, torch.Tensor] | None = None
        self._closed = False

    def publish(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        snap = {k: v.detach().clone() for k, v in state_dict.items()}
        with self._cond:
            self._version, self._state = version, snap
            self._cond.notify_all()

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, dict[str, torch.Tensor]] | None:
        """Block until a version ≥ ``version`` is published; return (version, state) or None when closed."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._closed or self._version >= version, timeout=timeout)
            if self._closed or not ok or self._state is None:
                return None
            return self._version, self._state

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


@dataclass
class Produced(Generic[T]):
    item: int
    version: int
    payload: T


@dataclass
class StalenessStats:
    consumed: int = 0
    dropped: int = 0
    hist: Counter = field(default_factory=Counter)

    def as_metrics(self, groups_per_unit: int = 1) -> dict[str, Any]:
        """Counts in groups (a produced unit may hold several groups: the trainer produces one step's batch)."""
        k = groups_per_unit
        return {
            "async/consumed_groups": self.consumed * k,
            "async/dropped_groups": self.dropped * k,
            "async/staleness_hist": {str(s): v * k for s, v in sorted(self.hist.items())},
        }


class AsyncProducer(Generic[T]):
    """Run ``produce(item, version, state)`` in a background thread for items ``start_item, start_item+1, …``.

    ``items_per_step`` maps an item to the step it is produced for (``item // items_per_step``, counted from
    ``start_item``'s step ``start_step``) to apply the ``max_lead`` gate.
    """

    def __init__(
        self,
        produce: Callable[[int, int, dict[str, torch.Tensor]], T],
        store: WeightStore,
        *,
        items_per_step: int,
        start_item: int,
        start_step: int,
        max_lead: int,
        queue_size: int,
    ) -> None:
        self._produce = produce
        self._store = store
        self._ips = items_per_step
        self._next_item = start_item
        self._start_item, self._start_step = start_item, start_step
        self._lead = max_lead
        self._queue: queue.Queue[Produced[T] | BaseException] = queue.Queue(maxsize=max(1, queue_size))
        self._stop = threading.Event()
        # OpenMP thread counts are per OS thread: give the producer the trainer's setting, or it starts with the
        # default pool and oversubscribes the cores (measured: slower than synchronous on 2 cores)
        self._threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._run, name="rollout-producer", daemon=True)

    def start(self) -> AsyncProducer[T]:
        self._thread.start()
        return self

    def _run(self) -> None:
        torch.set_num_threads(self._threads)
        try:
            while not self._stop.is_set():
                item = self._next_item
                step_for = self._start_step + (item - self._start_item) // self._ips
                got = self._store.wait_for(step_for - self._lead)
                if got is None:
                    return
                version, state = got
                payload = self._produce(item, version, state)
                self._next_item += 1
                while not self._stop.is_set():
                    try:
                        self._queue.put(Produced(item, version, payload), timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # surfaced to the trainer on its next get()
            logger.exception("rollout producer failed")
            self._queue.put(exc)

    def get(self, timeout: float | None = None) -> Produced[T]:
        got = self._queue.get(timeout=timeout)
        if isinstance(got, BaseException):
            raise RuntimeError("the rollout producer thread failed; see the traceback above") from got
        return got

    def stop(self) -> None:
        self._stop.set()
        self._store.close()
        self._thread.join(timeout=30)


def take_fresh(
    producer: AsyncProducer[T], n: int, version_now: int, max_staleness: int, stats: StalenessStats
) -> list[Produced[T]]:
    """Pop until ``n`` groups with staleness ≤ ``max_staleness`` are in hand; drop and count the others."""
    out: list[Produced[T]] = []
    while len(out) < n:
        got = producer.get()
        staleness = version_now - got.version
        if staleness > max_staleness:
            stats.dropped += 1
            logger.debug("dropped item %d (staleness %d > %d)", got.item, staleness, max_staleness)
            continue
        stats.consumed += 1
        stats.hist[staleness] += 1
        out.append(got)
    return out


def clone_for_producer(model: torch.nn.Module) -> torch.nn.Module:
    """A separate module instance for the producer thread (never shares parameters with the trainer)."""
    twin = copy.deepcopy(model)
    twin.eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin
