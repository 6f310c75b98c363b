"""Load, freeze and check canary plans (:class:`protocols.canary_schema.CanaryPlan`) the way offline plans are frozen.

The hash is the same canonical-JSON sha256 as ``protocols.freeze`` (``protocol_hash``: ``model_dump(mode="json")``,
sorted keys, no whitespace, UTF-8), so comments and key order in the TOML do not change it and any value does. The
record also carries the UTC time and the git state (``protocols.freeze.git_state``). A canary is analysed only
against a frozen record whose ``frozen_at`` is not later than the first logged episode (``check_before``), so the
metrics, margins and alphas cannot be chosen after seeing online data. ``frozen_at`` is outside the hash, so a
written record is also anchored like an offline one (``protocols.anchor.anchor_record``: its exact bytes committed
to ``refs/tgsuite/prereg``, optionally signed); ``tgsuite canary`` verifies that anchor (``verify_anchor``) before
it lets the canary PROMOTE.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from protocols.anchor import anchor_path, anchor_record
from protocols.canary_schema import CanaryPlan, FrozenCanaryPlan
from protocols.freeze import git_state, protocol_hash, utc_now
from protocols.load import ProtocolError, format_validation_error, read_toml


def _format(exc: ValidationError, source: str) -> str:
    return format_validation_error(exc, source).replace("protocols/plans/paper_claims.toml", "protocols/plans/canary/gray_release.toml")


def canary_plan_from_dict(data: dict[str, Any], *, source: str = "<dict>") -> CanaryPlan:
    try:
        return CanaryPlan.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(_format(exc, source)) from None


def load_canary_plan(path: str | Path) -> CanaryPlan:
    """Read a canary plan TOML; raise :class:`ProtocolError` naming the file and field on any problem."""
    data = read_toml(path, what="canary plan", example="protocols/plans/canary/gray_release.toml")
    return canary_plan_from_dict(data, source=str(Path(path)))


def canary_plan_hash(plan: CanaryPlan) -> str:
    """sha256 of the plan's canonical JSON (the same canonical form as ``protocols.freeze.protocol_hash``)."""
    return protocol_hash(plan)  # type: ignore[arg-type]  # any pydantic model has the same canonical form


def freeze_canary_plan(plan: str | Path | CanaryPlan, *, out: str | Path | None = None, now: str | None = None,
                       overwrite: bool = False, anchor: bool = True,
                       sign_key: str | Path | None = None) -> FrozenCanaryPlan:  # fmt: skip
    """Freeze a canary plan; write the record to ``out`` if given. Same rules as ``protocols.freeze.freeze_plan``:
    an existing record with the same hash is returned unchanged (its ``frozen_at`` stays; a missing anchor is
    written), a different one is refused unless ``overwrite``. With ``out`` and ``anchor`` (the default) the record
    is committed to git and, with ``sign_key`` (an Ed25519 PEM private key), signed (``protocols.anchor``)."""
    source_path, source_sha = None, None
    if isinstance(plan, CanaryPlan):
        obj = plan
    else:
        obj = load_canary_plan(plan)
        source_path = str(Path(plan))
        source_sha = hashlib.sha256(Path(plan).read_bytes()).hexdigest()
    record = FrozenCanaryPlan(plan=obj, sha256=canary_plan_hash(obj), frozen_at=now or utc_now(),
                              git=git_state(Path(source_path).parent if source_path else None),
                              source_path=source_path, source_sha256=source_sha)  # fmt: skip
    if out is None:
        return record
    out = Path(out)
    old = load_frozen_canary(out) if out.exists() else None
    if old is not None and old.sha256 == record.sha256:
        if anchor and not anchor_path(out).is_file():
            anchor_record(out, sign_key=sign_key)
        return old  # same plan: keep the original freeze time (re-freezing never re-stamps)
    if old is not None and not overwrite:
        raise ProtocolError(f"{out}: already holds a frozen canary plan with hash {old.sha256[:12]}…, the plan now "
                            f"hashes to {record.sha256[:12]}…; write the new record to a new file (a changed plan "
                            "starts a new canary; --overwrite replaces it, but the prereg ref keeps the earlier "
                            "record at this path and `tgsuite canary` then cannot PROMOTE under the new one)")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    if anchor:
        anchor_record(out, sign_key=sign_key)
    return record


def load_frozen_canary(path: str | Path) -> FrozenCanaryPlan:
    """Read a frozen canary record and verify that its plan still hashes to the recorded sha256."""
    p = Path(path)
    if not p.is_file():
        raise ProtocolError(f"{p}: frozen canary record not found; create it with "
                            f"`tgsuite canary --freeze PLAN.toml --out {p}`")  # fmt: skip
    try:
        record = FrozenCanaryPlan.model_validate_json(p.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ProtocolError(_format(exc, str(p))) from None
    actual = canary_plan_hash(record.plan)
    if actual != record.sha256:
        raise ProtocolError(f"{p}: the plan inside the record hashes to {actual[:12]}…, the record says "
                            f"{record.sha256[:12]}…; the record was edited after freezing. Restore it from git")  # fmt: skip
    return record


def parse_utc(text: str) -> datetime:
    """ISO 8601 with an explicit offset (``Z`` or ``+00:00``) -> aware UTC datetime; naive times are refused."""
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; write it in UTC with a trailing Z, e.g. 2026-12-01T10:00:00Z")
    return t.astimezone(UTC)


def check_before(record: FrozenCanaryPlan, first_episode: datetime, *, source: str) -> None:
    """Refuse data that started before the plan was frozen (the plan must be fixed before the first look)."""
    frozen = parse_utc(record.frozen_at)
    if first_episode < frozen:
        raise ProtocolError(f"{source}: the first episode is at {first_episode:%Y-%m-%dT%H:%M:%SZ} but the plan "
                            f"{record.plan.name} was frozen at {record.frozen_at}; a canary plan must be frozen before "
                            "its first episode — freeze it before routing traffic, and start a new canary")  # fmt: skip
