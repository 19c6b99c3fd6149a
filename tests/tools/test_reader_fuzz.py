"""The reader under a mutation fuzzer: real rank files (glog and JSON lines, from our logger) with bytes
flipped, inserted, deleted, duplicated, dates and digits rewritten, NUL runs and long lines put in, cut
anywhere; and every input that ever broke the reader, kept in tests/tools/data/reader_corpus/.

Each input has a time limit (a hang fails it with the input saved for the corpus). Whatever the input, the
reader ends, raises nothing but a one-line InputError, gives records with placeable times, and accounts
for every line: in a record, the header, or skipped with a reason.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tools_logfiles import DATA

from distvlog.errors import InputError
from distvlog.tools.read import open_sources, read_records
from distvlog.tools.read._scan import MAX_US, MIN_US

CORPUS = DATA / "reader_corpus"
SECONDS_PER_INPUT = 10  # a loaded 2-core machine reads these small files in well under a second
MUTANTS = int(os.environ.get("DISTVLOG_FUZZ_MUTANTS", "120"))  # per seed file; raise it to fuzz longer


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum, frame):
        raise TimeoutError(f"reading took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits of the kinds that broke readers before."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        kind = rng.randrange(9)
        if kind == 0 and out:  # flip a byte
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif kind == 1:  # insert bytes that mean something to a reader
            out[at:at] = rng.choice([b"\n", b"\0", b"\r\n", b"\xff\xfe", b"]", b" +lines=", b"{", b'"', b"\\"])
        elif kind == 2:  # delete a range
            del out[at : at + rng.randint(1, 200)]
        elif kind == 3:  # duplicate a range (records out of order, repeated headers)
            end = min(len(out), at + rng.randint(1, 2000))
            out[end:end] = out[at:end]
        elif kind == 4:  # rewrite a date's or time's digits: Feb 30, month 13, hour 99, year 0000
            digits = rng.choice([b"0230", b"1399", b"0000", b"9999", b"0431", b"1231", b"0101"])
            out[at : at + len(digits)] = digits
        elif kind == 5:  # a run of NULs (a crashed writer's reserve)
            out[at:at] = b"\0" * rng.choice([1, 7, 4096, 70_000])
        elif kind == 6:  # cut the file here
            del out[at:]
        elif kind == 7:  # a long line
            out[at:at] = b"z" * rng.choice([5000, 300_000])
        elif kind == 8:  # a +lines count that lies
            out[at:at] = b" +lines=%d" % rng.choice([0, 1, 5, 10**9, 10**30])
    return bytes(out)


def lines_in(data: bytes) -> int:
    return data.count(b"\n") + (not data.endswith(b"\n"))


def check_input(path: Path) -> None:
    """Read path as the tools do; assert the reader's promises."""
    data = path.read_bytes()
    with time_limit(SECONDS_PER_INPUT):
        try:
            sources = open_sources([str(path)])
        except InputError as exc:
            assert "\n" not in str(exc)
            return
        got = list(read_records(sources))
    counts = sources[0].counts
    assert all(MIN_US <= r.ts <= MAX_US and isinstance(r.rank, int) for r in got)
    assert len(got) == sum(counts.records.values())
    if b"\0" not in data and not counts.cut and not counts.damage and sources[0].kind == "glog":
        assert counts.lines + counts.header + sum(counts.skipped.values()) == lines_in(data), dict(counts.skipped)


def seeds(glog_run: Path, jsonl_run: Path) -> list[Path]:
    return [glog_run / "rank-1.log", jsonl_run / "rank-0.jsonl"]


@pytest.mark.parametrize("path", sorted(CORPUS.iterdir()), ids=lambda p: p.name)
def test_every_input_that_ever_broke_the_reader(path):
    """The corpus: each file once broke the reader (a hang, a traceback, a miscount)."""
    check_input(path)


@pytest.mark.parametrize("seed", [0, 1])
def test_mutated_rank_files_never_hang_or_raise_and_every_line_is_accounted_for(tmp_path, glog_run, jsonl_run, seed):
    """MUTANTS mutants of real rank files per seed file; a failing one is saved under tmp_path for the corpus."""
    rng = random.Random(seed)
    for original in seeds(glog_run, jsonl_run):
        data = original.read_bytes()
        for i in range(MUTANTS):
            path = tmp_path / f"seed{seed}-{i}" / original.name
            path.parent.mkdir()
            path.write_bytes(mutate(data, rng))
            check_input(path)
            path.unlink()
            path.parent.rmdir()
