"""What the tools say besides their result: counts in words, and warnings about their input on stderr.

A tool's output that silently rests on part of its input misleads (a diff that says "clean" for the ranks
it could read): what was skipped is said, a line a warning, and no records at all is unusable input.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import InputError
from ...wording import MAX_GROUPS, per_rank, plural, ranks_text
from ._block import Counts
from ._files import runs_read_for_roots

if TYPE_CHECKING:
    from ._source import Source

Warn = Callable[[str], None]


def ignore(text: str) -> None:
    """The warnings of a library caller that does not show them."""


def warner(command: str) -> Warn:
    """A warning a line on stderr, named after the command (`distvlog diff: warning: ...`)."""
    return lambda text: print(f"distvlog {command}: warning: {text}", file=sys.stderr)


def say_runs_read(command: str, paths: list[str]) -> None:
    """`distvlog diff: distvlog_logs: its latest run, distvlog_logs/20261201-101500-launch42` on stderr, for
    each log root given: `latest` moves with every job, so which one was read is said."""
    for arg, run in runs_read_for_roots(paths).items():
        print(f"distvlog {command}: {arg}: its latest run, {run}", file=sys.stderr)


def skipped_text(counts: Counts) -> str:
    """`3 lines skipped (2 binary garbage, 1 truncated last line)`, `0 lines skipped`."""
    skipped = sum(counts.skipped.values())
    reasons = ", ".join(f"{n:,} {why}" for why, n in counts.skipped.most_common())
    cut = f", {plural(counts.cut, 'line')} cut to the line cap" if counts.cut else ""
    return f"{plural(skipped, 'line')} skipped" + (f" ({reasons})" if skipped else "") + cut


def total(sources: list[Source]) -> Counts:
    counts = Counts()
    for source in sources:
        counts.add(source.counts)
    return counts


def after_reading(sources: list[Source], warn: Warn, *, skipped: bool = True) -> None:
    """Once the sources are read: warnings naming the files without records, damaged or with torn records
    (a line per file, or per kind of trouble with rank ranges when more than a few files have it), and
    (`skipped`) one saying how many lines were skipped and why; InputError when no file held a record."""
    empty = [s for s in sources if not s.counts.records]
    if len(empty) == len(sources):
        what = str(sources[0].path) if len(sources) == 1 else f"any of the {len(sources)} input files"
        raise InputError(f"no records in {what}: {_contents(total(sources))}")
    _per_file(warn, empty, lambda s: f"no records in {s.path}: {_contents(s.counts)}", "no records")
    _per_file(
        warn,
        [s for s in sources if s.counts.damage],
        lambda s: (
            f"{s.path}: {'; '.join(s.counts.damage)}; the records before it are read, the rest of the file is not"
        ),
        "damaged (the records before the damage are read)",
    )
    torn = [s for s in sources if s.counts.torn and s.counts.records]  # (else "no records" says so)
    _per_file(
        warn,
        torn,
        lambda s: f"{s.path}: {plural(s.counts.torn, 'torn record')} (cut short by a crash or a kill), not read",
        "torn records (cut short by a crash or a kill), not read",
        {s.rank: s.counts.torn for s in torn},
    )
    counts = total([s for s in sources if s.counts.records])  # the others' lines are in the warnings above
    if skipped and counts.skipped:
        warn(skipped_text(counts))


def _per_file(
    warn: Warn, sources: list[Source], line: Callable[[Source], str], what: str, counts: dict | None = None
) -> None:
    """A warning per file, or past MAX_GROUPS files one naming their ranks (`torn records ...: ranks 0-255:
    1 each`): a killed job of 1,024 ranks gets a line, not a screenful."""
    if len(sources) <= MAX_GROUPS or any(s.rank is None for s in sources):
        for source in sources:
            warn(line(source))
    elif counts:
        warn(f"{what}: {per_rank(counts)}")
    else:
        warn(f"{what}: {plural(len(sources), 'file')}, of {ranks_text(s.rank for s in sources)}")


def _contents(counts: Counts) -> str:
    return (f"{plural(counts.header, 'header line')}, " if counts.header else "") + skipped_text(counts)
