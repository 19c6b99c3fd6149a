"""`distvlog merge PATH... [-o OUT]`: every rank's records in one timeline, by clock-corrected time.

The output is a glog file (lnav, grep and sort keep working; every record keeps its `[rank R]` tag and
shows its corrected time) or JSON lines. A one-line summary on stderr says what was read, per rank, and
what was skipped and why.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ...errors import InputError
from ...wording import per_rank, plural
from ..output import output
from ..read import (
    PAD,
    Arena,
    Source,
    Warn,
    add_input_arguments,
    after_reading,
    ignore,
    open_inputs,
    open_sources,
    say_runs_read,
    skipped_text,
    total,
    warner,
)
from . import _filters
from ._kway import Inline, KWayMerge
from ._writers import JsonWriter, Writer, text_header

PROGRESS_MIN_BYTES = 4 << 20
READ_THREADS = 2  # parse two inputs' next blocks at once (see _kway)
# Below this much input every file is a block or two: threads to read ahead cost more than they save
# (importing concurrent.futures, which imports logging, is ~5 ms of a 4 x 100 records merge; then starting them).
READ_AHEAD_MIN_BYTES = 1 << 20
# The blocks in memory: each input holds about two and a half (one read ahead, the one being merged, part
# of the next), so an input's block is this budget shared out, within the bounds below.
BLOCKS_BUDGET = 32 << 20
MIN_BLOCK, MAX_BLOCK = 32 << 10, 4 << 20
__all__ = ["Follow", "alive", "collapsed", "context", "follow", "register", "resolve_run", "run", "summary"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "merge", help="merge per-rank logs into one timeline", description=__doc__.split("\n\n")[0]
    )
    add_input_arguments(parser)
    parser.add_argument("-o", "--output", metavar="OUT", help="write to OUT (default, or -: standard output)")
    parser.add_argument("--format", choices=("text", "jsonl"), default="text", help="glog text (default) or JSON lines")
    parser.add_argument(
        "--collapse",
        action="store_true",
        help="fold records that ranks wrote in common into one line (values agreed or spread); "
        "mark the ranks that stand apart",
    )
    _filters.add_arguments(parser)
    _add_follow_arguments(parser)
    parser.set_defaults(run=run)


def _add_follow_arguments(parser: argparse.ArgumentParser) -> None:
    """`--follow` and its options; the follow itself (_follow) is imported only when it runs."""
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print the timeline of a running job as it grows (PATH: its run directory, a log root or latest)",
    )
    parser.add_argument(
        "--delay",
        metavar="S",
        type=_seconds,
        default=1.0,
        help="with --follow: print a record at the latest S seconds after it was read (default 1)",
    )
    parser.add_argument(
        "--idle",
        metavar="S",
        type=_seconds,
        default=300.0,
        help="with --follow: stop when no rank wrote for S seconds (default 300)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds")
    return value


def __getattr__(name: str) -> Any:
    """`follow` (the launcher's `launch --follow`), `Follow`, `resolve_run` and `alive` (`distvlog watch` and
    `stacks`) from their module, imported on first use (PEP 562)."""
    if name in ("follow", "Follow", "resolve_run"):
        from . import _follow

        return getattr(_follow, name)
    if name == "alive":
        from ._tails import alive

        return alive
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def context(paths: list[str], before: int, after: int) -> list[Any]:
    """The collapsed timeline of PATHS around the first place ranks differ (or an error), as rows (stamp, site,
    who, text, marked): `before` rows before it and `after` from it on (report's table, diff's context lines).
    Like `collapsed`, it loads the folding only when called: a plain merge does not."""
    from ._collapsed import around

    with contextlib.closing(collapsed(paths)) as groups:
        return around(groups, before, after)


def collapsed(paths: list[str], warn: Warn = ignore) -> Iterator[Any]:
    """The records of PATHS merged and folded as `merge --collapse` folds them, a judged group at a time."""
    import numpy as np

    from ._collapse import Collapser
    from ._collapsed import folded_batches

    sources = open_sources(paths, warn=warn)
    try:
        for source in sources:
            source.display_offset_s = sources[0].utc_offset_s
        merge = KWayMerge(sources, _arena(sources).alloc, Inline())
        collapse = Collapser({s.rank for s in sources if s.rank is not None})
        for released in folded_batches(merge, lambda block: np.arange(len(block)), collapse):
            yield from released
    finally:
        for source in sources:
            source.close()


def _progress(sources: list[Source]):
    total = sum(s.size for s in sources)
    if total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional (the `progress` extra)
        return None
    return tqdm(total=total, unit="B", unit_scale=True, desc="merge", file=sys.stderr, leave=False)


def summary(sources: list[Source], written: int, late: int, where: str) -> str:
    """One line, as short at 1,024 ranks as at 4: records per rank as rank ranges with the exceptions, the
    ranks that had lines skipped and why, what the filters dropped."""
    counts = total(sources)
    read = sum(counts.records.values())
    notes = {  # (a file without records has its warning)
        s.rank: _skipped_note(s) for s in sources if s.rank is not None and s.counts.records and s.counts.skipped
    }
    parts = [
        f"{plural(written, 'record')} from {plural(len(sources), 'file')} ({per_rank(counts.records, notes)}) "
        f"to {where}"
    ]
    if read > written:
        parts.append(f"{read - written:,} filtered out")
    if counts.header:
        parts.append(plural(counts.header, "header line"))
    parts.append(skipped_text(counts))
    if late:
        parts.append(f"{plural(late, 'record')} written late (their rank's clock went back)")
    return "; ".join(parts)


def _skipped_note(source: Source) -> str:
    skipped = source.counts.skipped
    return f"{plural(sum(skipped.values()), 'line')} skipped: {', '.join(skipped)}"


def _arena(sources: list[Source]) -> Arena:
    """Memory for every input's blocks, in one buffer (see read.Arena): a small block per input when they
    are many, so memory stays flat in the number of ranks."""
    block = min(MAX_BLOCK, max(MIN_BLOCK, BLOCKS_BUDGET // len(sources)))
    if block < MAX_BLOCK:  # (else the reader's own block size)
        for source in sources:
            source.chunk = block - PAD
    return Arena(nslots=max(64, 4 * len(sources)), slot_bytes=block)


def _read_ahead(sources: list[Source]) -> contextlib.AbstractContextManager[Any]:
    """Threads that read and parse the inputs' next blocks while this one merges (see _kway); for a small
    input, reading on this thread."""
    if sum(s.size for s in sources) < READ_AHEAD_MIN_BYTES:
        return contextlib.nullcontext(Inline())
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(READ_THREADS, thread_name_prefix="distvlog-merge-reader")


def run(args: argparse.Namespace) -> int:
    if args.follow:
        from ._follow import follow

        return follow(args)
    select = _filters.Select(args)
    warn = warner("merge")
    say_runs_read("merge", args.paths)
    sources = open_inputs(args, warn)
    present = {s.rank for s in sources}
    if select.ranks is not None and not present & set(select.ranks.tolist()) and None not in present:
        raise InputError(
            f"--ranks {args.ranks}: no input is from those ranks (present: {','.join(map(str, sorted(present)))})"
        )
    zone = sources[0].utc_offset_s  # the lowest rank's time zone
    for source in sources:
        source.display_offset_s = zone
    with _read_ahead(sources) as ahead:
        merge = KWayMerge(sources, _arena(sources).alloc, ahead)  # reads up to each file's first record
        after_reading(sources, warn, skipped=False)  # the summary says what was skipped
        select.prepare(merge.first_ts, zone)
        if args.collapse:
            from ._collapsed import write_collapsed

            head = header(args, sources, merge.first_ts, zone) if args.format == "text" else b""
            written, folding = write_collapsed(args, sources, merge, select, head)
        else:
            written, folding = _write(args, sources, merge, select, zone), ""
    where = "stdout" if args.output in (None, "-") else args.output
    print(f"distvlog merge: {summary(sources, written, merge.late, where)}{folding}", file=sys.stderr)
    return 0


def header(args: argparse.Namespace, sources: list[Source], first_ts: int | None, zone: int) -> bytes:
    """The merged timeline's glog header."""
    hosts = sorted({s.host for s in sources if s.host})
    metas = [meta for s in sources for meta in s.metas]
    return text_header(first_ts, zone, hosts, len(sources), not args.no_clock_correction, metas)


def _write(
    args: argparse.Namespace, sources: list[Source], merge: KWayMerge, select: _filters.Select, zone: int
) -> int:
    """Write the merged records to the output; returns how many."""
    bar = _progress(sources)
    written = 0
    with output(args.output, [s.path for s in sources]) as fd:
        if args.format == "jsonl":
            writer: Writer = JsonWriter(fd)
        else:
            writer = Writer(fd, header(args, sources, merge.first_ts, zone))
        try:
            for batch in merge.batches(select):
                writer.write(batch)
                written += len(batch)
                if bar is not None:
                    bar.update(sum(s.progress() for s in sources) - bar.n)
        finally:
            writer.close()
            if bar is not None:
                bar.close()
    return written
