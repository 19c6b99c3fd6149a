"""Errors that are the user's to fix: the CLI prints their one-line message and exits 2, no traceback."""

from __future__ import annotations

from typing import Any


class InputError(Exception):
    """Unusable input (a file, rank, node or argument); the message names it in one line."""


def refuse_unsupported(api: str, **given: Any) -> None:
    """Paddle arguments accepted for the signature but not implemented: an error naming the first one that is
    not at its default, never silently ignored (it would train a different model). The caller passes None or
    False for an argument at its default, else the value to name (0 is a value: `axis=0`)."""
    for arg, value in given.items():
        if value is not None and value is not False:
            raise NotImplementedError(f"{api}: {arg}={value!r} is not supported by distvlog")
