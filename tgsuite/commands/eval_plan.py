"""``tgsuite eval --protocol FROZEN.json``: the run is checked against the frozen plan before any episode starts.

- **Task set**: the plan's ``task_set.sha256`` must be the task set's (``tgsuite tasks validate DIR`` prints it).
- **Arms**: every arm must be one ``tgsuite analyze`` can read under this plan: ``<plan arm>@s<seed>`` with a
  preregistered training seed (``design.seed_ids`` or 0..seeds_per_arm-1), or the plain plan arm name when the
  plan has a single training seed (one checkpoint per arm) or the policy reports its ``train_seed``; the
  assay-sensitivity positive control follows the same rules. Any other arm would be refused by ``analyze`` after
  the whole evaluation, so it is refused here, naming the fix. A plan arm without any run arm is only a warning
  (it may be evaluated into another run directory).
- **Pinned settings** (the plan's optional ``[eval]`` table, ``protocols.schema.EvalPin``): decoding
  (temperature, top_p, max_tokens) must be what every model arm sends (``generation_settings()`` of its policy,
  defaults included), and the limits and hints what this command runs with.

Pure checks over already-built objects; ``check_run_against_plan`` raises ``CLIError`` listing every problem.
"""

from __future__ import annotations

import re
from typing import Any

from protocols.schema import FrozenProtocol, Protocol
from tgsuite.commands.common import CLIError

_ARM_SEED = re.compile(r"^(?P<arm>[A-Za-z0-9_.\-]+)@s(?P<seed>\d+)$")
DECODING = ("temperature", "top_p", "max_tokens")
LIMIT_FLAGS = {"max_turns": "--max-turns", "wall_s": "--wall-s", "finish_notice": "--finish-notice",
               "format_retries": "--format-retries", "feedback": "--feedback"}


def load_frozen_plan(path: str) -> FrozenProtocol:
    """The frozen record at ``path`` (hash verified), as a CLIError naming the fix when it is not one."""
    from protocols.freeze import load_frozen
    from protocols.load import ProtocolError

    try:
        return load_frozen(path)
    except ProtocolError as exc:
        raise CLIError(f"--protocol {path}: {exc}") from None


def arm_problems(plan: Protocol, arms: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the run's arm names under ``plan`` (module docstring); ``arms``: name → policy."""
    planned = plan.design.planned_seeds
    names = {a.name for a in plan.arms}
    pc = plan.assay_sensitivity.positive_control
    readable = names | ({pc.arm} if pc is not None else set())
    problems: list[str] = []
    covered: set[str] = set()
    for name, policy in arms.items():
        m = _ARM_SEED.match(name)
        base, seed = (m["arm"], int(m["seed"])) if m else (name, getattr(getattr(policy, "inner", policy),
                                                                         "train_seed", None))
        if base not in readable:
            if m is None:
                problems.append(f"arm {name!r} is not an arm of plan {plan.name!r} (its arms: {sorted(names)}) and "
                                "carries no training seed, so `tgsuite analyze` cannot read the run; fix: name it "
                                f"'{name}@s0' (it is then ignored by the analysis) or evaluate it into another --out")
            continue
        if seed is None and len(planned) != 1:
            problems.append(f"arm {name!r} carries no training seed and plan {plan.name!r} preregisters seeds "
                            f"{planned}; fix: name it '{name}@s<seed>', e.g. --policy {name}@s{planned[0]}=SPEC")
        elif seed is not None and seed not in planned:
            problems.append(f"arm {name!r}: training seed {seed} is not preregistered (plan seeds {planned}); fix: "
                            f"evaluate a preregistered seed's checkpoint, e.g. --policy {base}@s{planned[0]}=SPEC")
        covered.add(base)
    warnings = [f"plan arm {a!r} has no arm in this run (expected e.g. --policy {a}@s{planned[0]}=SPEC); evaluate "
                "it into this or another run directory before `tgsuite analyze`" for a in sorted(names - covered)]
    return problems, warnings


def pinned_problems(plan: Protocol, generation: dict[str, dict[str, Any]], run: dict[str, Any]) -> list[str]:
    """Differences between the plan's ``[eval]`` pins and the run: ``generation`` = arm → what its policy sends
    (model arms only), ``run`` = the limits and hints of this invocation (``LIMIT_FLAGS`` keys)."""
    pins = plan.eval.pinned() if plan.eval is not None else {}
    problems: list[str] = []
    for key, want in pins.items():
        if key in DECODING:
            bad = {arm: g.get(key) for arm, g in generation.items() if g.get(key) != want}
            if bad:
                flag = "--" + key.replace("_", "-")
                problems.append(f"the plan pins {key} = {want!r} ([eval].{key}); arms {bad} would use another value; "
                                f"fix: {flag} {want}")
        elif key in run and run[key] != want:
            problems.append(f"the plan pins {key} = {want!r} ([eval].{key}); this run uses {run[key]!r}; fix: "
                            f"{LIMIT_FLAGS[key]} {want}")
    return problems


def check_run_against_plan(frozen: FrozenProtocol, *, task_set_sha256: str, arms: dict[str, Any],
                           run: dict[str, Any], source: str) -> list[str]:
    """Refuse (CLIError listing every problem) a run that the plan's analysis could not use; returns warnings."""
    plan = frozen.protocol
    problems: list[str] = []
    if plan.task_set.sha256 != task_set_sha256:
        problems.append(f"the plan's task set is {plan.task_set.name} sha256 {plan.task_set.sha256[:12]}…, this one "
                        f"hashes to {task_set_sha256[:12]}…; fix: --tasks the preregistered held-out set "
                        "(`tgsuite tasks validate DIR` prints its sha256)")
    arm_errs, warnings = arm_problems(plan, arms)
    generation = {name: p.generation_settings() for name, p in arms.items()
                  if callable(getattr(p, "generation_settings", None))}
    problems += arm_errs + pinned_problems(plan, generation, run)
    if problems:
        raise CLIError(f"--protocol {source} (plan {plan.name!r}): this run does not fit the frozen plan, nothing "
                       "was run:\n  - " + "\n  - ".join(problems))
    return warnings


__all__ = ["arm_problems", "check_run_against_plan", "load_frozen_plan", "pinned_problems"]
