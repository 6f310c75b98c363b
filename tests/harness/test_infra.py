"""Failure taxonomy: exception classification, agent outcomes, ambiguous settling, retry policy, guard, cache."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from harness.grading import GraderError, PatchTooLarge
from harness.infra import (
    ControlCache,
    ErrorRateGuard,
    RetryPolicy,
    agent_outcome,
    classify_exception,
    classify_log,
    settle_ambiguous,
)
from harness.sandbox import SandboxUnavailable
from harness.schema import EpisodeResult, Grade, LimitHit, Trajectory


class EndpointDown(RuntimeError):
    kind = "MODEL_ENDPOINT"


@pytest.mark.parametrize(
    ("exc", "phase", "status", "kind"),
    [
        (SandboxUnavailable("daemon gone", kind="DOCKER_DAEMON"), "agent", "infra_error", "DOCKER_DAEMON"),
        (GraderError("reset failed"), "grade", "infra_error", "GRADER_CRASH"),
        (EndpointDown("503"), "agent", "infra_error", "MODEL_ENDPOINT"),
        (ConnectionRefusedError("refused"), "agent", "infra_error", "MODEL_ENDPOINT"),
        (OSError(errno.ENOSPC, "No space left on device"), "grade", "infra_error", "DISK_FULL"),
        (MemoryError(), "agent", "infra_error", "HOST_OOM"),
        (KeyError("bug"), "agent", "infra_error", "POLICY_CRASH"),
        (ValueError("bug"), "grade", "infra_error", "GRADER_CRASH"),
        (PatchTooLarge("huge"), "extract", "patch_apply_failed", None),
    ],
)
def test_classify_exception(exc: BaseException, phase: str, status: str, kind: str | None) -> None:
    o = classify_exception(exc, phase=phase)  # type: ignore[arg-type]
    assert (o.status, o.infra_kind) == (status, kind)
    assert o.failure_class == ("agent" if status == "patch_apply_failed" else "infra")


def test_classify_log_fallback() -> None:
    assert classify_log("Error response from daemon: container not running") == "DOCKER_DAEMON"
    assert classify_log("write: No space left on device") == "DISK_FULL"
    assert classify_log("foo\nKilled\n") == "HOST_OOM"
    assert classify_log("AssertionError: 1 != 2") is None


def _traj(**kw) -> Trajectory:
    return Trajectory(instance_id="i", policy="p", seed=0, messages=[], **{"finished": True, **kw})


def _grade(**kw) -> Grade:
    return Grade(**{"resolved": False, "valid": True, "reason": "TESTS_FAILED", **kw})


def test_agent_outcome_ordering() -> None:
    assert agent_outcome(_traj(), "p", _grade(resolved=True)).status == "ok"
    assert agent_outcome(_traj(), "p", _grade(valid=False, reason="NO_JUNIT")).status == "ambiguous"
    hit = LimitHit(kind="turns", limit=3)
    assert agent_outcome(_traj(limit_hit=hit, finished=False), "", None).status == "limit_turns"
    assert agent_outcome(_traj(), "", None).status == "empty_patch"
    assert agent_outcome(_traj(), "p", _grade(patch_applied=False)).status == "patch_apply_failed"
    assert agent_outcome(_traj(finished=False), "p", _grade()).status == "protocol_violation"
    o = agent_outcome(_traj(), "p", _grade())
    assert (o.status, o.failure_class) == ("tests_failed", "agent")


def test_settle_ambiguous_with_gold_control() -> None:
    bad = _grade(valid=False, reason="NO_JUNIT")
    o = settle_ambiguous(bad, _grade(resolved=True))
    assert (o.status, o.failure_class) == ("tests_failed", "agent")
    o = settle_ambiguous(bad, _grade(valid=False, reason="GRADE_TIMEOUT"))
    assert (o.status, o.failure_class) == ("invalid_instance", "invalid_instance")


def _res(fc: str) -> EpisodeResult:
    status = {"infra": "infra_error", "agent": "tests_failed", "none": "ok"}[fc]
    return EpisodeResult(run_id="r", instance_id="i", repo="r", cluster="r", arm="a", policy="p", seed=0,
                         status=status, failure_class=fc, resolved=fc == "none")  # type: ignore[arg-type]


def test_retry_policy() -> None:
    rp = RetryPolicy(max_attempts=3, backoff_s=1.0, backoff_factor=2.0, max_backoff_s=3.0)
    assert rp.should_retry(_res("infra"), 0) and rp.should_retry(_res("infra"), 1)
    assert not rp.should_retry(_res("infra"), 2)
    assert not rp.should_retry(_res("agent"), 0) and not rp.should_retry(_res("none"), 0)
    assert rp.should_retry(None, 0)
    assert [rp.delay(a) for a in range(4)] == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_infra_result_cannot_be_resolved() -> None:
    with pytest.raises(ValueError):
        EpisodeResult(run_id="r", instance_id="i", repo="r", cluster="r", arm="a", policy="p", seed=0,
                      status="infra_error", failure_class="infra", resolved=True)


def test_error_rate_guard() -> None:
    g = ErrorRateGuard(max_rate=0.5, min_attempts=4)
    for fc in ("infra", "infra", "infra"):
        g.record(_res(fc))
    assert not g.tripped  # not enough attempts yet
    g.record(_res("agent"))
    assert g.tripped


def test_control_cache_runs_once_across_threads(tmp_path: Path) -> None:
    cache = ControlCache(tmp_path / "controls")
    calls = []

    def run() -> Grade:
        calls.append(1)
        return _grade(resolved=True, reason="RESOLVED")

    threads = [threading.Thread(target=cache.get_or_run, args=("i", "gold", "sha256:x", "grade@v1", run))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    again = ControlCache(tmp_path / "controls").get_or_run("i", "gold", "sha256:x", "grade@v1", run)
    assert again.resolved and len(calls) == 1
    ControlCache(tmp_path / "controls").get_or_run("i", "gold", "sha256:y", "grade@v1", run)
    assert len(calls) == 2  # another image digest is another control run
