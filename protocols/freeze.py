"""Freeze a plan: sha256 of its canonical JSON, UTC time, git commit and dirty flag (STATS §5 'Locking').

The canonical JSON is ``Protocol.model_dump(mode="json")`` serialised with sorted keys, no whitespace and
``ensure_ascii=False``, UTF-8 encoded; comments and key order in the TOML therefore do not change the hash,
while any value change does. The frozen record is a JSON file (``FrozenProtocol``). ``check`` refuses a plan
whose hash differs from its record. A hash alone binds nothing (anyone can recompute it), so a written record is
also committed to git and optionally signed (``protocols.anchor``); the analysis verifies that anchor.
External timestamping (OSF, RFC 3161) is out of scope.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pydantic import ValidationError

from protocols import provenance
from protocols.anchor import anchor_path, anchor_record
from protocols.load import ProtocolError, format_validation_error, load_plan
from protocols.provenance import utc_now
from protocols.schema import FrozenProtocol, GitState, Protocol


def canonical_json(protocol: Protocol) -> str:
    return json.dumps(protocol.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def protocol_hash(protocol: Protocol) -> str:
    return hashlib.sha256(canonical_json(protocol).encode("utf-8")).hexdigest()


def git_state(cwd: str | Path | None = None) -> GitState:
    """Commit and dirty flag of the git checkout at ``cwd`` (``protocols.provenance.git_state``)."""
    commit, dirty = provenance.git_state(cwd)
    return GitState(commit=commit, dirty=dirty)


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def with_task_set(protocol: Protocol, *, name: str, sha256: str) -> Protocol:
    """A copy of ``protocol`` pinned to the task set ``name``/``sha256`` (for pipelines that build the set first)."""
    data = protocol.model_dump(mode="json")
    data["task_set"] = {**data["task_set"], "name": name, "sha256": sha256}
    return Protocol.model_validate(data)


def freeze_plan(
    plan: str | Path | Protocol,
    *,
    out: str | Path | None = None,
    now: str | None = None,
    overwrite: bool = False,
    anchor: bool = True,
    sign_key: str | Path | None = None,
) -> FrozenProtocol:
    """Freeze a plan (path or :class:`Protocol`); write the record to ``out`` if given. Returns the record.

    An existing record with the same hash is returned unchanged (its original ``frozen_at`` stays). A record with
    a *different* hash is refused unless ``overwrite`` (re-freezing a changed plan is a deviation and must be
    visible). With ``out`` and ``anchor`` (the default) the record is committed to git (``protocols.anchor``: the
    ref ``refs/tgsuite/prereg`` of the enclosing repository, or of a new one in the record's folder) and, with
    ``sign_key`` (an Ed25519 PEM private key), signed; the anchor is written next to the record.
    """
    source_path, source_sha = None, None
    if isinstance(plan, Protocol):
        proto = plan
    else:
        proto = load_plan(plan)
        source_path = str(Path(plan))
        source_sha = hashlib.sha256(Path(plan).read_bytes()).hexdigest()
    if not _HEX64.match(proto.task_set.sha256):
        raise ProtocolError(
            f"plan {proto.name}: task_set.sha256 = {proto.task_set.sha256!r} is not a 64-hex sha256; pin the held-out "
            "task set first (its sha256 is printed by `tgsuite tasks validate DIR`) — a plan cannot be frozen unpinned"
        )
    record = FrozenProtocol(
        protocol=proto, sha256=protocol_hash(proto), frozen_at=now or utc_now(),
        git=git_state(Path(source_path).parent if source_path else None), source_path=source_path,
        source_sha256=source_sha, packages=provenance.package_versions(),
    )  # fmt: skip
    if out is not None:
        out = Path(out)
        old = load_frozen(out) if out.exists() else None
        if old is not None and old.sha256 == record.sha256:
            if anchor and not anchor_path(out).is_file():
                anchor_record(out, sign_key=sign_key)
            return old  # same plan: keep the original freeze time (re-freezing never re-stamps)
        if old is not None and not overwrite:
            raise ProtocolError(
                f"{out}: already holds a frozen plan with hash {old.sha256[:12]}…, the plan now hashes to "
                f"{record.sha256[:12]}…; record a deviation (tgsuite protocol deviation) and write the new record "
                "to a new file (--overwrite replaces it, but the prereg ref keeps the earlier record at this path and "
                "`tgsuite analyze` then reports INCONCLUSIVE)"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
        tmp.replace(out)
        if anchor:
            anchor_record(out, sign_key=sign_key)
    return record


def _not_json(p: Path, text: str, exc: json.JSONDecodeError) -> str:
    """Why a frozen record is not JSON: the plan TOML passed by mistake, or a truncated / damaged file."""
    import tomllib

    try:
        tomllib.loads(text)
        is_toml = bool(text.strip())
    except tomllib.TOMLDecodeError:
        is_toml = False
    if is_toml:
        return (f"{p}: this is a plan TOML, not a frozen record; fix: freeze it first (`tgsuite protocol freeze {p} "
                "--out PLAN.frozen.json`) and pass the .frozen.json file")
    return (f"{p}: not a frozen record, the JSON breaks at line {exc.lineno} column {exc.colno} ({exc.msg}; "
            f"{len(text)} characters, truncated?); fix: restore it from git or freeze the plan again")


def load_frozen(path: str | Path) -> FrozenProtocol:
    """Read a frozen record and verify that its plan still hashes to the recorded sha256."""
    p = Path(path)
    if not p.is_file():
        raise ProtocolError(f"{p}: frozen record not found; create it with `tgsuite protocol freeze PLAN.toml --out {p}`")
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(_not_json(p, text, exc)) from None
    try:
        record = FrozenProtocol.model_validate_json(text)
    except ValidationError as exc:
        raise ProtocolError(format_validation_error(exc, str(p))) from None
    actual = protocol_hash(record.protocol)
    if actual != record.sha256:
        raise ProtocolError(
            f"{p}: the plan inside the record hashes to {actual[:12]}…, the record says {record.sha256[:12]}…; the "
            "record was edited after freezing. Restore it from git, or freeze the new plan and record a deviation"
        )
    return record


def check(frozen: str | Path | FrozenProtocol, plan: str | Path | Protocol | None = None) -> FrozenProtocol:
    """Verify a frozen record (and, if given, that ``plan`` still hashes to it). Raises :class:`ProtocolError`."""
    record = frozen if isinstance(frozen, FrozenProtocol) else load_frozen(frozen)
    if plan is not None:
        proto = plan if isinstance(plan, Protocol) else load_plan(plan)
        h = protocol_hash(proto)
        if h != record.sha256:
            raise ProtocolError(
                f"plan {plan if not isinstance(plan, Protocol) else proto.name} hashes to {h[:12]}… but the frozen "
                f"record has {record.sha256[:12]}…: the plan changed after freezing. Revert the plan, or record a "
                "'plan_changed' deviation with `tgsuite protocol deviation`"
            )
    return record
