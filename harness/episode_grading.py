"""The grading procedure of one finished episode, shared by evaluation (``harness.runner_episode``) and the RL
reward (``repro.rl_setup.HarnessEnv``), so that a training reward means what an evaluation result means.

1. ``candidate_patch``: the agent's changes, diffed on the HOST against the factory's pristine base repository
   when the factory offers one (``grading.extract_patch_host``: nothing the agent did to ``.git`` counts), else
   ``git diff`` inside the agent's sandbox;
2. ``grade_candidate``: an empty patch is not graded (None); otherwise the hidden tests run on the patch in a
   FRESH sandbox (``role="grade"``), never the agent's, with the instance's validated exclusions (flaky tests,
   ``excluded_tests_of``) left out, through ``grading.grade_patch``;
3. ``settle``: an invalid grade (timeout, OOM, no report, ...) is settled by the gold patch's grade in another
   fresh sandbox (``infra.settle_ambiguous``): gold resolves → the agent's failure; gold fails → the instance is
   broken (``invalid_instance``).

Infrastructure errors (``SandboxUnavailable``, ``GraderError``) propagate; ``PatchTooLarge`` is the agent's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from harness.grading import InfraPolicy, extract_patch, extract_patch_host, grade_patch
from harness.infra import Outcome, settle_ambiguous
from harness.sandbox import Sandbox
from harness.sandbox_providers import SandboxFactory
from harness.schema import Grade, TaskInstance


def candidate_patch(sandbox: Sandbox, base: str, instance: TaskInstance, factory: SandboxFactory) -> str:
    """The agent's diff (step 1 of the module docstring)."""
    host = factory.base_repo(instance)
    if host is None:
        return extract_patch(sandbox, base)
    path, head = host
    return extract_patch_host(sandbox, path, head)


def grade_candidate(factory: SandboxFactory, instance: TaskInstance, patch: str, *, attempt: int, timeout_s: float,
                    infra_policy: InfraPolicy = "reset", excluded_tests: Iterable[str] = (),
                    artifacts: dict[str, str] | None = None) -> Grade | None:
    """Step 2: None for an empty patch, else the grade from a fresh sandbox (``artifacts`` filled as in
    ``grade_patch``, also when it raises)."""
    if not patch.strip():
        return None
    gsb, _ = factory.open(instance, role="grade", attempt=attempt)
    with gsb:
        return grade_patch(instance, patch, gsb, timeout_s=timeout_s, infra_policy=infra_policy,
                           excluded_tests=excluded_tests, artifacts=artifacts)


def gold_control(factory: SandboxFactory, instance: TaskInstance, *, attempt: int, timeout_s: float,
                 infra_policy: InfraPolicy = "reset", excluded_tests: Iterable[str] = ()) -> Grade:
    """The gold patch graded in a fresh sandbox (``role="control"``) under the same limits."""
    sb, _ = factory.open(instance, role="control", attempt=attempt)
    with sb:
        return grade_patch(instance, instance.patch, sb, timeout_s=timeout_s, infra_policy=infra_policy,
                           excluded_tests=excluded_tests)


def settle(grade: Grade, control: Callable[[], Grade]) -> Outcome | None:
    """Step 3: None for a valid grade; for an invalid one the outcome its gold control decides."""
    return None if grade.valid else settle_ambiguous(grade, control())


def excluded_tests_of(task_dir: str | Path) -> dict[str, list[str]]:
    """Tests validation excluded per instance (flaky ones), from the task set's ``validation.json``; {} when it
    has none. Raises ValueError naming the file when it is broken."""
    from harness.validate import load_validation

    report = load_validation(task_dir)
    return report.excluded_tests() if report is not None else {}
