"""Import a tgsuite run directory (``tgsuite eval`` / ``harness.runner.run_eval``): one record per episode.

For every ``episodes/<instance>/<arm>/s<seed>/`` the attempt that counts is read (``harness.rundir``'s rule, the
one ``results.jsonl``, analyze and the report use: the highest finished attempt; the run directory is not
modified), with its ``trajectory.jsonl``. Outcome: ``resolved``
of a scored episode (``None`` for infra / invalid-instance episodes, whose ``infra_error`` is set instead),
``code_runs`` from the stored grade (``harness.signals.grade_code_runs``), ``status``, and ``truncated`` for the
``limit_*`` statuses. User feedback is in the trajectory itself (``discarded_drafts``: drafts the feedback provider
rejected). An attempt that ended before the agent wrote a trajectory (an infrastructure failure at sandbox start)
has no trajectory to import; it is counted as a skip, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from harness.rundir import RESULT_FILE, counting_attempt, episode_dirs, read_trajectory
from harness.schema import EpisodeResult
from harness.signals import grade_code_runs
from harness.trajdata.common import NoTrajectory, RecordError, record_id, sha256_file
from harness.trajdata.schema import Provenance, RecordOutcome, TrajectoryRecord

NO_TRAJECTORY = "no trajectory.jsonl (the attempt failed before the agent ran)"


def _outcome(res: EpisodeResult) -> RecordOutcome:
    infra = None
    if res.failure_class in ("infra", "invalid_instance"):
        infra = f"{res.failure_class}: {res.error or res.status}"
    return RecordOutcome(resolved=res.resolved if res.scored else None, code_runs=grade_code_runs(res.grade),
                         infra_error=infra, status=res.status,
                         truncated=res.status if res.status.startswith("limit_") else None)


def iter_run_dir(run_dir: str | Path) -> Iterator[TrajectoryRecord | RecordError]:
    """Each episode's record; a ``RecordError`` for an unreadable episode or one without a trajectory."""
    root = Path(run_dir)
    if not (root / "episodes").is_dir():
        raise RecordError(root, "directory", "episodes/", "not a tgsuite run directory",
                          "pass the --out directory of `tgsuite eval` (it holds manifest.json and episodes/)")
    for _, _, _, sdir in episode_dirs(root):
        loc = sdir.relative_to(root).as_posix()
        try:
            got = counting_attempt(sdir)
            if got is None:
                continue  # no finished attempt: the run is incomplete there (resume it); nothing to import yet
            attempt, res = got
            d = sdir / f"a{attempt}"
            loc = d.relative_to(root).as_posix()
            if not (d / "trajectory.jsonl").is_file():
                yield NoTrajectory(root, loc, "trajectory.jsonl", NO_TRAJECTORY, "nothing to fix: it is counted")
                continue
            traj = read_trajectory(d / "trajectory.jsonl")
        except ValueError as exc:
            yield RecordError(root, loc, "result.json / trajectory.jsonl", str(exc).splitlines()[0],
                              "delete the attempt and resume the run to re-run it")
            continue
        prov = Provenance(source_format="tgsuite_run", path=str(root), locator=loc,
                          source_id=f"{res.run_id}/{res.instance_id}/{res.arm}/s{res.seed}/a{res.attempt}",
                          source_sha256=sha256_file(d / RESULT_FILE), model=res.policy)
        yield TrajectoryRecord(record_id=record_id(prov), trajectory=traj, outcome=_outcome(res), provenance=prov)
