"""Monte Carlo checks of error rates under continuous monitoring (CANARY.md §6), vectorised over replications.

Each function simulates ``reps`` canaries with an explicit ``rng`` and returns the share that ever crossed, per
procedure; the same closed forms as the decisions (``evalsuite.canary.mixture``, ``gsd``) are used, on
binary outcomes with plug-in variances:

* ``iid``: one Bernoulli outcome per unit, canary share ``share``, looks every ``step`` units from ``start``.
  Procedures: ``msprt`` (two-sided always-valid CS at alpha excludes 0), ``msprt_harm`` (one-sided upper bound at
  alpha < 0: the ROLLBACK rule), ``naive`` (two-sided |z| > z_{1−alpha/2} at any look), ``fixed`` (one test at
  the horizon), ``gst`` (LD-OBF two-sided boundaries at ``gst_looks`` equally spaced looks);
* ``clustered``: 1 + Poisson(``extra``) episodes per unit, per-unit success probability Beta with intra-class
  correlation ``icc``; the CS and the naive z with the unit-level delta-method variance or the (wrong)
  episode-level binomial variance;
* ``ni_boundary``: true effect exactly −margin; share of canaries declared non-inferior by the one-sided mixture
  bound at ``alpha`` (PROMOTE's rule) and by a naive one-sided z at every look.
* ``fast_path``: the exact harm fast path (PrPl-EB union CS, ``evalsuite.canary.exact``) on one Bernoulli outcome
  per unit, and how often it fires before the burn-in.
Under H0 (``delta = 0``) the anytime-valid procedures stay at or below alpha; the naive ones do not.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from scipy import stats

from evalsuite.canary import exact, gsd, mixture


def _chunks(reps: int, size: int) -> Iterator[int]:
    done = 0
    while done < reps:
        yield min(size, reps - done)
        done += size


def _binary_stats(arm: np.ndarray, y: np.ndarray, looks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n_t = np.maximum(np.cumsum(arm, 1)[:, looks - 1], 1)
    s_t = np.cumsum(y & arm, 1)[:, looks - 1]
    n_c = np.maximum(looks[None, :] - n_t, 1)
    s_c = np.cumsum(y & ~arm, 1)[:, looks - 1]
    p_t, p_c = s_t / n_t, s_c / n_c
    var = np.clip(p_t * (1 - p_t), 1e-12, None) / n_t + np.clip(p_c * (1 - p_c), 1e-12, None) / n_c
    return p_t - p_c, var


def iid(reps: int, *, rng: np.random.Generator, n_units: int = 10_000, share: float = 0.1, p: float = 0.6,
        delta: float = 0.0, step: int = 250, start: int = 500, alpha: float = 0.05, gst_looks: int = 10,
        chunk: int = 250) -> dict[str, float]:  # fmt: skip
    """Share of replications that ever reject, per procedure (see the module docstring)."""
    looks = np.arange(start, n_units + 1, step)
    g_looks = np.arange(1, gst_looks + 1) * (n_units // gst_looks)
    g_bounds = gsd.gs_bounds_spending(g_looks / g_looks[-1], alpha=alpha, sides=2, spending="obf")
    v_h = p * (1 - p) * (1 / (share * n_units) + 1 / ((1 - share) * n_units))
    tau2, tau2_1 = mixture.tau2_for_horizon(v_h, alpha=alpha), mixture.tau2_for_horizon(v_h, alpha=alpha, sides=1)
    z = stats.norm.ppf(1 - alpha / 2)
    hits = dict(msprt=0, msprt_harm=0, naive=0, fixed=0, gst=0)
    for r in _chunks(reps, chunk):
        arm = rng.random((r, n_units)) < share
        y = rng.random((r, n_units)) < np.where(arm, p + delta, p)
        d, v = _binary_stats(arm, y, looks)
        hits["msprt"] += int(np.any(np.abs(d) > mixture.cs_halfwidth(v, tau2=tau2, alpha=alpha), 1).sum())
        upper = d + mixture.one_sided_halfwidth_vec(v, tau2=tau2_1, alpha=alpha)
        hits["msprt_harm"] += int(np.any(upper < 0, 1).sum())
        hits["naive"] += int(np.any(np.abs(d) / np.sqrt(v) > z, 1).sum())
        dg, vg = _binary_stats(arm, y, g_looks)
        zg = np.abs(dg) / np.sqrt(vg)
        hits["fixed"] += int((zg[:, -1] > z).sum())
        hits["gst"] += int(np.any(zg > g_bounds[None, :], 1).sum())
    return {k: v / reps for k, v in hits.items()}


def _cluster_stats(arm: np.ndarray, y: np.ndarray, m: np.ndarray, looks: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    out = []
    for sel in (arm, ~arm):
        def cs(x: np.ndarray, sel: np.ndarray = sel) -> np.ndarray:
            return np.cumsum(x * sel, 1)[:, looks - 1]

        n = np.maximum(cs(np.ones_like(m)), 2)
        s_y, s_m = cs(y), cs(m)
        r = s_y / s_m
        m_bar = s_m / n
        v_yy, v_mm = (cs(y * y) - s_y**2 / n) / (n - 1), (cs(m * m) - s_m**2 / n) / (n - 1)
        v_ym = (cs(y * m) - s_y * s_m / n) / (n - 1)
        out.append((r, (v_yy - 2 * r * v_ym + r * r * v_mm) / (n * m_bar * m_bar), r * (1 - r) / s_m))
    (r_t, vu_t, ve_t), (r_c, vu_c, ve_c) = out
    return r_t - r_c, np.maximum(vu_t + vu_c, 1e-12), np.maximum(ve_t + ve_c, 1e-12)


def clustered(reps: int, *, rng: np.random.Generator, n_units: int = 4000, share: float = 0.5, p: float = 0.6,
              icc: float = 0.3, extra: float = 4.0, step: int = 100, start: int = 400, alpha: float = 0.05,
              chunk: int = 250) -> dict[str, float]:  # fmt: skip
    """Unit-level (delta method) vs episode-level variances under H0 with clustered episodes."""
    looks = np.arange(start, n_units + 1, step)
    ab = (1 - icc) / icc
    m_mean, deff = 1 + extra, 1 + extra * icc
    v_ep = p * (1 - p) / m_mean * (1 / (share * n_units) + 1 / ((1 - share) * n_units))
    tau_ep, tau_u = mixture.tau2_for_horizon(v_ep, alpha=alpha), mixture.tau2_for_horizon(v_ep * deff, alpha=alpha)
    z = stats.norm.ppf(1 - alpha / 2)
    hits = dict(unit_msprt=0, episode_msprt=0, unit_naive=0, episode_naive=0)
    for r in _chunks(reps, chunk):
        arm = rng.random((r, n_units)) < share
        m = 1 + rng.poisson(extra, (r, n_units))
        y = rng.binomial(m, rng.beta(p * ab, (1 - p) * ab, (r, n_units)))
        d, vu, ve = _cluster_stats(arm, y.astype(float), m.astype(float), looks)
        hits["unit_msprt"] += int(np.any(np.abs(d) > mixture.cs_halfwidth(vu, tau2=tau_u, alpha=alpha), 1).sum())
        hits["episode_msprt"] += int(np.any(np.abs(d) > mixture.cs_halfwidth(ve, tau2=tau_ep, alpha=alpha), 1).sum())
        hits["unit_naive"] += int(np.any(np.abs(d) / np.sqrt(vu) > z, 1).sum())
        hits["episode_naive"] += int(np.any(np.abs(d) / np.sqrt(ve) > z, 1).sum())
    return {k: v / reps for k, v in hits.items()}


def ni_boundary(reps: int, *, rng: np.random.Generator, n_units: int = 20_000, share: float = 0.5, p: float = 0.6,
                margin: float = 0.02, step: int = 250, start: int = 1000, alpha: float = 0.025,
                chunk: int = 125) -> dict[str, float]:  # fmt: skip
    """P(declare non-inferior) when the true effect is exactly −margin (the worst case of the IUT component)."""
    looks = np.arange(start, n_units + 1, step)
    v_h = p * (1 - p) * (1 / (share * n_units) + 1 / ((1 - share) * n_units))
    tau2 = mixture.tau2_for_horizon(v_h, alpha=alpha, sides=1)
    z = stats.norm.ppf(1 - alpha)
    hits = dict(msprt=0, naive=0)
    for r in _chunks(reps, chunk):
        arm = rng.random((r, n_units)) < share
        y = rng.random((r, n_units)) < np.where(arm, p - margin, p)
        d, v = _binary_stats(arm, y, looks)
        lower = d - mixture.one_sided_halfwidth_vec(v, tau2=tau2, alpha=alpha)
        hits["msprt"] += int(np.any(lower > -margin, 1).sum())
        hits["naive"] += int(np.any((d + margin) / np.sqrt(v) > z, 1).sum())
    return {k: v / reps for k, v in hits.items()}


def mc_se(rate: float, reps: int) -> float:
    """Monte Carlo standard error of an estimated rate."""
    return math.sqrt(max(rate * (1 - rate), 1e-12) / reps)


def fast_path(reps: int, *, rng: np.random.Generator, n_units: int = 2_000, share: float = 0.1, p: float = 0.6,
              delta: float = 0.0, alpha: float = 0.05 / 12, burn_in: int = 200) -> dict[str, float]:  # fmt: skip
    """The exact harm fast path (``exact.union_difference`` one-sided at ``alpha``, as ``guardrails.fast_path_upper``
    with ``union_difference(alpha=2 alpha)``) on one Bernoulli outcome per unit: share of replications whose upper
    bound on ``p_T − p_C`` ever falls below 0 by ``n_units`` (``harm``; the running intersection makes 'ever' the
    last unit), and share that did so while the canary arm had fewer than ``burn_in`` units (``harm_in_burn_in``),
    i.e. where the mixture bound would have decided nothing. Default alpha: the bundled plan's per-metric rollback
    share 0.05/6, halved."""
    hits = early = 0
    for _ in range(reps):
        arm = rng.random(n_units) < share
        y = (rng.random(n_units) < np.where(arm, p + delta, p)).astype(float)
        if arm.sum() < 1 or arm.all():
            continue
        t_cs = exact.prpl_eb_cs(y[arm], alpha=alpha)  # alpha/2 per side = (2 alpha)/4, as union_difference(2 alpha)
        c_cs = exact.prpl_eb_cs(y[~arm], alpha=alpha)
        ut = np.minimum.accumulate(np.array(t_cs.upper))
        lc = np.maximum.accumulate(np.array(c_cs.lower))
        n_t, n_c = np.cumsum(arm), np.cumsum(~arm)
        ok = (n_t > 0) & (n_c > 0)
        u = ut[n_t[ok] - 1] - lc[n_c[ok] - 1]
        crossed = np.flatnonzero(u < 0)
        hits += bool(crossed.size > 0)
        early += bool(crossed.size > 0 and n_t[ok][crossed[0]] < burn_in)
    return {"harm": hits / reps, "harm_in_burn_in": early / reps}
