"""The wall clock of every record's timestamp, in µs since the epoch.

`DISTVLOG_SIMULATE_CLOCK_SKEW_US=N` shifts rank r's clock by r × N µs, to show and test clock-offset
correction on one machine: `distvlog.dist` measures its offsets to rank 0 with this same clock, so
`merge` cancels the skew exactly as it would cancel a real one.
"""

from __future__ import annotations

import os
import time

from ._identity import IDENTITY


def _skew_from_env() -> int:
    raw = os.environ.get("DISTVLOG_SIMULATE_CLOCK_SKEW_US") or "0"
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"distvlog: DISTVLOG_SIMULATE_CLOCK_SKEW_US={raw!r} is not an integer") from None


SKEW_PER_RANK_US = _skew_from_env()


def now_us() -> int:
    """This rank's (possibly simulated-skewed) wall clock."""
    return time.time_ns() // 1000 + IDENTITY.rank * SKEW_PER_RANK_US
