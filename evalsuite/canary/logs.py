"""Read the episodes log (and the optional assignments log): JSON Lines, one validated row per line.

Every problem is an error that names the file, the line, the field and the fix; no row is dropped or repaired:
malformed JSON, a field given twice on one line, a missing or unknown field, a wrong type (strict: ``true``, not
``1``), a naive timestamp, a duplicate ``episode_id``, a unit logged in both arms (assignment must be sticky), an episode of a unit that the
assignments log does not know, an episode before its unit's assignment, or (given the plan's model names) a
``served_model`` that is neither the plan's control nor its canary model: the crossover gate could not tell what such
an episode was served, and counting it as crossover would roll back a canary for a logging mismatch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from evalsuite.canary.schema import CanaryAssignment, CanaryEpisode
from evalsuite.rates import StatsInputError

M = TypeVar("M", bound=BaseModel)

_FIX = {
    "missing": "add the field",
    "extra_forbidden": "remove it (unknown field; see evalsuite/canary/schema.py CanaryEpisode for the columns)",
    "bool_type": "write JSON true or false",
    "int_type": "write a JSON integer",
    "timezone_aware": "write the time in UTC with a trailing Z, e.g. 2026-12-01T10:00:00Z",
    "value_error": "fix the value as it says",
    "literal_error": "use one of the allowed values",
}


class CanaryDataError(StatsInputError):
    """A log row that cannot be analysed; the message names the file, the line, the field and the fix."""


def _message(exc: ValidationError, where: str) -> str:
    e = exc.errors()[0]
    field = ".".join(str(x) for x in e["loc"]) or "(row)"
    fix = _FIX.get(e["type"], "fix the value")
    more = f" (and {len(exc.errors()) - 1} more problem(s) on this line)" if len(exc.errors()) > 1 else ""
    return f"{where}: field {field}: {e['msg']}; {fix}{more}"


class _RepeatedKey(ValueError):
    pass


def _no_repeated_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for k, v in pairs:
        if k in seen:
            raise _RepeatedKey(k)
        seen[k] = v
    return seen


def _rows(path: Path, model: type[M]) -> Iterator[tuple[int, M]]:
    if not path.is_file():
        raise CanaryDataError(f"{path}: file not found; pass the JSON Lines log (one object per line)")
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                json.loads(line, object_pairs_hook=_no_repeated_keys)
            except json.JSONDecodeError as exc:
                raise CanaryDataError(f"{path}:{i}: not valid JSON ({exc.msg} at column {exc.colno}); one JSON "
                                      "object per line") from None  # fmt: skip
            except _RepeatedKey as exc:
                raise CanaryDataError(f"{path}:{i}: field {exc.args[0]}: given twice on this line (a JSON parser "
                                      "keeps only the last value); keep one") from None  # fmt: skip
            try:
                yield i, model.model_validate_json(line)
            except ValidationError as exc:
                raise CanaryDataError(_message(exc, f"{path}:{i}")) from None


def read_assignments(path: str | Path) -> tuple[CanaryAssignment, ...]:
    """The assignments log: one row per unit (a second row for the same unit is an error)."""
    p = Path(path)
    seen: dict[str, int] = {}
    out: list[CanaryAssignment] = []
    for i, row in _rows(p, CanaryAssignment):
        if row.unit_id in seen:
            raise CanaryDataError(f"{p}:{i}: field unit_id: unit {row.unit_id!r} already assigned at line "
                                  f"{seen[row.unit_id]}; keep one assignment row per unit")  # fmt: skip
        seen[row.unit_id] = i
        out.append(row)
    if not out:
        raise CanaryDataError(f"{p}: no assignment rows; the file is empty")
    _check_pre_period(out, list(seen.values()), p)
    return tuple(out)


def _check_pre_period(rows: list[CanaryAssignment], lines: list[int], p: Path) -> None:
    """Pre-period metrics on every row or on none: a unit without them cannot be silently left out of the balance
    check."""
    has = [r.pre_period is not None for r in rows]
    if any(has) and not all(has):
        i = lines[has.index(not has[0])]
        raise CanaryDataError(f"{p}:{i}: field pre_period: present on some rows and absent on others (first "
                              f"{'absent' if has[0] else 'present'} here); give every unit its pre-period "
                              "metrics (0 episodes for a new unit) or drop the field everywhere")  # fmt: skip


def read_episodes(path: str | Path, *, assignments: tuple[CanaryAssignment, ...] | None = None,
                  assignments_path: str | Path | None = None,
                  models: dict[str, str] | None = None) -> tuple[CanaryEpisode, ...]:  # fmt: skip
    """The episodes log, checked row by row and against the assignments (if given). ``models``: the plan's model
    names by arm (``{"control": plan.control_model, "canary": plan.canary_model}``); when given, a non-null
    ``served_model`` must be one of them."""
    p = Path(path)
    by_unit = {a.unit_id: a for a in assignments or ()}
    ids: dict[str, int] = {}
    arm_of: dict[str, tuple[str, int]] = {}
    out: list[CanaryEpisode] = []
    for i, row in _rows(p, CanaryEpisode):
        where = f"{p}:{i}"
        if row.episode_id in ids:
            raise CanaryDataError(f"{where}: field episode_id: {row.episode_id!r} repeats line {ids[row.episode_id]}; "
                                  "each episode is logged once (deduplicate the export)")  # fmt: skip
        ids[row.episode_id] = i
        first = arm_of.setdefault(row.unit_id, (row.arm, i))
        if first[0] != row.arm:
            raise CanaryDataError(f"{where}: field arm: unit {row.unit_id!r} is {row.arm!r} here but {first[0]!r} at "
                                  f"line {first[1]}; assignment must be sticky per unit — fix the assignment "
                                  "logging (log the ASSIGNED arm, not the served model)")  # fmt: skip
        if models is not None and row.served_model is not None and row.served_model not in models.values():
            raise CanaryDataError(f"{where}: field served_model: {row.served_model!r} is neither the plan's "
                                  f"control_model {models['control']!r} nor its canary_model {models['canary']!r}; "
                                  "log the model under the plan's names (the crossover gate compares them), or null "
                                  "when unknown")  # fmt: skip
        if assignments is not None:
            _check_against(row, by_unit, where, assignments_path)
        out.append(row)
    if not out:
        raise CanaryDataError(f"{p}: no episode rows; the file is empty")
    return tuple(out)


def _check_against(row: CanaryEpisode, by_unit: dict[str, CanaryAssignment], where: str,
                   source: str | Path | None) -> None:  # fmt: skip
    a = by_unit.get(row.unit_id)
    if a is None:
        raise CanaryDataError(f"{where}: field unit_id: unit {row.unit_id!r} is not in the assignments log {source}; "
                              "every unit needs an assignment row (or drop --assignments)")  # fmt: skip
    if a.arm != row.arm:
        raise CanaryDataError(f"{where}: field arm: {row.arm!r} but the assignments log {source} assigns unit "
                              f"{row.unit_id!r} to {a.arm!r}; log the assigned arm")  # fmt: skip
    if row.ts < a.assign_ts:
        raise CanaryDataError(f"{where}: field ts: {row.ts.isoformat()} is before unit {row.unit_id!r}'s assignment "
                              f"at {a.assign_ts.isoformat()}; check the clocks of both logs")  # fmt: skip
