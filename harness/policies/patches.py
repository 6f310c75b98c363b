"""Unified diffs as hunks: ``parse_patch`` (used by ``OraclePolicy`` to apply a gold patch through the tools)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _Hunk:
    path: str
    old: str
    new: str


def parse_patch(patch: str) -> list[_Hunk]:
    """Hunks of a unified diff as (path, old text, new text); a created file has ``old == ""``.

    Hunk bodies are consumed by the line counts of their ``@@ -a,b +c,d @@`` headers, so removed lines that
    start with ``--`` are not mistaken for file headers.
    """
    hunks: list[_Hunk] = []
    path, created = "", False
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("--- "):
            created = line.strip() == "--- /dev/null"
        elif line.startswith("+++ "):
            path = line[4:].strip().split("\t")[0].removeprefix("b/")
        elif line.startswith("@@"):
            m = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", line)
            if m is None:
                raise ValueError(f"malformed hunk header: {line.strip()!r}")
            n_old = int(m.group(1) if m.group(1) is not None else 1)
            n_new = int(m.group(2) if m.group(2) is not None else 1)
            old: list[str] = []
            new: list[str] = []
            while (len(old) < n_old or len(new) < n_new) and i < len(lines):
                body = lines[i]
                i += 1
                if body.startswith("\\"):
                    continue
                if body[:1] in (" ", "-"):
                    old.append(body[1:])
                if body[:1] in (" ", "+"):
                    new.append(body[1:])
            hunks.append(_Hunk(path, "" if created else "".join(old), "".join(new)))
    return hunks
