"""`distvlog trace PATH... -o trace.json`: the run as Chrome trace-event JSON, for Perfetto or chrome://tracing.

One process per rank ("rank R (host)"), one track per thread; a slice per GradNode run, backward pass and
allreduce bucket, an instant per warning and error; `args` carry node, step and gradient statistics.
Counter tracks per rank (from DataParallel's records): step time, allreduce wait, local gradient norm.
Slices on one track never overlap partially (Perfetto rejects that): a slice that would is moved to an
extra track of the same thread. `--max-events` keeps huge runs loadable and says what it dropped; `--ranks`
and `--steps` cut a window out of them.

The trace is written an input file at a time (a rank file holds one rank's records: its slices are built,
laid out on tracks and written, then let go), so memory holds one file's slices, not the run's.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

from ... import format as fmt
from ...errors import InputError
from ...wording import plural
from ..output import output, write_all
from ..read import (
    Source,
    add_input_arguments,
    after_reading,
    open_inputs,
    parse_int_list,
    read_records,
    say_runs_read,
    warner,
)
from . import _counters
from ._slices import KINDS, WANTED, Slice, SliceBuilder

_WANTED = re.compile(WANTED.pattern + b"|" + _counters.WANTED.pattern, WANTED.flags | _counters.WANTED.flags)
LANE_TID_BASE = 1 << 40  # tids of the extra tracks (real thread ids are smaller)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trace", help="write a Chrome trace (Perfetto) of the run", description=__doc__.split("\n\n")[0]
    )
    add_input_arguments(parser)
    parser.add_argument("-o", "--output", metavar="OUT", required=True, help="the trace JSON file to write")
    parser.add_argument(
        "--max-events",
        metavar="N",
        type=int,
        default=1_000_000,
        help="keep at most N events, shared out among the input files, errors and passes first in each "
        "(default 1,000,000; 0: all)",
    )
    parser.add_argument("--ranks", metavar="LIST", help="only these ranks' processes, e.g. 0-7,64 (cuts a big run)")
    parser.add_argument(
        "--steps",
        metavar="LIST",
        help="only these steps, e.g. 2-3: slices of those steps, and those without a step in their time span",
    )
    parser.set_defaults(run=run)


def limit(slices: list[Slice], max_events: int) -> tuple[list[Slice], Counter]:
    """At most max_events: errors, then passes, allreduces, warnings, node runs, stray statistics;
    the earliest of each kind first."""
    if not max_events or len(slices) <= max_events:
        return slices, Counter()
    ranked = sorted(slices, key=lambda s: (KINDS.index(s.kind), s.start))
    return ranked[:max_events], Counter(s.kind for s in ranked[max_events:])


def lanes(slices: list[Slice]) -> dict[int, int]:
    """Lane per slice (id -> lane) so that slices in one lane of a thread nest or follow each other."""
    out: dict[int, int] = {}
    tracks: dict[tuple, list[list[int]]] = {}
    for s in sorted((s for s in slices if s.end is not None), key=lambda s: (s.start, -s.end)):
        stacks = tracks.setdefault((s.rank, s.tid), [])
        for lane, stack in enumerate(stacks + [[]]):
            while stack and stack[-1] <= s.start:
                stack.pop()
            if not stack or s.end <= stack[-1]:
                if lane == len(stacks):
                    stacks.append(stack)
                stack.append(s.end)
                out[id(s)] = lane
                break
    return out


def trace_events(slices: list[Slice], hosts: dict[int, str]) -> list[dict]:
    lane_of = lanes(slices)
    tids: dict[tuple, int] = {}
    events: list[dict] = []
    for s in slices:
        lane = lane_of.get(id(s), 0)
        key = (s.rank, s.tid, lane)
        if key not in tids:
            real = s.tid if isinstance(s.tid, int) and not lane else None
            tids[key] = real if real is not None else LANE_TID_BASE + len(tids)
            name = f"thread {s.tid}" + (f" ({lane + 1})" if lane else "")
            events.append({"ph": "M", "name": "thread_name", "pid": s.rank, "tid": tids[key], "args": {"name": name}})
            events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": s.rank,
                    "tid": tids[key],
                    "args": {"sort_index": len(tids)},
                }
            )
        event = {"name": s.name, "cat": s.kind, "ts": s.start, "pid": s.rank, "tid": tids[key], "args": s.args}
        if s.end is None:
            event.update(ph="i", s="t")
        else:
            event.update(ph="X", dur=s.end - s.start)
        events.append(event)
    for rank in sorted({s.rank for s in slices} | set(hosts)):
        label = f"rank {rank}" + (f" ({hosts[rank]})" if hosts.get(rank) else "")
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": label}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
    return events


def in_steps(slices: list[Slice], steps: set[int]) -> list[Slice]:
    """The slices of these steps, and the slices without a step that overlap their time span."""
    chosen = [s for s in slices if s.args.get("step") in steps]
    if not chosen:
        return []
    first, last = min(s.start for s in chosen), max(s.end or s.start for s in chosen)
    return [
        s
        for s in slices
        if s.args.get("step") in steps or ("step" not in s.args and s.start <= last and (s.end or s.start) >= first)
    ]


def _file_slices(
    source: Source, ranks: set[int] | None, steps: set[int] | None, max_events: int
) -> tuple[list[Slice], Counter, list[dict]]:
    """One input file's slices (at most max_events, of those ranks and steps; None: all), what was
    dropped over max_events, and its counter events (step time, allreduce wait, bucket norms)."""
    builder, counters = SliceBuilder(), _counters.CounterBuilder()
    for record in read_records([source], where=_WANTED, severities="WEF"):
        if ranks is None or record.rank in ranks:
            builder.add(record)
            counters.add(record)
    slices = builder.finish()
    if steps is not None:
        slices = in_steps(slices, steps)
    return (*limit(slices, max_events), counters.events())


class _TraceWriter:
    """The trace's JSON written as it goes: `{"traceEvents": [` then events, then the rest of the object."""

    def __init__(self, fd: int) -> None:
        self.fd, self.size, self._first = fd, 0, True

    def _write(self, data: bytes) -> None:
        write_all(self.fd, data)
        self.size += len(data)

    def events(self, events: list[dict]) -> None:
        if events:
            self._write((b'{"traceEvents":[' if self._first else b",") + fmt.dumps(events)[1:-1])
            self._first = False

    def close(self, other: dict) -> None:
        if self._first:
            self._write(b'{"traceEvents":[')
        self._write(b'],"displayTimeUnit":"ms","otherData":' + fmt.dumps(other) + b"}")


def run(args: argparse.Namespace) -> int:
    if args.max_events < 0:
        raise InputError(f"--max-events {args.max_events}: must be 0 (no limit) or more")
    ranks = set(parse_int_list("--ranks", args.ranks)) if args.ranks else None
    steps = set(parse_int_list("--steps", args.steps)) if args.steps else None
    warn = warner("trace")
    say_runs_read("trace", args.paths)
    sources = open_inputs(args, warn)
    share = -(-args.max_events // len(sources))  # --max-events shared out among the files (0: no limit)
    kinds: Counter = Counter()
    dropped: Counter = Counter()
    shown: set[int] = set()
    with output(args.output, [s.path for s in sources]) as fd:  # a refused output before the reading
        writer = _TraceWriter(fd)
        for source in sources:
            slices, over, counter_events = _file_slices(source, ranks, steps, share)
            hosts = {r: source.host or "" for r in source.counts.records if ranks is None or r in ranks}
            writer.events(trace_events(slices, hosts) + counter_events)
            kinds.update(s.kind for s in slices)
            dropped.update(over)
            shown.update(hosts)
        after_reading(sources, warn)
        writer.close({"generator": "distvlog trace", "dropped": dict(dropped)})
    said = ", ".join(f"{n:,} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: KINDS.index(kv[0])))
    print(
        f"distvlog trace: {plural(sum(kinds.values()), 'event')} ({said or 'none'}) on "
        f"{plural(len(shown), 'rank')} to {args.output} ({writer.size / 1e6:,.1f} MB)"
        + (
            f"; dropped {sum(dropped.values()):,} over --max-events {args.max_events:,} ("
            + ", ".join(f"{n:,} {k}" for k, n in dropped.items())
            + ")"
            if dropped
            else ""
        ),
        file=sys.stderr,
    )
    return 0
