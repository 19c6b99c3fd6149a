"""Per-rank series by step, for the plots: what `diff` read (step starts, allreduce waits, local gradient
norms of buckets and guarded nodes) and the loss (a `loss=` field of any record with a `step`)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ... import format as fmt
from ..diff import Logs
from ..read import open_sources, read_records

_LOSS = fmt.field_pattern(fmt.LOSS)
Series = dict[int, dict[int, float]]  # rank -> step -> value


@dataclass
class Panel:
    title: str
    unit: str
    series: Series
    log_y: bool = False


@dataclass
class Panels:
    panels: list[Panel] = field(default_factory=list)

    def add(self, title: str, unit: str, series: Series, log_y: bool = False) -> None:
        if any(series.values()):
            self.panels.append(Panel(title, unit, series, log_y))


def step_times(logs: Logs) -> Series:
    """ms from the start of a step to the start of the next, per rank."""
    out: Series = {}
    for rank, mine in logs.ranks.items():
        starts = mine.step_ts
        out[rank] = {s: (starts[s + 1] - starts[s]) / 1e3 for s in starts if s + 1 in starts}
    return out


def waits(logs: Logs) -> Series:
    """ms a rank waited for its allreduces' results, per step."""
    out: Series = {}
    for rank, mine in logs.ranks.items():
        per: dict[int, float] = defaultdict(float)
        for c in mine.collectives:
            if c.wait_us is not None:
                per[c.step] += c.wait_us / 1e3
        out[rank] = dict(per)
    return out


def bucket_norms(logs: Logs) -> dict[int, Series]:
    """bucket -> the local gradient norm going into its allreduce, per rank and step."""
    out: dict[int, Series] = defaultdict(lambda: defaultdict(dict))
    for rank, mine in logs.ranks.items():
        for c in mine.collectives:
            out[c.bucket][rank].setdefault(c.step, c.norm)
    return out


def node_norms(logs: Logs) -> dict[str, Series]:
    """`linearGradNode grad_weight` (op without its counter, and slot) -> its first norm per rank and step;
    NaN where the gradient held NaN or Inf (a gap in the plot)."""
    out: dict[str, Series] = defaultdict(lambda: defaultdict(dict))
    for rank, mine in logs.ranks.items():
        for s in mine.stats:
            out[f"{s.op} {s.slot}"][rank].setdefault(s.step, s.norm if s.finite else math.nan)
    return out


def losses(paths: list[str]) -> Series:
    """The `loss` field of records that have a `step`, per rank (the last one of a step)."""
    out: Series = defaultdict(dict)
    for rec in read_records(open_sources(paths), where=_LOSS):
        loss, step = rec.fields.get(fmt.LOSS), rec.fields.get("step")
        if isinstance(loss, (int, float)) and isinstance(step, int) and not isinstance(loss, bool):
            out[rec.rank][step] = float(loss)
    return out


def panels(logs: Logs, paths: list[str]) -> list[Panel]:
    """The panels worth drawing, in the order a reader wants them: time, loss, gradients."""
    found = Panels()
    found.add("step time", "ms", step_times(logs))
    found.add("allreduce wait", "ms", waits(logs))
    found.add("loss", "", losses(paths))
    for bucket, series in sorted(bucket_norms(logs).items()):
        found.add(f"local gradient norm, bucket {bucket}", "", series, log_y=True)
    for name, series in sorted(node_norms(logs).items()):
        found.add(f"gradient norm, {name}", "", series, log_y=True)
    return found.panels
