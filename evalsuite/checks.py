"""Checks that decide whether data can be evidence at all (issue #15): degenerate outcomes, assay sensitivity
(a preregistered baseline-rate range and an optional positive control), the minimum number of seeds for a
method-level claim, and the worst case for missing cells.

Each check returns a reason in words (or None). A blocked criterion is "not evaluated", never passed: the plan's
verdict then cannot be SHIP. References: ICH E10 (2000) §1.5 'assay sensitivity'; EMA CPMP/EWP/2158/99 (2005).
"""

from __future__ import annotations

import math

import numpy as np

from evalsuite.outcomes import OutcomeTable
from protocols.schema import CriterionSpec, Protocol

# With m seeds per arm the seed-level randomisation test's smallest one-sided p is 1 / C(2m, m): 0.05 at m = 3,
# 0.014 at m = 4, 0.004 at m = 5. Below 5 a method-level claim rests on the parametric model alone.
MIN_SEEDS_METHOD_CLAIM = 5


def min_randomisation_p(m: int) -> float:
    """Smallest one-sided p of a seed-level permutation test with m seeds per arm: 1 / C(2m, m)."""
    return 1.0 / math.comb(2 * m, m)


def _counts(table: OutcomeTable, endpoint: str, role: str) -> tuple[int, int]:
    ep = table.episodes
    y = ep.loc[ep["role"] == role, endpoint]
    return int(y.sum()), int(len(y))


def not_evidence(table: OutcomeTable, c: CriterionSpec, proto: Protocol) -> str | None:
    """Why this criterion's data cannot be evidence, or None. Checks: both arms constant at the same value; for
    superiority-type criteria, fewer than the plan's ``decision.min_events`` of the rarer outcome in both arms
    together; for non-inferiority, the baseline rate outside the plan's [min_baseline_rate, max_baseline_rate]."""
    xt, nt = _counts(table, c.endpoint, "treatment")
    xc, nc = _counts(table, c.endpoint, "baseline")
    if nt == 0 or nc == 0:
        return None
    if (xt, xc) == (0, 0) or (xt, xc) == (nt, nc):
        side = "fails" if xt == 0 else "passes"
        return (f"{c.endpoint}: not evidence — every episode in both arms {side} ({xt}/{nt} vs {xc}/{nc}); outcomes "
                "stuck at the floor or ceiling cannot show a difference, nor its absence")  # fmt: skip
    events = min(xt + xc, nt + nc - xt - xc)
    if c.kind != "noninferiority" and events < proto.decision.min_events:
        which = "successes" if xt + xc <= nt + nc - xt - xc else "failures"
        return (f"{c.endpoint}: not evidence — {events} {which} in both arms together ({xt}/{nt} vs {xc}/{nc}), "
                f"fewer than the preregistered decision.min_events = {proto.decision.min_events}; a superiority "
                "claim needs more events")  # fmt: skip
    a = proto.assay_sensitivity
    rate = xc / nc
    lo = a.min_rate(c.margin)
    if c.kind == "noninferiority" and not (lo <= rate <= a.max_baseline_rate):
        where = "below the preregistered minimum" if rate < lo else "above the preregistered maximum"
        where += "" if a.min_baseline_rate is not None or rate >= lo else " (2 x the margin: the default)"
        bound = lo if rate < lo else a.max_baseline_rate
        return (f"{c.endpoint}: assay sensitivity not shown — the baseline rate {xc}/{nc} = {rate:.3f} is {where} "
                f"{bound:.3f}; at this rate the evaluation cannot detect a loss of {c.margin:.3f} "
                f"(treatment {xt}/{nt})")  # fmt: skip
    return None


def seed_claim_block(proto: Protocol) -> str | None:
    """Why method-level claims are not allowed with this plan's seeds, or None."""
    m = proto.design.seeds_per_arm
    if proto.estimand != "method" or m >= MIN_SEEDS_METHOD_CLAIM:
        return None
    return (f"the plan has {m} training seeds per arm; a method-level claim needs at least {MIN_SEEDS_METHOD_CLAIM} "
            f"(with {m}, no seed-level randomisation test can reach one-sided {0.025}: its smallest p is "
            f"{min_randomisation_p(m):.3f}); the result is descriptive, not a claim")  # fmt: skip


def control_protocol(proto: Protocol) -> Protocol | None:
    """The plan with the positive control in place of the treatment arm (None when the plan has no control)."""
    pc = proto.assay_sensitivity.positive_control
    if pc is None:
        return None
    data = proto.model_dump(mode="json")
    data["arms"] = [{**a, "name": pc.arm, "description": pc.description} if a["role"] == "treatment" else a
                    for a in data["arms"]]  # fmt: skip
    data["assay_sensitivity"] = {**data["assay_sensitivity"], "positive_control": None}
    return Protocol.model_validate(data)


def lower_bounds_text(values: dict[str, float]) -> str:
    return ", ".join(f"{k} L = {v:+.4f}" if np.isfinite(v) else f"{k} L = n/a" for k, v in values.items())
