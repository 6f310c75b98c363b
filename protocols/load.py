"""Load and validate a plan file (TOML) into :class:`protocols.schema.Protocol`.

Errors name the file, the field (dotted path) and the fix; unknown keys are errors, never ignored.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from protocols.schema import Protocol


class ProtocolError(ValueError):
    """A plan or frozen record is malformed, or the data do not match it. The message says how to fix it."""


def _loc(err: Any) -> str:
    return ".".join(str(p) for p in err.get("loc", ())) or "(top level)"


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: {len(exc.errors())} problem(s) in the plan:"]
    for err in exc.errors():
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            msg = "unknown key (typo? the plan schema is strict; see protocols/plans/paper_claims.toml)"
        elif kind == "missing":
            msg = "required key is missing"
        else:
            msg = err.get("msg", "invalid")
        lines.append(f"  - {_loc(err)}: {msg}")
    return "\n".join(lines)


def protocol_from_dict(data: dict[str, Any], *, source: str = "<dict>") -> Protocol:
    try:
        return Protocol.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(format_validation_error(exc, source)) from None


def read_toml(path: str | Path, *, what: str, example: str) -> dict[str, Any]:
    """The TOML table in ``path``; a :class:`ProtocolError` naming the file (missing: ``what`` not found, start
    from ``example``; broken: the syntax error's line)."""
    p = Path(path)
    if not p.is_file():
        raise ProtocolError(f"{p}: {what} not found; pass a TOML file such as {example}")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{p}: not UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start}); fix: save "
                            "the file as UTF-8 (TOML is UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProtocolError(f"{p}: not valid TOML ({exc}); fix the syntax at that line") from None


def load_plan(path: str | Path) -> Protocol:
    """Read a plan TOML file; raise :class:`ProtocolError` naming the file and field on any problem."""
    data = read_toml(path, what="plan file", example="protocols/plans/paper_claims.toml")
    return protocol_from_dict(data, source=str(Path(path)))


def bundled_plans() -> dict[str, Path]:
    """The example plans shipped in ``protocols/plans/`` by stem name."""
    root = Path(__file__).parent / "plans"
    return {p.stem: p for p in sorted(root.glob("*.toml"))}
