"""The arms of a run: names, policy objects built from spec strings, the lock around policies that are not
thread-safe, and the default episode metrics (``harness.runner`` and the Ray workers of ``harness.runner_ray``)."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.interfaces import Policy, PolicyOutput
from harness.runner_episode import SandboxFactory
from harness.schema import EpisodeMetrics, Message, TaskInstance, TaskSet, Trajectory

ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")


class _LockedPolicy:
    """Serialises ``act`` of a policy that is not declared thread-safe."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.name, self._lock = inner, inner.name, threading.Lock()

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        with self._lock:
            return self.inner.act(messages, tools=tools, rng=rng)


def _policy_options(spec: str, task_set: TaskSet, factory: SandboxFactory | None) -> dict[str, Any]:
    """Options ``make_policy`` needs for a scripted spec: the task set for ``oracle``; for ``expert`` the factory's
    scratch sandboxes, so the code it screens runs in this run's kind of sandbox, never on the host."""
    if spec == "oracle":
        return {"tasks": task_set}
    if spec == "expert" and factory is not None:
        return {"screen_sandbox": factory.open_scratch}
    return {}


def resolve_arms(arms: Mapping[str, Policy | str], task_set: TaskSet,
                 factory: SandboxFactory | None = None) -> tuple[dict[str, Policy], dict[str, str]]:
    """Arm name → policy object (built from its spec string where given; not thread-safe ones behind a lock) and
    arm name → spec. Raises ValueError naming the arm and the fix."""
    policies: dict[str, Policy] = {}
    specs: dict[str, str] = {}
    for name, p in arms.items():
        if not ARM_NAME.match(name):
            raise ValueError(f"arm name {name!r} must match {ARM_NAME.pattern} (it becomes a directory name); "
                             "fix: name the arm, e.g. --policy mine=hf:ckpt/step_100")
        if isinstance(p, str):
            from harness.policies import make_policy

            try:
                specs[name], p = p, make_policy(p, **_policy_options(p, task_set, factory))
            except (OSError, ValueError) as exc:
                raise ValueError(f"--policy {name}={p}: cannot build it ({exc}); fix: check the checkpoint "
                                 "directory or endpoint") from None
        else:
            specs[name] = getattr(p, "spec", None) or f"object:{p.name}"
        policies[name] = p if getattr(p, "thread_safe", False) else _LockedPolicy(p)  # type: ignore[assignment]
    return policies, specs


def snapshot_metrics(task_set: TaskSet) -> Callable[[Trajectory, TaskInstance], EpisodeMetrics] | None:
    """``harness.metrics.metrics_for`` (metrics against each instance's base snapshot), or None when the task set
    has no snapshots on disk (in-memory task sets in tests: basic counts only)."""
    from harness.metrics import metrics_for

    return metrics_for(task_set) if (Path(task_set.path) / "snapshots").is_dir() else None


__all__ = ["ARM_NAME", "resolve_arms", "snapshot_metrics"]
