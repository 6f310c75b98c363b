"""Helpers shared by the CLI sub-commands."""

from __future__ import annotations

from pathlib import Path


class CLIError(Exception):
    """A user-facing error: printed as one line naming the cause and the fix; exit code 2."""


def anchor_line(record: str | Path) -> str:
    """The line `protocol freeze` and `canary --freeze` print about a record's git anchor (and its signature)."""
    from protocols.anchor import read_anchor

    anchor = read_anchor(record)
    return (f"anchored: commit {anchor.commit[:12]} on {anchor.ref} in {anchor.repo}"
            + (f"; signed (public key {anchor.public_key})" if anchor.signature else ""))  # fmt: skip
