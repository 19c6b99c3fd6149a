"""Opening what PATH arguments name: one `Source` per usable file, in (rank, argument order), checked to fit
together (`_runs`), and reading their records. Above `_source` (one file) and below the tools."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterator

import numpy as np

from ...errors import InputError
from . import _runs
from ._files import BadFile, InputFile, parse_rank_of, rank_given, resolve_inputs, trim_left_by_the_dead
from ._notes import Warn, ignore
from ._record import Record
from ._source import Source


def open_sources(
    paths: list[str], *, rank_of: dict[str, int] | None = None, clock_correction: bool = True, warn: Warn = ignore
) -> list[Source]:
    """The input files named by PATH arguments, opened, in (rank, argument order).

    Foreign files take the time zone of our files (they ran on the same cluster), else this machine's.
    A forked child's file (rank-R.<pid>.log) takes its parent's clock offset.
    """
    rank_of = rank_of or {}
    files = resolve_inputs(paths)
    trim_left_by_the_dead(f.path for f in files if f.name_rank is not None and not f.gz)
    for key in rank_of:
        if not any(rank_given({key: 0}, f.path) is not None for f in files):
            raise InputError(f"--rank-of {key}: not one of the input files")
    sources = _open_all(files, rank_of, clock_correction, warn)
    ours = sorted((s for s in sources if s.meta), key=lambda s: s.rank)
    zone = ours[0].utc_offset_s if ours else time.localtime().tm_gmtoff
    by_path = {s.path.resolve(): s for s in sources}
    by_rank = {s.rank: s for s in ours}
    for source in sources:
        if source.utc_offset_s is None:
            source.utc_offset_s = zone
        parent = by_path.get(source.file.child_of.resolve()) if source.file.child_of else None
        if parent is None and source.file.reader and clock_correction:
            parent = by_rank.get(source.rank)  # evidence of a rank ran on its host: our file's clock offset fits it
        if parent is not None and parent.clock:
            source.clock = parent.clock
    sources.sort(key=lambda s: (s.rank if s.rank is not None else 1 << 62, s.order))
    return sources


def _open_all(files: list[InputFile], rank_of: dict[str, int], clock_correction: bool, warn: Warn) -> list[Source]:
    """The files that can be read as logs, opened, and checked to fit together (see _runs). A file that cannot
    (empty, damaged, not a log) is skipped with a warning when others can: a user debugging a crashed run
    wants the ranks that did write."""
    sources: list[Source] = []
    unusable: list[str] = []
    try:
        for order, file in enumerate(files):
            try:
                sources.append(Source(file, order, rank_of, clock_correction))
            except BadFile as exc:
                unusable.append(str(exc))
        if not sources:
            raise InputError(
                unusable[0]
                if len(unusable) == 1
                else f"no usable input file: {'; '.join(unusable[:3])}"
                + (f"; {len(unusable) - 3} more" if len(unusable) > 3 else "")
            )
        for text in unusable:
            warn(f"{text}; skipping it")
        for note in dict.fromkeys(note for source in sources for note in source.notes):
            warn(note)
        _runs.check(sources, warn)
    except BaseException:
        for source in sources:
            source.close()
        raise
    return sources


def read_records(
    sources: list[Source], *, where: re.Pattern[bytes] | None = None, severities: str = ""
) -> Iterator[Record]:
    """Every record, file by file, each file in its own order; or, cheaply, only those whose glog text
    `where` matches or whose severity is one of `severities` (a regex scan over whole blocks)."""
    wanted = np.frombuffer(severities.encode(), np.uint8)
    for source in sources:
        while (block := source.next_block()) is not None:
            if where is None and not severities:
                picked = range(len(block))
            else:
                hit = np.isin(block.severity, wanted)
                if where is not None:
                    hit |= block.matching(where)
                picked = np.flatnonzero(hit).tolist()
            for i in picked:
                yield block.record(i)


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """PATH arguments and the options for reading them (shared with `trace`)."""
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="log files (.gz too), a run directory, or a log root (its latest run)"
    )
    parser.add_argument(
        "--rank-of",
        action="append",
        metavar="FILE=R",
        help="the rank of a foreign log file without [rank R] tags (repeatable)",
    )
    parser.add_argument(
        "--no-clock-correction",
        action="store_true",
        help="keep each rank's own timestamps (do not apply the clock offsets in the headers)",
    )


def open_inputs(args: argparse.Namespace, warn: Warn) -> list[Source]:
    return open_sources(
        args.paths, rank_of=parse_rank_of(args.rank_of), clock_correction=not args.no_clock_correction, warn=warn
    )
