"""Deviations from a frozen plan: an append-only JSON log next to the frozen record (STATS §5 'Deviations').

Every recorded deviation is copied into ``AnalysisResult.deviations`` and shown in the report. Recording a
deviation never deletes or edits earlier ones.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from protocols.freeze import utc_now
from protocols.load import ProtocolError, format_validation_error
from protocols.schema import Deviation, DeviationKind, DeviationLog


def default_log_path(frozen_path: str | Path) -> Path:
    """``plan.frozen.json`` → ``plan.frozen.deviations.json`` (same folder)."""
    p = Path(frozen_path)
    return p.with_name(p.name.removesuffix(".json") + ".deviations.json")


def load_deviations(path: str | Path, *, protocol_hash: str) -> list[Deviation]:
    """Deviations recorded for ``protocol_hash`` (an absent file means none)."""
    p = Path(path)
    if not p.exists():
        return []
    try:
        log = DeviationLog.model_validate_json(p.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ProtocolError(format_validation_error(exc, str(p))) from None
    if log.protocol_hash != protocol_hash:
        raise ProtocolError(
            f"{p}: deviation log belongs to plan hash {log.protocol_hash[:12]}…, not {protocol_hash[:12]}…; pass the "
            "log that sits next to this frozen record"
        )
    return list(log.deviations)


def record_deviation(
    path: str | Path,
    *,
    protocol_hash: str,
    kind: DeviationKind,
    description: str,
    justification: str,
    run_id: str | None = None,
    before_outcome_data: bool | None = None,
    time: str | None = None,
) -> Deviation:
    """Append one deviation to the log at ``path`` (created if absent) and return it."""
    dev = Deviation(
        kind=kind, description=description, justification=justification, time=time or utc_now(),
        protocol_hash=protocol_hash, run_id=run_id, before_outcome_data=before_outcome_data,
    )  # fmt: skip
    old = load_deviations(path, protocol_hash=protocol_hash)
    log = DeviationLog(protocol_hash=protocol_hash, deviations=[*old, dev])
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(log.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(p)
    return dev


def covers(deviations: list[Deviation], kind: DeviationKind, run_id: str | None = None) -> bool:
    """Whether a deviation of ``kind`` (for ``run_id`` when given; a run-less one covers all runs) is recorded."""
    return any(d.kind == kind and (run_id is None or d.run_id in (None, run_id)) for d in deviations)
