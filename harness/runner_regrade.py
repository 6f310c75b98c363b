"""Offline regrade (``tgsuite eval --regrade``): re-decide every finished episode from its stored artifacts.

No sandbox runs. For the latest attempt of each episode the grade is re-derived from ``grade/test_output.txt`` and
``grade/junit.xml`` with the current parser and decision rules (``harness.grading.grade_from_output``), behaviour
checkers are re-run on ``trajectory.jsonl``, and ``result.json`` is rewritten atomically and logged in
``attempts.jsonl`` as a ``regrade`` of the same attempt (``harness.attempt_log``); ``results.jsonl`` is
rebuilt. Ambiguous grades use a control grade already cached in ``controls/``; without one the episode stays
``ambiguous`` (run ``tgsuite eval`` again, without ``--regrade``, to run the control). INFRA results are left as
they are (they are re-run, not regraded). Use it when a parser or checker changes (bump ``GRADER_VERSION``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from harness.attempt_log import write_result
from harness.grading import GRADER_VERSION, STDERR_SEPARATOR, TEST_LOG_ARTIFACT, grade_from_output
from harness.infra import ControlCache, Outcome, agent_outcome, atomic_write_text, settle_ambiguous
from harness.interfaces import EpisodeLimits
from harness.rundir import counting_attempt, episode_dirs, read_manifest, read_trajectory
from harness.runner import rebuild_results, run_lock
from harness.runner_episode import EpisodeContext, EpisodeJob, episode_result
from harness.schema import EpisodeResult, Grade, TaskSet

log = logging.getLogger(__name__)


class _NoFactory:
    kind = "local"
    isolated = False

    def open(self, *a: object, **k: object) -> None:
        raise RuntimeError("regrade runs no sandbox")

    def image_digests(self) -> dict[str, str]:
        return {}


def regrade_run(out_dir: str | Path, task_set: TaskSet, *,
                excluded_tests: Mapping[str, list[str]] | None = None) -> list[EpisodeResult]:
    """Regrade every finished episode of ``out_dir`` offline; returns the rebuilt results."""
    out = Path(out_dir)
    man = read_manifest(out)
    if man is None:
        raise ValueError(f"{out}: no manifest.json, so this is not a run directory; fix: point --out at one")
    if man.task_set_sha256 != task_set.sha256:
        raise ValueError(f"{out}/manifest.json: run used task set sha256 {man.task_set_sha256[:12]}, "
                         f"not {task_set.sha256[:12]}; fix: pass the run's own --tasks")
    by_id = task_set.by_id()
    digests = man.image_digests
    ctx = EpisodeContext(run_id=man.run_id, out_dir=out, factory=_NoFactory(), limits=EpisodeLimits(),
                         controls=ControlCache(out / "controls"), excluded_tests=dict(excluded_tests or {}))
    with run_lock(out):
        n = _regrade_all(out, by_id, ctx, digests)
    log.info("regraded %d episodes with %s", n, GRADER_VERSION)
    return rebuild_results(out, task_set.instances, [a.name for a in man.arms], man.seeds)


def _regrade_all(out: Path, by_id: dict, ctx: EpisodeContext, digests: dict[str, str]) -> int:
    n = 0
    for iid, _, _, sdir in episode_dirs(out):
        inst = by_id.get(iid)
        got = counting_attempt(sdir) if inst is not None else None
        if got is None:
            continue
        adir, old = sdir / f"a{got[0]}", got[1]
        if old.failure_class == "infra" or not (adir / "trajectory.jsonl").is_file():
            continue
        new = _regrade_attempt(adir, old, inst, ctx, digests.get(inst.image, inst.image))
        write_result(out, adir, new, event="regrade")
        n += 1
    return n


def _regrade_attempt(adir: Path, old: EpisodeResult, inst, ctx: EpisodeContext, digest: str) -> EpisodeResult:
    traj = read_trajectory(adir / "trajectory.jsonl")
    patch = (adir / "patch.diff").read_text() if (adir / "patch.diff").is_file() else ""
    grade = _stored_grade(adir / "grade", old, inst, ctx.excluded_tests.get(inst.instance_id, []))
    outcome: Outcome = agent_outcome(traj, patch, grade)
    if outcome.status == "ambiguous" and grade is not None:
        control = ctx.controls.get(inst.instance_id, "gold", digest, GRADER_VERSION)
        if control is not None:
            outcome = settle_ambiguous(grade, control)
    job = EpisodeJob(inst, old.arm, old.seed, old.attempt, traj.seed)
    return episode_result(job, ctx, traj, grade, outcome)


def _stored_grade(gdir: Path, old: EpisodeResult, inst, excluded: list[str]) -> Grade | None:
    out_file = gdir / "test_output.txt"
    if not out_file.is_file():
        return old.grade
    stdout = out_file.read_text().split(STDERR_SEPARATOR, 1)[0]
    junit = (gdir / "junit.xml").read_text() if (gdir / "junit.xml").is_file() else None
    test_log = (gdir / TEST_LOG_ARTIFACT).read_text() if (gdir / TEST_LOG_ARTIFACT).is_file() else None
    skip = set(excluded)
    touched = bool(old.grade and old.grade.tests_touched)
    grade = grade_from_output(
        f2p=[t for t in inst.FAIL_TO_PASS if t not in skip], p2p=[t for t in inst.PASS_TO_PASS if t not in skip],
        stdout=stdout, junit_text=junit, touched_tests=touched,
        duration_s=old.grade.duration_s if old.grade else 0.0, instance_id=inst.instance_id,
        log_parser=inst.test_log_parser, log_text=test_log,
    )
    if grade is not None:
        atomic_write_text(gdir / "grade.json", grade.model_dump_json(indent=1))
    else:  # documented: truncated output cannot be re-decided; the recorded grade stays, said out loud
        log.warning("%s: no exit-code marker (the test output is truncated); the recorded grade is kept. Fix: "
                    "delete the attempt folder to re-run it", out_file)
    return grade or old.grade
