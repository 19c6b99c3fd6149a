"""`distvlog trace PATH... -o trace.json`: the run as Chrome trace-event JSON, for Perfetto or chrome://tracing.

One process per rank ("rank R (host)"), one track per thread; a slice per GradNode run, backward pass and
allreduce bucket, an instant per warning and error; `args` carry node, step and gradient statistics.
Counter tracks per rank (from DataParallel's records): step time, allreduce wait, local gradient norm.
Slices on one track never overlap partially (Perfetto rejects that): a slice that would is moved to an
extra track of the same thread. `--max-events` keeps huge runs loadable and says what it dropped.
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
from ..read import add_input_arguments, after_reading, open_inputs, read_records, warner
from . import _counters
from ._slices import KINDS, WANTED, Slice, SliceBuilder

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
        help="keep at most N events, errors and passes first (default 1,000,000; 0: all)",
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


def run(args: argparse.Namespace) -> int:
    if args.max_events < 0:
        raise InputError(f"--max-events {args.max_events}: must be 0 (no limit) or more")
    warn = warner("trace")
    sources = open_inputs(args, warn)
    builder, counters = SliceBuilder(), _counters.CounterBuilder()
    for record in read_records(
        sources,
        where=re.compile(WANTED.pattern + b"|" + _counters.WANTED.pattern, WANTED.flags | _counters.WANTED.flags),
        severities="WEF",
    ):
        builder.add(record)
        counters.add(record)
    after_reading(sources, warn)
    slices, dropped = limit(builder.finish(), args.max_events)
    hosts: dict[int, str] = {}
    for source in sources:
        for rank in source.counts.records:
            hosts.setdefault(rank, source.host or "")
    events = trace_events(slices, hosts) + counters.events()
    doc = {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"generator": "distvlog trace", "dropped": dict(dropped)},
    }
    with output(args.output, [s.path for s in sources]) as fd:
        write_all(fd, fmt.dumps(doc))
    kinds = Counter(s.kind for s in slices)
    said = ", ".join(f"{n:,} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: KINDS.index(kv[0])))
    print(
        f"distvlog trace: {plural(len(slices), 'event')} ({said or 'none'}) on {plural(len(hosts), 'rank')} to "
        f"{args.output}"
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
