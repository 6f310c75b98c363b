"""Helpers shared by the CLI sub-commands."""

from __future__ import annotations


class CLIError(Exception):
    """A user-facing error: printed as one line naming the cause and the fix; exit code 2."""
