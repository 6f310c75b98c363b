"""The reward: every signal of an episode, each a weighted term with a documented scale (METHOD §6.1).

    R(τ) = Σ_k  sign_k · w_k · R_k(τ)

The signals come from ``harness.signals.episode_signals`` (one definition for rollouts, imported logs and
evaluation episodes); the weights ``w_k ≥ 0`` are ``RewardCfg`` values (``[reward]`` in ``repro/configs/base.toml``).
Terms, their scale and sign:

==============  =====  ================================================================================
term            sign   R_k and its scale
==============  =====  ================================================================================
``task``        +      1 if the hidden tests pass (graded by the environment), else 0
``fmt``         +      share of applicable turns the behaviour checker passes, [0, 1]; 1 if none applies
``code_runs``   +      +1 the hidden tests executed without collection/import errors, -1 they did not,
                       0 unknown (no grade, or an invalid grade)
``tests_run``   +      1 if the agent ran the visible tests at least once, else 0
``edits``       +      the edit-count shape below, in [-1, 1]
``rework``      −      edits that undo or rewrite the agent's own earlier edits (a count, 1 per edit)
``tool_errors`` −      repeated tool errors (a count, 1 per repeat of an earlier error)
``protocol``    −      invalid tool calls (a count: malformed calls + calls after ``finish``)
``feedback``    +      the user's feedback in [-1, 1]; 0 when the episode carries none
==============  =====  ================================================================================

Edit-count shape (``edits_shape``, target T = ``reward.edits_target``): 0 edits → 0 (nothing changed);
1…T edits → 1; beyond T it falls linearly by 1/T per extra edit down to -1 (at 3T edits and above). So doing
something is rewarded, a focused change gets the full term, and sprawling edit churn costs.

Not covered: grading (the environment grades; ``resolved`` and ``code_runs`` are inputs here). User feedback in RL
rollouts: the rollout records no user reaction (its hints, with ``hint_in_rollout``, are prompts written before a
turn, not feedback on it), so the ``feedback`` term is 0 there; it acts on imported logs — a logged rating, or the
drafts a feedback provider rejected in a ``tgsuite eval`` run (``repro.dataset_io.record_reward``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.schema import Verdict
from harness.signals import EpisodeSignals

if TYPE_CHECKING:
    from repro.config import RewardCfg

# term -> (sign, weight field of RewardCfg)
TERMS: dict[str, tuple[int, str]] = {
    "task": (1, "w_task"),
    "fmt": (1, "w_fmt"),
    "code_runs": (1, "w_code_runs"),
    "tests_run": (1, "w_tests_run"),
    "edits": (1, "w_edits"),
    "rework": (-1, "w_rework"),
    "tool_errors": (-1, "w_tool_errors"),
    "protocol": (-1, "w_protocol"),
    "feedback": (1, "w_feedback"),
}


def format_reward(verdicts: Sequence[Verdict]) -> float:
    """R_fmt = fraction of applicable turns that PASS; 1 when no turn is applicable (METHOD §6.1)."""
    applicable = [v for v in verdicts if v != "NA"]
    if not applicable:
        return 1.0
    return sum(v == "PASS" for v in applicable) / len(applicable)


def edits_shape(n: int, target: int) -> float:
    """The edit-count term (module docstring): 0 → 0, 1…target → 1, then −1/target per extra edit, floor −1."""
    if target < 1:
        raise ValueError(f"reward.edits_target must be >= 1, got {target}")
    if n <= 0:
        return 0.0
    if n <= target:
        return 1.0
    return max(-1.0, 1.0 - (n - target) / target)


def reward_components(signals: EpisodeSignals, verdicts: Sequence[Verdict], weights: RewardCfg) -> dict[str, float]:
    """R_k of every term (unweighted, before the sign; see the module docstring)."""
    code = {True: 1.0, False: -1.0, None: 0.0}[signals.code_runs]
    return {
        "task": float(signals.resolved),
        "fmt": format_reward(verdicts),
        "code_runs": code,
        "tests_run": float(signals.tests_run > 0),
        "edits": edits_shape(signals.edits, int(weights.edits_target)),
        "rework": float(signals.rework),
        "tool_errors": float(signals.repeated_tool_errors),
        "protocol": float(signals.invalid_tool_calls),
        "feedback": float(signals.feedback) if signals.feedback is not None else 0.0,
    }


def contributions(components: dict[str, float], weights: RewardCfg) -> dict[str, float]:
    """sign_k · w_k · R_k per term: the reward breakdown (sums to :func:`total_reward`)."""
    missing = set(TERMS) - set(components)
    if missing:
        raise ValueError(f"reward components lack {sorted(missing)}; build them with reward_components()")
    return {k: sign * float(getattr(weights, field)) * components[k] for k, (sign, field) in TERMS.items()}


def total_reward(components: dict[str, float], weights: RewardCfg) -> float:
    """R = Σ_k sign_k · w_k · R_k."""
    return sum(contributions(components, weights).values())
