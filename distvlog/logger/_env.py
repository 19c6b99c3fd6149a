"""distvlog's settings from the environment: a bad value is named once on stderr and replaced by the default.

A debugging tool must never stop a job or a command because of a mistyped variable, so nothing here raises.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Collection
from typing import TypeVar

T = TypeVar("T")
_warned: set[tuple[str, str]] = set()


def warn(name: str, raw: str, reason: str, used: str) -> None:
    """One line on stderr, once per process for each bad value: what was ignored, why, and what is used."""
    if (name, raw) in _warned:
        return
    _warned.add((name, raw))
    try:
        sys.stderr.write(f"distvlog: ignoring {name}={raw!r}: {reason} (using {used})\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass  # no stderr: the default applies all the same


def read(names: str | tuple[str, ...], parse: Callable[[str], T], default: T, show: Callable[[T], str] = repr) -> T:
    """`parse` of the first of `names` that is set and not empty, else `default`. A value `parse` rejects
    (ValueError, its message the reason) is warned about and skipped: the next name, or the default, is used."""
    names = (names,) if isinstance(names, str) else names
    for i, name in enumerate(names):
        raw = os.environ.get(name)
        if raw:
            try:
                return parse(raw)
            except ValueError as exc:
                value = read(names[i + 1 :], parse, default, show)
                warn(name, raw, str(exc), show(value))
                return value
    return default


def integer(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError("not an integer") from None


def count(raw: str) -> int:
    """A non-negative integer (a rank, a world size)."""
    value = integer(raw)
    if value < 0:
        raise ValueError("negative")
    return value


def seconds(raw: str) -> float:
    """A positive, finite number of seconds (0 would make a timer spin, inf would overflow a wait)."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ValueError("not a positive number of seconds")
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def boolean(raw: str) -> bool:
    """A switch, case-insensitive: 1/true/yes/on or 0/false/no/off (`no` must never mean yes)."""
    word = raw.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(f"not one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)}")


def one_of(choices: Collection[str]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"not one of {', '.join(sorted(choices))}")
        return raw

    return parse
