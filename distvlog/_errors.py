"""Errors that are the user's to fix: the CLI prints their one-line message and exits 2, no traceback."""


class InputError(Exception):
    """Unusable input (a file, rank, node or argument); the message names it in one line."""
