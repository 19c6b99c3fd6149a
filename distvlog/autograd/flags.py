"""Paddle's runtime flags, the one distvlog acts on and the others it names.

`FLAGS_call_stack_level` (Paddle's; ours is `DISTVLOG_CALL_STACK_LEVEL`, which wins when both are set):
at 3, every GradNode records the whole forward Python stack that created it, and an error in backward
prints it as Paddle does ("Forward Traceback (most recent call last): ..."), so the line that made the
failing node — `var_c = var_b**2` for a tensor changed in place after `var_c` used it — is in the message.
Below 3 a node keeps its one forward line, which every error names anyway; recording a stack per node
costs time in every forward op, so it is only done when asked. Read from the environment at import and
changed with `set_flags({"FLAGS_call_stack_level": 3})`, for the whole process.

Other Paddle flags (`FLAGS_cudnn_deterministic`, ...) have nothing to act on here: `set_flags` accepts
them with one warning per flag naming it, so a script written for Paddle runs, and nobody believes a flag
did something it did not.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..logger import get_logger

_log = get_logger("distvlog.autograd.flags")
_ENV = ("DISTVLOG_CALL_STACK_LEVEL", "FLAGS_call_stack_level")
_ignored: dict[str, Any] = {}  # Paddle flags set that mean nothing here (what get_flags gives back)


def _level(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what} must be an int, got {value!r}") from None


def _from_environment() -> int:
    for name in _ENV:
        raw = os.environ.get(name)
        if raw:
            try:
                return _level(raw.strip(), name)
            except ValueError:
                _log.warning(f"ignoring {name}={raw!r}: not an integer (using the next setting, or 1)")
    return 1


CALL_STACK_LEVEL = _from_environment()


def set_flags(flags: Mapping[str, Any]) -> None:
    """Paddle's `paddle.set_flags`: `{"FLAGS_call_stack_level": 3}` records forward stacks from now on."""
    global CALL_STACK_LEVEL
    if not isinstance(flags, Mapping):
        raise TypeError(f"set_flags takes a dict of flags, got {type(flags).__name__}")
    for name, value in flags.items():
        if name == "FLAGS_call_stack_level":
            CALL_STACK_LEVEL = _level(value, name)
        elif isinstance(name, str) and name.startswith("FLAGS_"):
            if name not in _ignored:
                _log.warning(f"set_flags: {name} is a Paddle flag distvlog has nothing to act on; it is ignored")
            _ignored[name] = value
        else:
            raise ValueError(f"set_flags: {name!r} is not a flag (Paddle's flags are named FLAGS_...)")


def get_flags(flags: str | Iterable[str]) -> dict[str, Any]:
    """Paddle's `paddle.get_flags`: the values of the named flags (ignored ones as they were set)."""
    names = [flags] if isinstance(flags, str) else list(flags)
    out = {}
    for name in names:
        if name == "FLAGS_call_stack_level":
            out[name] = CALL_STACK_LEVEL
        elif name in _ignored:
            out[name] = _ignored[name]
        else:
            raise ValueError(f"get_flags: {name!r} is not a flag distvlog knows or was given")
    return out
