"""Run identity and stopping (issue #14 items 6 and 7), used by ``harness.runner``.

Identity: ``run_id_for(out)`` is the id a run directory keeps for life (read from its manifest on resume; new
runs get the folder name plus 8 random hex digits, so two runs whose ``--out`` folders share a name never share
an id). ``sandbox_run_id(out)`` labels the containers of ONE process (``tgsuite.run_id``): cleanup by that label
removes this process's containers only, never those of another run or of a concurrent resume attempt (which
the run directory's lock refuses anyway, ``harness.runner.run_lock``).

Where: ``check_out_dir(out, kind, task_dir)`` refuses, before anything is written, an ``--out`` that is a file, the
task-set folder or its ``snapshots/``, a folder that holds files (other than dot files: ``.lock``, a pipeline
stage's stamp) but no run manifest (a user's
folder, or a run whose manifest was deleted: its episodes would be adopted under a new run id), and a run of the
other kind (``eval`` vs ``grade``).

Stopping: ``stop_on_signals(stop)`` turns SIGINT and SIGTERM into ``RunInterrupted`` raised in the main thread
(and sets ``stop``); a second signal of the same kind while stopping gets the default action (immediate exit).
The runner then cancels queued episodes, removes this process's sandboxes (``interrupt()`` of the factory, which
ends running commands at once), waits a bounded grace period for in-flight episodes, which record nothing
(their attempt directories have no ``result.json``, so a resume re-runs them in place), rebuilds
``results.jsonl`` from what finished, and re-raises. Outside the main thread no handler is installed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Literal

from harness.rundir import ATTEMPT_LOG_FILE, MANIFEST_FILE, read_manifest

RunKind = Literal["eval", "grade"]
_RUN_ENTRIES = frozenset({MANIFEST_FILE, "episodes", "results.jsonl", "aggregate.json", "controls", ATTEMPT_LOG_FILE})


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal; finished episodes are kept and the run resumes with the same command.
    A ``KeyboardInterrupt`` so that callers that do not know it (e.g. the reproduction pipeline) stop as on
    Ctrl-C; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def run_id_for(out: Path) -> str:
    """The run directory's id: its manifest's when it has one (a resume keeps it), else a new unique one."""
    old = read_manifest(out)
    return old.run_id if old is not None else f"{Path(out).resolve().name}-{uuid.uuid4().hex[:8]}"


def run_kind(policies: list[str]) -> RunKind:
    """``grade`` for a run of graded predictions (every arm's policy spec is ``predictions:...``), else ``eval``."""
    return "grade" if policies and all(p.startswith("predictions:") for p in policies) else "eval"


def check_out_dir(out: Path | str, kind: RunKind, task_dir: Path | str | None = None) -> None:
    """Raise ``ValueError`` naming ``--out``, the problem and the fix unless ``out`` is missing, an empty folder
    or a run directory of ``kind`` (module docstring)."""
    out = Path(out)
    fix = "fix: choose a new folder (it is created) or this kind of run's own folder to resume it"
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a folder; {fix}")
    if task_dir is not None:
        o, t = out.resolve(), Path(task_dir).resolve()
        if o == t or (t / "snapshots") == o or (t / "snapshots") in o.parents:
            raise ValueError(f"--out {out}: is the task set folder {task_dir} (or its snapshots): the run would be "
                             f"written into the task set; {fix}")
    if not out.is_dir():
        return
    for name in ("episodes", "controls"):
        if (out / name).exists() and not (out / name).is_dir():
            raise ValueError(f"--out {out}: {out / name} is a file, where a run keeps a folder; fix: move it away "
                             f"or choose a new folder")
    manifest = read_manifest(out)
    if manifest is None:
        stray = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))  # .lock, a pipeline's stamp
        if stray:
            what = ("run files but no manifest.json (it was deleted?)" if set(stray) & _RUN_ENTRIES
                    else "files that are not a tgsuite run")
            raise ValueError(f"--out {out}: holds {what} (first: {stray[0]!r}); nothing there is overwritten; "
                             f"{fix}, or restore {MANIFEST_FILE}")
        return
    found = run_kind([a.policy for a in manifest.arms])
    if found != kind:
        raise ValueError(f"--out {out}: holds a `tgsuite {found}` run, this is `tgsuite {kind}`; {fix}")


def sandbox_run_id(out: Path | str) -> str:
    """A container label unique to this process and run directory (``<folder name>-<12 random hex digits>``)."""
    return f"{Path(out).resolve().name}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """While inside: SIGINT/SIGTERM set ``stop`` and raise ``RunInterrupted`` in the main thread (module
    docstring). Previous handlers are restored on exit. A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():  # a second signal while stopping: give up on a clean stop
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        stop.set()
        raise RunInterrupted(signum)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)
