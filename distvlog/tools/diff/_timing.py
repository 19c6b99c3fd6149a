"""Stragglers, from DataParallel's wait times: in a synchronous allreduce every rank waits for the last to
arrive, so a rank that is slower (in compute, or arriving late) waits less than its peers, and what the
peers wait beyond its wait is the time the job loses to it. A note, never an error."""

from __future__ import annotations

import statistics
from collections import defaultdict

from . import _thresholds as T
from ._findings import Straggler
from ._logs import Logs


def _waits(logs: Logs) -> dict[int, dict[int, float]]:
    """step -> rank -> µs it waited in that step's allreduces, for the steps every reducing rank finished."""
    per_step: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    reducing = set()
    for rank, mine in logs.ranks.items():
        for c in mine.collectives:
            if c.wait_us is not None:
                per_step[c.step][rank] += c.wait_us
                reducing.add(rank)
    return {step: dict(waits) for step, waits in per_step.items() if len(waits) == len(reducing) >= 2}


def _step_ms(logs: Logs) -> float | None:
    """The median step time over ranks and steps, from the starts of consecutive steps."""
    times = [
        (mine.step_ts[s + 1] - mine.step_ts[s]) / 1e3
        for mine in logs.ranks.values()
        for s in mine.step_ts
        if s + 1 in mine.step_ts
    ]
    return statistics.median(times) if times else None


def lost_per_step(logs: Logs) -> dict[int, list[float]]:
    """rank -> per step, how much longer (ms) the median other rank waited than it did."""
    lost: dict[int, list[float]] = defaultdict(list)
    for waits in _waits(logs).values():
        for rank, wait in waits.items():
            others = [w for r, w in waits.items() if r != rank]
            lost[rank].append((statistics.median(others) - wait) / 1e3)
    return lost


def stragglers(logs: Logs) -> tuple[list[Straggler], float]:
    """Ranks the others wait for, most of the steps; and the largest median lost fraction of a step seen
    (the statistic the threshold judges)."""
    step_ms = _step_ms(logs)
    if not step_ms:
        return [], 0.0
    waits = _waits(logs)
    found, largest = [], 0.0
    for rank, lost in sorted(lost_per_step(logs).items()):
        typical = statistics.median(lost)
        largest = max(largest, typical / step_ms)
        if typical / step_ms > T.STRAGGLER and typical > T.STRAGGLER_MIN_MS and len(lost) >= T.STRAGGLER_MIN_STEPS:
            mine = [w[rank] / 1e3 for w in waits.values() if rank in w]
            theirs = [x / 1e3 for w in waits.values() for r, x in w.items() if r != rank]
            found.append(
                Straggler(None, rank, typical, statistics.median(mine), statistics.median(theirs), len(lost), step_ms)
            )
    return found, largest
