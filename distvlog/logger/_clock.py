"""The wall clock of every record's timestamp, in µs since the epoch.

`DISTVLOG_SIMULATE_CLOCK_SKEW_US=N` shifts rank r's clock by r × N µs, to show and test clock-offset
correction on one machine: `distvlog.distributed` measures its offsets to rank 0 with this same clock, so
`merge` cancels the skew exactly as it would cancel a real one.
"""

from __future__ import annotations

import time

from . import _env
from ._identity import IDENTITY

SKEW_PER_RANK_US = _env.read("DISTVLOG_SIMULATE_CLOCK_SKEW_US", _env.integer, 0)


def now_us() -> int:
    """This rank's (possibly simulated-skewed) wall clock."""
    return time.time_ns() // 1000 + IDENTITY.rank * SKEW_PER_RANK_US
