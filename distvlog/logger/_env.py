"""distvlog's settings from the environment: a bad value is named once on stderr and replaced by the default.

A debugging tool must never stop a job or a command because of a mistyped variable, so nothing here raises.
Every process of a job reads the same environment, so one process says what is wrong with it: the launcher
that started the job (it sets SETTINGS_SAID for its ranks), else rank 0.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Collection
from typing import TypeVar

T = TypeVar("T")
_warned: set[tuple[str, str]] = set()

# (rank variable, world-size variable) per launcher, in the order they are trusted.
LAUNCHER_VARS = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
    ("PMI_RANK", "PMI_SIZE"),  # MPICH / Hydra, Intel MPI
    ("PMIX_RANK", "PMIX_SIZE"),  # PMIx launchers
    ("RANK", "WORLD_SIZE"),  # torchrun
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
)
SETTINGS_SAID = "DISTVLOG_SETTINGS_SAID"  # set by `distvlog launch`: it has named the bad settings of the job


def _speaks_for_the_job() -> bool:
    """Whether this process names the job's bad settings: not a rank of `distvlog launch` (the launcher has),
    not a rank other than 0 (rank 0 has); a rank variable that is no number leaves every rank speaking."""
    if os.environ.get(SETTINGS_SAID):
        return False
    raw = next((os.environ[var] for var, _ in LAUNCHER_VARS if os.environ.get(var)), "0").strip()
    return not raw.isdigit() or int(raw) == 0


def warn(name: str, raw: str, reason: str, used: str, *, own: bool = False) -> None:
    """One line on stderr, once per process for each bad value: what was ignored, why, and what is used.
    Said by one process of the job, unless the value is this process's `own` (a rank's own rank variable)."""
    if (name, raw) in _warned or not (own or _speaks_for_the_job()):
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
