"""Hint side-effect probes: paired plain vs probe answers on the same held-out states (exploratory).

``hint_probe_study`` takes one row per paired state (the same checkpoint, task and episode seed answered once with
the plain prompt and once with a probe message, see ``harness.probes``) and gives, per (probe, arm) and endpoint,
the plain and probe rates, the paired 2×2 table, the paired difference Δ = probe − plain with a CI
(``rd_ci_paired``: Tango score, or Newcombe's method 10) and the exact McNemar p-value (``mcnemar_test``).

Endpoints (per episode):

- ``edited``: the episode made at least one successful file change (``EpisodeMetrics.edits >= 1``);
- ``resolved``: the hidden tests pass (``EpisodeResult.resolved``);
- ``blocked``: neither edited nor resolved: the agent ended without changing anything.

H0 (per endpoint): the probe does not change the success probability (P(b) = P(c) for the discordant pairs).
H1: it does, in either direction. Pairs are treated as independent (no clustering by repository or training seed)
and no adjustment is made for the several probes × arms × endpoints: a picture of side effects, not a decision.

References: Tango T, Stat Med 1998;17:891–908; Newcombe RG, Stat Med 1998;17:2635–2650; McNemar Q,
Psychometrika 1947;12:153–157.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from evalsuite.noninferiority import PairedMethod, mcnemar_test, paired_table, rd_ci_paired
from evalsuite.rates import StatsInputError
from evalsuite.schema import HintProbeResult, PairedChange, ProbeEndpoint, ProbeInfo

PROBE_ENDPOINTS = ("edited", "resolved", "blocked")
PAIR_COLUMNS = ("probe", "arm", "state_id", "delivered", "plain_edited", "plain_resolved", "probe_edited",
                "probe_resolved")  # fmt: skip
_METHOD_NAME = {"tango": "tango score", "newcombe": "newcombe paired (method 10)"}


def _outcomes(sub: pd.DataFrame, side: str) -> dict[str, np.ndarray]:
    edited = sub[f"{side}_edited"].to_numpy(dtype=bool)
    resolved = sub[f"{side}_resolved"].to_numpy(dtype=bool)
    return {"edited": edited, "resolved": resolved, "blocked": ~edited & ~resolved}


def _endpoint(name: str, probe: np.ndarray, plain: np.ndarray, method: PairedMethod) -> ProbeEndpoint:
    a, b, c, d = paired_table(probe, plain)  # treatment = probe, baseline = plain
    n = a + b + c + d
    lo, hi = rd_ci_paired(a, b, c, d, method=method)
    change = PairedChange(endpoint=name, a=a, b=b, c=c, d=d, estimate=(b - c) / n, ci_low=lo, ci_high=hi,
                          method=_METHOD_NAME[method], mcnemar_p=mcnemar_test(a, b, c, d, exact=True))
    return ProbeEndpoint(endpoint=name, plain_rate=(a + c) / n, probe_rate=(a + b) / n,  # type: ignore[arg-type]
                         change=change)


def _check(pairs: pd.DataFrame, probes: Mapping[str, ProbeInfo]) -> None:
    if not isinstance(pairs, pd.DataFrame) or not set(PAIR_COLUMNS) <= set(pairs.columns):
        raise StatsInputError(f"hint_probe_study needs a DataFrame with columns {list(PAIR_COLUMNS)} "
                              "(one row per paired state)")
    if pairs.empty:
        raise StatsInputError("hint_probe_study: no paired states; evaluate the same checkpoints, tasks and seeds "
                              "with and without the probe")
    unknown = sorted(set(pairs["probe"]) - set(probes))
    if unknown:
        raise StatsInputError(f"hint_probe_study: probes {unknown} have no ProbeInfo; pass probes={{name: info}}")
    dup = pairs.duplicated(["probe", "arm", "state_id"])
    if dup.any():
        first = pairs[dup].iloc[0]
        raise StatsInputError(f"hint_probe_study: state {first['state_id']!r} appears twice for probe "
                              f"{first['probe']!r}, arm {first['arm']!r}; one row per (probe, arm, state)")
    for col in PAIR_COLUMNS[3:]:
        if not pairs[col].isin([True, False]).all():
            raise StatsInputError(f"hint_probe_study: column {col!r} must hold booleans (no missing values)")


def hint_probe_study(pairs: pd.DataFrame, probes: Mapping[str, ProbeInfo], *,
                     method: PairedMethod = "tango") -> list[HintProbeResult]:
    """Per (probe, arm): plain vs probe rates of ``edited``, ``resolved`` and ``blocked`` on the paired states, the
    paired difference (probe − plain) with a ``method`` CI (95 %) and the exact McNemar p (module docstring).

    ``pairs``: one row per (probe, arm, state) with columns ``PAIR_COLUMNS``: ``delivered`` says whether the probe
    message was actually inserted in the probe episode; ``plain_*``/``probe_*`` are the two episodes' outcomes.
    ``probes``: the ``ProbeInfo`` of every probe named in ``pairs`` (copied into the results for the report).
    """
    if method not in _METHOD_NAME:
        raise StatsInputError(f"hint_probe_study: method {method!r}; use 'tango' or 'newcombe'")
    _check(pairs, probes)
    out = []
    for (name, arm), sub in pairs.groupby(["probe", "arm"], sort=True):
        plain, probe = _outcomes(sub, "plain"), _outcomes(sub, "probe")
        delivered = int(sub["delivered"].astype(bool).sum())
        notes = ["Δ = probe − plain on the same (checkpoint, task, episode seed); b = with the probe only, "
                 "c = plain only; states treated as independent, no multiplicity adjustment (exploratory)"]
        if delivered < len(sub):
            notes.append(f"the probe message was inserted in {delivered} of {len(sub)} probe episodes; where it was "
                         "not, both episodes had the same prompt")
        out.append(HintProbeResult(probe=probes[str(name)], arm=str(arm), n_states=len(sub), delivered=delivered,
                                   endpoints=[_endpoint(e, probe[e], plain[e], method) for e in PROBE_ENDPOINTS],
                                   notes=notes))
    return out
