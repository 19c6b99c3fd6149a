"""Per-rank series by step, for the plots: what `diff` read (step starts, allreduce waits, local gradient
norms of buckets and guarded nodes) and the loss (a `loss=` field of any record with a `step`)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ... import format as fmt
from ..diff import Logs, Report
from ..read import open_sources, read_records

_LOSS = fmt.field_pattern(fmt.LOSS)
Series = dict[int, dict[int, float]]  # rank -> step -> value


@dataclass
class Panel:
    title: str
    unit: str
    series: Series
    log_y: bool = False
    op: str | None = None  # a guarded node's panel: its op (the node's name without its counter) and slot
    slot: str | None = None


@dataclass
class Panels:
    panels: list[Panel] = field(default_factory=list)

    def add(self, title: str, unit: str, series: Series, log_y: bool = False, **node: str) -> None:
        if any(series.values()):
            self.panels.append(Panel(title, unit, series, log_y, **node))


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


def node_norms(logs: Logs) -> dict[tuple[str, str], Series]:
    """(op without its counter, slot) -> its first norm per rank and step; NaN where the gradient held NaN or
    Inf."""
    out: dict[tuple[str, str], Series] = defaultdict(lambda: defaultdict(dict))
    for rank, mine in logs.ranks.items():
        for s in mine.stats:
            out[s.op, s.slot][rank].setdefault(s.step, s.norm if s.finite else math.nan)
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
    for (op, slot), series in sorted(node_norms(logs).items()):
        found.add(f"gradient norm, {op} {slot}", "", series, log_y=True, op=op, slot=slot)
    return found.panels


def culprit_first(drawn: list[Panel], report: Report, logs: Logs) -> list[Panel]:
    """The plots of the node the first error names (a NaN's origin, an explosion's start) first: its slot's,
    then the node's other slots; the rest as they were."""
    first = report.errors[0] if report.errors else None
    node, rank = getattr(first, "node", None), getattr(first, "rank", None)
    mine = logs.ranks.get(rank) if isinstance(rank, int) else None
    op = next((s.op for s in mine.stats if s.node == node), None) if mine is not None and node else None
    if op is None:
        return drawn
    slot = getattr(first, "slot", None)
    return sorted(drawn, key=lambda p: 0 if (p.op, p.slot) == (op, slot) else 1 if p.op == op else 2)
