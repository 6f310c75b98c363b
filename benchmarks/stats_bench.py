"""Benchmark of the two heavy statistics paths (ISSUE #4, item 6). Prints times, ratios and peak memory.

1. Hierarchical bootstrap, 10,000 resamples, 2 arms x 5 seeds x 50 repositories x 10 tasks (vectorised: no
   Python loop over resamples). Target < 2 s. Baseline in the same run: a naive Python loop over resamples
   (timed on 500 resamples and scaled), to show the ratio.
2. Crossed estimator on 10^5 episodes (2 arms x 10 seeds x 5,000 tasks in 100 repositories, K = 1), including
   building the seeds x tasks cell matrices from an episode table with pandas. Target < 1 s.

Run: .venv/bin/python benchmarks/stats_bench.py
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pandas as pd

from evalsuite import crossed_effect, hierarchical_bootstrap


def _timed(fn, repeat: int = 3):  # type: ignore[no-untyped-def]
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak, out


def _naive_bootstrap(yt, yc, repo, b, rng):  # type: ignore[no-untyped-def]
    g = repo.max() + 1
    idx = [np.flatnonzero(repo == k) for k in range(g)]
    out = np.empty(b)
    for i in range(b):
        st = yt[rng.integers(0, yt.shape[0], yt.shape[0])]
        sc = yc[rng.integers(0, yc.shape[0], yc.shape[0])]
        cols = np.concatenate([idx[k] for k in rng.integers(0, g, g)])
        out[i] = st[:, cols].mean() - sc[:, cols].mean()
    return out


def bench_bootstrap() -> None:
    rng = np.random.default_rng(0)
    m, g, per = 5, 50, 10
    repo = np.repeat(np.arange(g), per)
    yt = (rng.random((m, g * per)) < 0.6).astype(float)
    yc = (rng.random((m, g * per)) < 0.5).astype(float)
    t, peak, res = _timed(lambda: hierarchical_bootstrap(yt, yc, repo, n_resamples=10_000,
                                                         rng=np.random.default_rng(1)))  # fmt: skip
    t0 = time.perf_counter()
    _naive_bootstrap(yt, yc, repo, 500, np.random.default_rng(1))
    naive = (time.perf_counter() - t0) * 20
    print(f"hierarchical_bootstrap 10,000 resamples (2x{m} seeds x {g} repos x {per} tasks): {t:.3f} s "
          f"(target < 2 s: {'PASS' if t < 2 else 'FAIL'}), peak {peak / 2**20:.1f} MiB; "
          f"naive Python loop baseline ~{naive:.2f} s -> {naive / t:.0f}x faster; CI [{res.ci_low:.4f}, {res.ci_high:.4f}]")


def bench_crossed() -> None:
    rng = np.random.default_rng(2)
    m, n, g = 10, 5000, 100
    repo = np.repeat(np.arange(g), n // g)
    rows = []
    for arm, p in (("tg", 0.6), ("grpo", 0.5)):
        y = rng.random((m, n)) < p
        s, t = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
        rows.append(pd.DataFrame({"arm": arm, "train_seed": s.ravel(), "task": t.ravel(), "y": y.ravel()}))
    df = pd.concat(rows, ignore_index=True)
    assert len(df) == 100_000

    def run():  # type: ignore[no-untyped-def]
        mats = {}
        for arm in ("tg", "grpo"):
            sub = df[df["arm"] == arm]
            mat = np.zeros((m, n))
            np.add.at(mat, (sub["train_seed"].to_numpy(), sub["task"].to_numpy()), sub["y"].to_numpy())
            mats[arm] = mat
        return crossed_effect(mats["tg"], mats["grpo"], repo)

    t, peak, e = _timed(run)
    t_est, _, _ = _timed(lambda: crossed_effect(rng.random((m, n)), rng.random((m, n)), repo))
    from evalsuite.outcomes import cell_matrix

    ep = df.rename(columns={"task": "instance_id", "y": "code_ok"})
    tasks = list(range(n))

    def via_outcomes():  # type: ignore[no-untyped-def]
        yt = cell_matrix(ep, "code_ok", "tg", list(range(m)), tasks)
        yc = cell_matrix(ep, "code_ok", "grpo", list(range(m)), tasks)
        return crossed_effect(yt, yc, repo)

    t_pd, _, _ = _timed(via_outcomes)
    print(f"crossed estimator on 10^5 episodes ({m} seeds x {n} tasks x 2 arms, {g} repos): {t:.3f} s incl. cell "
          f"matrices (target < 1 s: {'PASS' if t < 1 else 'FAIL'}; estimator alone {t_est * 1000:.1f} ms), "
          f"peak {peak / 2**20:.1f} MiB; estimate {e.estimate:+.4f}, df {e.df:.1f}; via outcomes.cell_matrix "
          f"(pandas groupby, the analysis path): {t_pd:.3f} s")


if __name__ == "__main__":
    bench_bootstrap()
    bench_crossed()
