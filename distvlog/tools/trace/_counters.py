"""Counter tracks for `trace`: per rank, the step time, each allreduce's wait and each bucket's local
gradient norm, from DataParallel's records, so the curves of `distvlog report` show in Perfetto too."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ... import format as fmt
from ..read import Record

WANTED = fmt.messages_pattern(fmt.PARAMETERS)  # (allreduces: the slices want them too)


class CounterBuilder:
    """Feed records (each rank's in time order), then `events()` for the trace's counter events."""

    def __init__(self) -> None:
        self._starts: dict[int, dict[int, int]] = defaultdict(dict)  # rank -> step -> when it started
        self._events: list[dict[str, Any]] = []

    def add(self, rec: Record) -> None:
        first = rec.event.partition("\n")[0]
        f = rec.fields
        if first == fmt.PARAMETERS and isinstance(f.get("step"), int) and f.get("final") is not True:
            self._starts[rec.rank].setdefault(f["step"], rec.ts)
        elif first == fmt.ALLREDUCE_END and isinstance(f.get("wait_us"), int):
            self._counter(rec.rank, rec.ts, "allreduce wait (ms)", f"bucket {f.get('bucket')}", f["wait_us"] / 1e3)
        elif first == fmt.ALLREDUCE_BEGIN and isinstance(f.get("norm"), (int, float)) and math.isfinite(f["norm"]):
            self._counter(rec.rank, rec.ts, "local gradient norm", f"bucket {f.get('bucket')}", float(f["norm"]))

    def _counter(self, rank: int, ts: int, name: str, series: str, value: float) -> None:
        self._events.append({"ph": "C", "name": name, "pid": rank, "tid": 0, "ts": ts, "args": {series: value}})

    def events(self) -> list[dict[str, Any]]:
        """The counter events: a step's time is shown from its start until the next step starts."""
        for rank, starts in self._starts.items():
            for step, ts in sorted(starts.items()):
                if step + 1 in starts:
                    self._counter(rank, ts, "step time (ms)", "step", (starts[step + 1] - ts) / 1e3)
        return self._events
