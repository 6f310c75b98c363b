"""Read a file of JSON records the way SWE-bench's tools write them: JSON Lines, or one JSON list.

One reader for ``tgsuite grade`` (predictions) and ``tgsuite tasks import-swebench`` (task records): every error is
a ``ValueError`` naming the file and the line (or list index), the problem and the fix; callers may re-raise it as
their own error type.
"""

from __future__ import annotations

import json
from pathlib import Path


def decode_utf8(path: Path, data: bytes, what: str) -> str:
    """``data`` as UTF-8 text; a byte that is not names the line, the byte and its offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start}); fix: save "
                         f"the {what} as UTF-8 (JSON text is UTF-8)") from None


def json_list_or_lines(path: Path, text: str, what: str) -> list[tuple[str, object]]:
    """(where, value) pairs: ``path[i]`` for the items of one JSON list, ``path:N`` for the lines of JSON Lines."""
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON list ({exc}); fix: one {what} (a JSON object) per line") from None
        return [(f"{path}[{i}]", obj) for i, obj in enumerate(items)]
    out: list[tuple[str, object]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((f"{path}:{n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc.msg} at column {exc.colno}); fix: one {what} (a JSON "
                                 "object) per line") from None
    return out


__all__ = ["decode_utf8", "json_list_or_lines"]
