"""Multiplicity for the ship rule (STATS §4).

The ship decision is an intersection–union test: every criterion is tested at its own one-sided α with no
adjustment (Berger, Technometrics 1982;24:295–300). Individual endpoint claims are controlled separately by a
preregistered fixed sequence (Maurer, Hothorn & Lehmacher 1995; Westfall & Krishen, JSPI 2001;99:25–40) or by
Holm (Scand J Stat 1979;6:65–70); Holm-adjusted p-values are always reported for information.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from statsmodels.stats.multitest import multipletests


def holm_adjust(p_values: Sequence[float]) -> list[float | None]:
    """Holm step-down adjusted p-values (statsmodels ``multipletests(method='holm')``).

    A NaN entry (a criterion that could not be tested) stays in the family as p = 1 — it is never dropped, which
    would shrink the family and the adjustment — and its adjusted value is reported as None.
    """
    p = np.asarray(p_values, dtype=float)
    out: list[float | None] = [None] * p.size
    ok = np.isfinite(p)
    if p.size:
        adj = multipletests(np.where(ok, p, 1.0), method="holm")[1]
        for i in np.flatnonzero(ok):
            out[int(i)] = float(adj[i])
    return out


def fixed_sequence_claims(passed_in_order: Sequence[bool]) -> list[bool]:
    """Claim endpoints in the preregistered order until the first failure (each tested at full α)."""
    claims, open_ = [], True
    for ok in passed_in_order:
        open_ = open_ and bool(ok)
        claims.append(open_)
    return claims


def holm_claims(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Claims by Holm at family-wise level ``alpha`` (one-sided p-values)."""
    adj = holm_adjust(p_values)
    return [v is not None and not math.isnan(v) and v < alpha for v in adj]
