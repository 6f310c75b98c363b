"""Request batching for a ``KVSampler`` shared by many episode threads (evaluation, SFT checks, studies).

The harness runner plays episodes on worker threads; each turn calls ``policy.act`` → ``engine.generate([one
request])``. On a CPU a tiny model's decode step costs about the same for 1 row as for 8 (per-step overhead
dominates), so serving those calls one by one wastes most of the machine. ``BatchingEngine`` is the piece of a
serving engine (vLLM's scheduler) that fixes this: callers block on a future; one scheduler thread takes every
request that is waiting (after a first one arrives it waits ``window_s`` for more, up to ``max_batch`` rows), runs
them as ONE batched ``KVSampler.generate`` and hands each caller its own results. Requests that arrive while a batch
decodes wait for the next batch (no joining mid-decode).

Sampling. Each caller's rows are drawn from the caller's own ``torch.Generator`` (``row_generators``), so which
other episodes share a batch never changes a request's random stream. Its logits can still differ from an unbatched
call by float rounding (other padding lengths change the matmul shapes), as in any batching server; a near-tie can
then flip a sampled token. Greedy results and log-probs agree with unbatched calls to float tolerance (tested).

It implements ``repro.sampler.RolloutEngine`` and exposes the wrapped engine's ``max_len``. Use it as a context
manager (or call ``close``) to stop the scheduler thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import torch

from repro.engine import TokenRequest, TokenResult
from repro.sampler import KVSampler


@dataclass
class _Call:
    requests: list[TokenRequest]
    generator: torch.Generator
    future: Future[list[TokenResult]]


@dataclass
class BatchStats:
    calls: int = 0
    batches: int = 0
    rows: int = 0

    @property
    def mean_rows(self) -> float:
        return self.rows / self.batches if self.batches else 0.0


class BatchingEngine:
    """Batches concurrent ``generate`` calls from many threads into one ``KVSampler`` call (module docstring)."""

    thread_safe = True  # generate() may be called from many threads (SamplerPolicy then skips the runner's lock)

    def __init__(self, engine: KVSampler, *, max_batch: int = 16, window_s: float = 0.05) -> None:
        if max_batch < 1 or window_s < 0:
            raise ValueError(f"max_batch={max_batch} (>= 1) and window_s={window_s} (>= 0) out of range")
        self.engine, self.max_batch, self.window_s = engine, max_batch, window_s
        self.max_len = engine.max_len
        self.stats = BatchStats()
        self._q: queue.Queue[_Call | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="batching-engine", daemon=True)
        self._thread.start()

    # RolloutEngine ------------------------------------------------------------------------------------------
    def current_version(self) -> int:
        return self.engine.current_version()

    def set_version(self, version: int) -> None:
        self.engine.set_version(version)

    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]:
        if self._closed:
            raise RuntimeError("BatchingEngine is closed; create a new one")
        if not requests:
            return []
        call = _Call(list(requests), generator, Future())
        self._q.put(call)
        return call.future.result()

    # lifecycle ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._q.put(None)
            self._thread.join()

    def __enter__(self) -> BatchingEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # scheduler ----------------------------------------------------------------------------------------------
    def _take(self, first: _Call) -> tuple[list[_Call], bool]:
        """``first`` plus whatever arrives within the window, up to ``max_batch`` rows; (calls, stop seen)."""
        calls, rows = [first], len(first.requests)
        deadline = time.monotonic() + self.window_s
        while rows < self.max_batch:
            try:
                nxt = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if nxt is None:
                return calls, True
            calls.append(nxt)
            rows += len(nxt.requests)
        return calls, False

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._q.get()
            if first is None:
                break
            calls, stop = self._take(first)
            reqs = [r for c in calls for r in c.requests]
            gens = [c.generator for c in calls for _ in c.requests]
            try:
                res = self.engine.generate(reqs, generator=gens[0], row_generators=gens)
            except BaseException as exc:  # noqa: BLE001 - every waiting caller gets the error
                for c in calls:
                    c.future.set_exception(exc)
                continue
            self.stats.calls += len(calls)
            self.stats.batches += 1
            self.stats.rows += len(reqs)
            k = 0
            for c in calls:
                c.future.set_result(res[k:k + len(c.requests)])
                k += len(c.requests)
        while True:  # fail anything still queued after close
            try:
                left = self._q.get_nowait()
            except queue.Empty:
                break
            if left is not None:
                left.future.set_exception(RuntimeError("BatchingEngine closed before this request ran"))
