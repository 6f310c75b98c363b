"""The per-step metrics of an RL batch that do not come from the loss (``repro.train`` logs them): rewards and
their breakdown, pass rate, behaviour compliance, tool-call validity, rollout shape (:func:`rollout_metrics`), the
policy-version staleness and finish reasons (:func:`version_metrics`), and the one-line gate summary of a TG step
(:func:`gate_summary`; the gate diagnostics themselves come from ``repro.trainer_step``)."""

from __future__ import annotations

from typing import Any

from harness.tools import parse_tool_calls
from repro.rollout import RolloutSample


def rollout_metrics(groups: list[list[RolloutSample]]) -> dict[str, Any]:
    """The step's rollout metrics (means over its trajectories; None where nothing applies)."""
    flat = [s for g in groups for s in g]
    n = len(flat)
    verdicts = [v for s in flat for v in s.verdicts]
    applicable = [v for v in verdicts if v != "NA"]
    traj_ok = [all(v != "FAIL" for v in s.verdicts) for s in flat if any(v != "NA" for v in s.verdicts)]
    echo = [("reminder" in t.lower() or "as requested" in t.lower()) for s in flat for t in s.texts]
    # valid calls / calls over the step's assistant turns (harness.metrics' tool_call_validity); None: no call
    calls = [c.valid for s in flat for t in s.texts for c in parse_tool_calls(t)]
    out: dict[str, Any] = {
        "reward/total": sum(s.reward for s in flat) / n,
        "task/pass_rate": sum(s.outcome.resolved for s in flat) / n,
        "behaviour/compliance": (sum(v == "PASS" for v in applicable) / len(applicable)) if applicable else None,
        "behaviour/trajectory_compliance": (sum(traj_ok) / len(traj_ok)) if traj_ok else None,
        "rollout/response_tokens": sum(sum(s.encoded.act) for s in flat) / n,
        "rollout/turns": sum(s.n_turns for s in flat) / n,
        "rollout/truncated_frac": sum(s.truncated for s in flat) / n,
        "rollout/infra_errors": sum(s.outcome.infra_error is not None for s in flat),
        "guidance/hint_echo_rate": (sum(echo) / len(echo)) if echo else None,
        "rollout/tool_call_validity": (sum(calls) / len(calls)) if calls else None,
    }
    for key in flat[0].rewards:  # the breakdown: R_k (reward/<term>) and sign·w·R_k (reward/contrib/<term>)
        out[f"reward/{key}"] = sum(s.rewards[key] for s in flat) / n
        out[f"reward/contrib/{key}"] = sum(s.reward_terms.get(key, 0.0) for s in flat) / n
    return out


def version_metrics(groups: list[list[RolloutSample]], step: int) -> dict[str, Any]:
    """What the engine stamped on the batch trained at ``step`` (whose weights are version ``step``): the
    staleness ``step − RolloutSample.version`` (mean and max; 0 for synchronous runs, ≤ the lead when async) and
    the share of assistant turns that ended at ``max_new_tokens`` / the context budget (``finish_reason ==
    "length"``)."""
    flat = [s for g in groups for s in g]
    stale = [step - s.version for s in flat]
    reasons = [r for s in flat for r in s.finish_reasons]
    return {
        "rollout/staleness_mean": sum(stale) / len(stale),
        "rollout/staleness_max": max(stale),
        "rollout/finish_length_frac": (sum(r == "length" for r in reasons) / len(reasons)) if reasons else None,
    }


def gate_summary(metrics: dict[str, Any]) -> str:
    """One line of a TG step's gate diagnostics (``repro.trainer_step``): the share of turns guided, and at the
    guided turns' behaviour's first token the divergence and P_T(v*) vs P_S(v*). Says so when the gate guided
    nothing or the hint did not move the teacher there."""
    frac, n = metrics.get("guidance/guided_turn_frac"), metrics.get("guidance/anchor_tokens") or 0
    head = f"gate on {frac:.0%} of turns" if frac is not None else "gate: no assistant turn"
    if not frac:
        return head + " (inactive: no failing turn to guide)"
    if not n:
        return head + "; no guided turn reached its behaviour's first token"
    kl, pt, ps = metrics["guidance/anchor_kl"], metrics["guidance/anchor_p_teacher"], metrics["guidance/anchor_p_student"]
    flat = " (the hint does not move the teacher there)" if pt - ps < 0.01 and kl < 1e-3 else ""
    return f"{head}; at the behaviour's first token ({n}): KL {kl:.3g}, P_T {pt:.3g} vs P_S {ps:.3g}{flat}"
