"""Failure taxonomy (HARNESS.md §7.6): AGENT outcomes are counted, INFRA errors are retried and never counted,
AMBIGUOUS grades are settled by a gold control run.

Classification happens at the point of failure from typed exceptions and the episode's own records
(``classify_exception``, ``agent_outcome``, ``settle_ambiguous``); ``classify_log`` is the regex fallback for
free text only. ``RetryPolicy`` says which results are re-queued and how long to back off; ``ErrorRateGuard``
stops a run whose infra-error rate says the harness, not the model, is broken. ``ControlCache`` stores gold and
empty-patch control grades per ``(instance, image digest, grader version)`` so each is run once.

Not covered: a policy that raises an unrelated exception type for an endpoint failure is classed
``GRADER_CRASH``/``POLICY_CRASH`` (still infra, still retried); errors a sandbox reports as a normal exit code
instead of ``SandboxUnavailable`` are agent-visible observations by design.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.grading import GraderError, PatchTooLarge
from harness.sandbox import SandboxUnavailable
from harness.schema import EpisodeResult, EpisodeStatus, FailureClass, Grade, LimitHit, Trajectory

log = logging.getLogger(__name__)

INFRA_KINDS: tuple[str, ...] = (
    "DOCKER_DAEMON", "IMAGE_MISSING", "CONTAINER_CREATE", "CONTAINER_START", "EXEC_TRANSPORT", "DISK_FULL",
    "HOST_OOM", "MODEL_ENDPOINT", "GRADER_CRASH", "POLICY_CRASH", "PREFLIGHT", "SANDBOX", "INTERRUPTED",
)
AMBIGUOUS_KINDS: tuple[str, ...] = (
    "GRADE_TIMEOUT", "TESTS_OOM_KILLED", "NO_TESTS_COLLECTED", "NO_JUNIT", "INVALID_GRADE", "TEST_PATCH_FAILED",
)
Phase = Literal["setup", "agent", "extract", "grade", "behaviour"]
_LIMIT_STATUS: dict[str, EpisodeStatus] = {
    "turns": "limit_turns", "tokens": "limit_tokens", "wall_time": "limit_time", "context": "limit_context",
}


@dataclass(frozen=True)
class Outcome:
    """What happened to an episode, before it becomes an ``EpisodeResult``."""

    status: EpisodeStatus
    failure_class: FailureClass
    infra_kind: str | None = None
    error: str | None = None


# ------------------------------------------------------------------------------------------------ classification


def classify_exception(exc: BaseException, *, phase: Phase) -> Outcome:
    """Map an exception raised while running an episode to an outcome. Everything but ``PatchTooLarge`` is INFRA.

    ``SandboxUnavailable`` keeps its own kind; exceptions carrying a string ``kind`` attribute (e.g. a policy's
    endpoint error) keep it; disk-full / out-of-memory / docker-SDK errors get their codes; any other exception
    is a harness or policy bug: ``POLICY_CRASH`` in the agent phase, ``GRADER_CRASH`` elsewhere.
    """
    msg = f"{type(exc).__name__}: {exc}"[:2000]
    if isinstance(exc, PatchTooLarge):
        return Outcome("patch_apply_failed", "agent", None, msg)
    kind = _infra_kind(exc, phase)
    return Outcome("infra_error", "infra", kind, f"[{phase}] {msg}")


def _infra_kind(exc: BaseException, phase: Phase) -> str:
    if isinstance(exc, SandboxUnavailable):
        return exc.kind
    if isinstance(exc, GraderError):
        return GraderError.kind
    kind = getattr(exc, "kind", None)
    if isinstance(kind, str) and kind:
        return kind
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "DISK_FULL"
    if isinstance(exc, MemoryError):
        return "HOST_OOM"
    if type(exc).__module__.startswith(("docker.", "requests.", "urllib3.")):
        return "DOCKER_DAEMON" if phase != "agent" else "MODEL_ENDPOINT"
    if isinstance(exc, (ConnectionError, TimeoutError)) and phase == "agent":
        return "MODEL_ENDPOINT"
    return "POLICY_CRASH" if phase == "agent" else "GRADER_CRASH"


_LOG_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("HOST_OOM", re.compile(r"Cannot allocate memory|OutOfMemoryError|^Killed$", re.M)),
    ("DOCKER_DAEMON", re.compile(r"Error response from daemon|Cannot connect to the Docker daemon")),
    ("DISK_FULL", re.compile(r"No space left on device")),
)


def classify_log(text: str) -> str | None:
    """Regex fallback over free text (e.g. a crashed sandbox's stderr): an INFRA code or None. Advisory only."""
    for kind, pat in _LOG_PATTERNS:
        if pat.search(text):
            return kind
    return None


def agent_outcome(trajectory: Trajectory, patch: str, grade: Grade | None) -> Outcome:
    """Outcome of an episode that ran to the end without infra trouble.

    Resolved → ``ok``. An invalid grade → ``ambiguous`` (settle with ``settle_ambiguous``). Otherwise the first
    that applies: a limit hit, an empty patch, a patch that did not apply, no ``finish`` call
    (``protocol_violation``), failing tests.
    """
    if grade is not None and grade.resolved:
        return Outcome("ok", "none")
    if grade is not None and not grade.valid:
        return Outcome("ambiguous", "ambiguous", None, grade.reason)
    if trajectory.limit_hit is not None:
        return Outcome(_LIMIT_STATUS[trajectory.limit_hit.kind], "agent", None, _limit_msg(trajectory.limit_hit))
    if not patch.strip():
        return Outcome("empty_patch", "agent", None, "the agent changed nothing")
    if grade is not None and not grade.patch_applied:
        return Outcome("patch_apply_failed", "agent", None, grade.reason)
    if not trajectory.finished:
        return Outcome("protocol_violation", "agent", None, "the episode ended without a finish call")
    return Outcome("tests_failed", "agent", None, grade.reason if grade else "not graded")


def _limit_msg(hit: LimitHit) -> str:
    return f"{hit.kind} limit {hit.limit:g} reached"


def settle_ambiguous(grade: Grade, control: Grade) -> Outcome:
    """Settle an invalid grade with the gold patch's control grade on the same image and limits.

    Gold resolves → the failure is the agent's (``tests_failed``, counted). Gold does not resolve → the instance
    or environment is broken (``invalid_instance``, excluded for every arm).
    """
    if control.resolved:
        return Outcome("tests_failed", "agent", None, f"settled by gold control run: {grade.reason}")
    return Outcome("invalid_instance", "invalid_instance", None,
                   f"gold control run does not resolve ({control.reason}); candidate: {grade.reason}")


# ------------------------------------------------------------------------------------------------ retries


@dataclass(frozen=True)
class RetryPolicy:
    """INFRA results and crashed attempts (no ``result.json``) are re-run until ``max_attempts`` attempts exist."""

    max_attempts: int = 3
    backoff_s: float = 1.0
    backoff_factor: float = 2.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")

    def retryable(self, result: EpisodeResult | None) -> bool:
        return result is None or result.failure_class == "infra"

    def should_retry(self, result: EpisodeResult | None, attempt: int) -> bool:
        """``attempt`` is the 0-based index of the attempt that produced ``result``."""
        return self.retryable(result) and attempt + 1 < self.max_attempts

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt`` (0 for the first)."""
        if attempt <= 0:
            return 0.0
        return min(self.max_backoff_s, self.backoff_s * self.backoff_factor ** (attempt - 1))


class ErrorRateGuard:
    """Stops scheduling when infra errors exceed ``max_rate`` of finished attempts (after ``min_attempts``)."""

    def __init__(self, *, max_rate: float = 0.5, min_attempts: int = 8) -> None:
        self.max_rate, self.min_attempts = max_rate, min_attempts
        self.n = self.n_infra = 0
        self._lock = threading.Lock()

    def record(self, result: EpisodeResult) -> None:
        with self._lock:
            self.n += 1
            self.n_infra += result.failure_class == "infra"

    @property
    def tripped(self) -> bool:
        with self._lock:
            return self.n >= self.min_attempts and self.n_infra / self.n > self.max_rate


# ------------------------------------------------------------------------------------------------ control cache


class ControlRecord(BaseModel):
    """A control grade (gold or empty patch) of one instance; written to ``controls/`` in the run directory."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    instance_id: str
    kind: Literal["gold", "empty"]
    image_digest: str
    grader_version: str
    grade: Grade


class ControlCache:
    """Control grades on disk, one file per (instance, kind, image digest, grader version); thread-safe, and each
    key is computed at most once per process even when several workers ask at the same time."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _path(self, instance_id: str, kind: str, digest: str, grader_version: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{instance_id}__{kind}__{digest[-16:]}__{grader_version}")
        return self.directory / f"{safe}.json"

    def get(self, instance_id: str, kind: Literal["gold", "empty"], digest: str, grader_version: str) -> Grade | None:
        """The cached control grade, or None (no sandbox is run)."""
        path = self._path(instance_id, kind, digest, grader_version)
        return ControlRecord.model_validate_json(path.read_text()).grade if path.is_file() else None

    def get_or_run(
        self, instance_id: str, kind: Literal["gold", "empty"], digest: str, grader_version: str,
        run: Callable[[], Grade],
    ) -> Grade:
        path = self._path(instance_id, kind, digest, grader_version)
        with self._guard:
            lock = self._locks.setdefault(str(path), threading.Lock())
        with lock:
            if path.exists():
                return ControlRecord.model_validate_json(path.read_text()).grade
            grade = run()
            rec = ControlRecord(instance_id=instance_id, kind=kind, image_digest=digest,
                                grader_version=grader_version, grade=grade)
            atomic_write_text(path, rec.model_dump_json(indent=1))
            return grade


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same directory, fsync and ``os.replace``."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory, fsync and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}{TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, a signal: no half-written temp file stays behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


TMP_SUFFIX = ".tmp"


def sweep_tmp(out_dir: Path) -> int:
    """Remove the temp files ``atomic_write_bytes`` left under ``out_dir`` (a process killed mid-write); call it
    only while holding the run directory's lock. Returns how many were removed."""
    n = 0
    for p in Path(out_dir).rglob(f".*{TMP_SUFFIX}"):
        if p.is_file() and not p.is_symlink():
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
    return n


def is_disk_full(exc: BaseException) -> bool:
    """An ``OSError`` meaning the disk (or a quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_message(out_dir: Path, exc: BaseException) -> str:
    """What a user reads when the run directory's disk is full: the folder, its free space and the fix."""
    try:
        free = f"{shutil.disk_usage(out_dir).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    where = f" writing {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
    return (f"the run directory {out_dir} is on a full disk ({free}; {getattr(exc, 'strerror', None) or exc}{where}). "
            "Stopped at once: no queued episode was started, the ones in flight re-run on resume, finished ones are "
            "kept. Fix: free space there (or use an --out on another disk), then run the same command again.")


def summarize_failures(results: list[EpisodeResult]) -> dict[str, int]:
    """Counts per status, for end-of-run logging and the CLI summary."""
    out: dict[str, int] = {}
    for r in results:
        out[r.status] = out.get(r.status, 0) + 1
    return dict(sorted(out.items()))


__all__ = [
    "AMBIGUOUS_KINDS", "INFRA_KINDS", "ControlCache", "ControlRecord", "ErrorRateGuard", "Outcome", "RetryPolicy",
    "agent_outcome", "atomic_write_bytes", "atomic_write_text", "classify_exception", "classify_log", "settle_ambiguous",
    "summarize_failures",
]
