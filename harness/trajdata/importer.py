"""Import logged trajectories from any supported format, with every skipped record counted.

Formats (``ImportFormat``): ``openai`` (chat-completions JSONL, ``harness.trajdata.openai_chat``), ``inspect``
(Inspect ``.json`` / ``.eval`` logs, ``harness.trajdata.inspect_log``), ``tgsuite`` (a run directory,
``harness.trajdata.rundir``), or ``auto``: a directory is a tgsuite run, ``.eval`` and ``.json`` are Inspect logs,
``.jsonl`` is chat-completions JSONL.

A bad record raises its ``RecordError`` (file, place, field, fix) unless ``skip_invalid``; then it is counted in
the source's ``skipped`` list with up to 5 examples. Entries that hold no trajectory at all (an episode that failed
before the agent ran) are always counted as skips.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.trajdata.common import NoTrajectory, RecordError, sha256_file
from harness.trajdata.inspect_log import iter_inspect_log
from harness.trajdata.openai_chat import iter_openai_jsonl
from harness.trajdata.rundir import iter_run_dir
from harness.trajdata.schema import SkipCount, SourceFormat, SourceSummary, TrajectoryRecord

ImportFormat = Literal["auto", "openai", "inspect", "tgsuite"]


@dataclass(frozen=True)
class ImportResult:
    records: list[TrajectoryRecord]
    sources: list[SourceSummary]


def detect_format(path: Path) -> ImportFormat:
    if path.is_dir():
        return "tgsuite"
    suffix = path.suffix.lower()
    if suffix in (".eval", ".json"):
        return "inspect"
    if suffix == ".jsonl":
        return "openai"
    raise RecordError(path, "file", "(format)", f"cannot tell the format of a {suffix or 'suffix-less'} file",
                      "pass --format openai|inspect|tgsuite")


def _items(path: Path, fmt: ImportFormat, default_instance_id: str | None,
           score_name: str | None) -> tuple[SourceFormat, Iterator[TrajectoryRecord | RecordError]]:
    if fmt == "tgsuite":
        return "tgsuite_run", iter_run_dir(path)
    if fmt == "inspect":
        return ("inspect_eval" if path.suffix == ".eval" else "inspect_json"), iter_inspect_log(path,
                                                                                             score_name=score_name)
    return "openai_jsonl", iter_openai_jsonl(path, default_instance_id=default_instance_id)


def _skip(skips: dict[str, list[str]], exc: RecordError) -> None:
    reason = exc.problem if isinstance(exc, NoTrajectory) else f"invalid {exc.field}"
    skips.setdefault(reason, []).append(str(exc))


def import_source(path: str | Path, *, fmt: ImportFormat = "auto", skip_invalid: bool = False,
                  default_instance_id: str | None = None, score_name: str | None = None
                  ) -> tuple[list[TrajectoryRecord], SourceSummary]:
    """The records of one source and its summary (see the module docstring)."""
    p = Path(path)
    if not p.exists():
        raise RecordError(p, "path", "(path)", "does not exist", "pass an existing log file or run directory")
    kind = detect_format(p) if fmt == "auto" else fmt
    source_format, items = _items(p, kind, default_instance_id, score_name)
    records: list[TrajectoryRecord] = []
    skips: dict[str, list[str]] = {}
    for item in items:
        if isinstance(item, NoTrajectory) or (isinstance(item, RecordError) and skip_invalid):
            _skip(skips, item)
        elif isinstance(item, RecordError):
            raise item
        else:
            records.append(item)
    sha = sha256_file(p) if p.is_file() else "directory"
    summary = SourceSummary(path=str(p), source_format=source_format, sha256=sha, records=len(records),
                            skipped=[SkipCount(reason=r, count=len(v), examples=v[:5]) for r, v in sorted(skips.items())])
    return records, summary


def import_sources(paths: Sequence[str | Path], **kw: object) -> ImportResult:
    """Every source in order (see :func:`import_source` for the options)."""
    records: list[TrajectoryRecord] = []
    sources: list[SourceSummary] = []
    for p in paths:
        recs, summary = import_source(p, **kw)  # type: ignore[arg-type]
        records += recs
        sources.append(summary)
    return ImportResult(records=records, sources=sources)
