"""Other programs' evidence of a job, found in directories and read as our records: which reader a file
needs, which rank it speaks for, and the records themselves as a stream of our JSON lines.

The reader is chosen from the content (`sniff`, the first 4 KiB), never from the name alone: a Flight
Recorder dump (pickle or JSON, _flight), a profiler's Chrome trace (_kineto), torchrun's `error.json`
(_torchrun), and text whose lines mostly carry no time of their own (_lines): a torchrun worker's
stdout/stderr, or NCCL's debug file (_nccl: its first line is NCCL's). Glog text (Paddle's workerlog.N,
c10d logs) goes to the glog reader as it is. Our own rank files are never sniffed: their names say what
they are.

The rank comes from what the evidence says: a trace's `distributedInfo.rank`, an NCCL file's communicator
init line, the launcher's layout (`attempt_K/R/`, `workerlog.N`, for one node the local rank is the global
rank), the digits ending a dump's name (torch names dumps `<prefix><rank>`), and `--rank-of FILE=R` where
nothing says it.

Converted files are held packed in memory (`Converted`), and read a few hundred records at a time.
"""

from __future__ import annotations

import marshal
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import format as fmt
from ...errors import InputError

if TYPE_CHECKING:
    from . import _flight

FLIGHT, TORCHRUN_ERROR, WORKER_OUTPUT = "flight recorder dump", "torchrun error.json", "torchrun worker output"
KINETO, NCCL_DEBUG = "profiler trace", "NCCL debug output"
_OWN_RANK = (KINETO, NCCL_DEBUG)  # readers whose file says its rank itself
PADDLE = "Paddle workerlog"  # glog text, which `merge --follow` reads as lines (the others: by the glog reader)
STATIC = (FLIGHT, KINETO, TORCHRUN_ERROR)  # written once, when the job fails or ends
SNIFF_BYTES = 4096
MAX_BYTES = 1 << 30  # a file read whole to be converted (a dump of 2,000 entries is a few MB)
_DEPTH = 6  # how deep a directory is searched (torchrun: D/<run>/attempt_K/R/stdout.log)
_MAX_FILES = 100_000
PACKED = 256  # records packed together: a block of a few KB of glog text at the least
_FLIGHT_ENTRY_BYTES = 100  # what a dump's entry counts for in a file's progress (about its pickle's bytes)
_FLIGHT_TEXT_BYTES = 600  # an entry's records' glog text: its creation's, start's and completion's
_ATTEMPT = re.compile(r"attempt_\d+")
_WORKER_FILES = ("stdout.log", "stderr.log", "error.json")
_WORKERLOG = re.compile(r"workerlog\.(\d+)")
_TRAILING = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?")


def layout_rank(path: Path, reader: str | None) -> int | None:
    """The rank a launcher's layout gives a file: attempt_K/R/{stdout,stderr}.log|error.json (torchrun),
    workerlog.N (Paddle), for a dump or trace the digits ending its name; None when it gives none."""
    name = path.name
    if name in _WORKER_FILES and path.parent.name.isdigit() and _ATTEMPT.fullmatch(path.parent.parent.name):
        return int(path.parent.name)
    match = _WORKERLOG.fullmatch(name) or (_ends_in_digits(name) if reader in (FLIGHT, KINETO) else None)
    return int(match.group(1)) if match else None


def _ends_in_digits(name: str) -> re.Match[str] | None:
    """Torch names a dump `<prefix><rank>` (a suffix added by hand kept): the digits ending the name."""
    match = _TRAILING.search(name)
    return match if match and match.end() == len(name) else None


def is_worker_output(path: Path) -> bool:
    return path.name in _WORKER_FILES[:2] and _ATTEMPT.fullmatch(path.parent.parent.name) is not None


def sniff(path: Path) -> str | None:
    """Which of our readers of other programs' files `path` needs, from its first bytes; None: a log for
    the glog / JSON-lines reader (or not readable at all: it says why when it opens the file)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return None
    from . import _flight, _kineto, _nccl, _torchrun  # (only where a file may be evidence: our own files need none)

    if _flight.looks_like(head):
        return FLIGHT
    if _kineto.looks_like(head):
        return KINETO
    if head.lstrip()[:1] == b"{" and _torchrun.is_error_json(head):
        return TORCHRUN_ERROR
    if is_worker_output(path) and not fmt.is_header_line(head.partition(b"\n")[0]):
        return WORKER_OUTPUT
    if not _WORKERLOG.fullmatch(path.name) and _nccl.looks_like(head):  # (a workerlog is Paddle's glog text)
        return NCCL_DEBUG
    return None


def find(directory: Path) -> list[Path]:
    """The evidence under a directory: files a reader of ours reads (by content) with a rank their layout
    gives (a profiler trace, NCCL's debug file: their own), and Paddle's workerlog.N; in path order. Our
    own rank files are not among them. Every other file's first 4 KiB are read: NCCL's debug files have
    any name (`NCCL_DEBUG_FILE`)."""
    found = [path for path in _walk(directory, 0, [0]) if _is_evidence(path)]
    return sorted(found, key=lambda p: [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", str(p))])


def growing(directory: Path, skip: set[Path]) -> Iterator[tuple[Path, str, int | None]]:
    """`merge --follow`'s view of the evidence under a directory, as the job writes it: (path, reader,
    rank) of each file not in `skip`, the files written once (STATIC) or text read line by line (TEXT, the
    workerlog's and NCCL's too). Files that are not evidence are added to `skip` once they hold bytes; an
    NCCL file whose rank no init line says yet is looked at again (rank None: not yet)."""
    for path in _walk(directory, 0, [0]):
        if path in skip:
            continue
        reader = PADDLE if _WORKERLOG.fullmatch(path.name) else sniff(path)
        if reader == NCCL_DEBUG:
            from . import _nccl

            with open(path, "rb") as f:
                yield path, reader, _nccl.rank_of(f.read(1 << 20))
        elif reader is not None and (reader == KINETO or layout_rank(path, reader) is not None):
            yield path, reader, layout_rank(path, reader)
        elif _size(path):
            skip.add(path)


def line_reader(rank: int, name: str, now_us: int) -> Any:
    """A reader of a text file's lines as they come (_lines.Lines), for `merge --follow`."""
    from ._lines import Lines

    return Lines(rank, name, now_us)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _is_evidence(path: Path) -> bool:
    if _WORKERLOG.fullmatch(path.name):
        return True
    reader = sniff(path)
    return reader is not None and (reader in _OWN_RANK or layout_rank(path, reader) is not None)


def _walk(directory: Path, depth: int, seen: list[int]) -> Iterator[Path]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        seen[0] += 1
        if seen[0] > _MAX_FILES:
            return
        try:
            if entry.is_dir(follow_symlinks=False) and depth < _DEPTH:
                yield from _walk(Path(entry.path), depth + 1, seen)
            elif entry.is_file() and not fmt.RANK_FILE_NAME.fullmatch(entry.name.removesuffix(".gz")):
                yield Path(entry.path)
        except OSError:
            continue


def _read_whole(path: Path) -> tuple[bytes, int]:
    """The file's bytes and its last change (epoch µs), refused past MAX_BYTES."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file")
        if st.st_size > MAX_BYTES:
            raise InputError(f"{path}: {st.st_size:,} bytes, more than the {MAX_BYTES:,} read of such a file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), st.st_mtime_ns // 1000
    finally:
        os.close(fd)


def convert(path: Path, reader: str, rank: int | None) -> tuple[Converted, list[str]]:
    """The file's records, kept packed for a `Source` to read a block at a time, and what to warn about
    once. `rank`: the one --rank-of or the layout gives (a trace's own rank, an NCCL file's init line's,
    come first)."""
    got, notes = _read(path, reader, rank)
    return Converted(path, got), notes


def objects(path: Path, reader: str, rank: int | None) -> tuple[list[dict], list[str]]:
    """The file's records as our JSON-lines objects, and what to warn about once (see `convert`)."""
    got, notes = _read(path, reader, rank)
    return (got if isinstance(got, list) else got.records(0, len(got))), notes


def _read(path: Path, reader: str, rank: int | None) -> tuple[list[dict] | _flight.Dump, list[str]]:
    from . import _flight, _kineto, _lines, _nccl, _torchrun, _unpickle

    data, mtime_us = _read_whole(path)
    notes: list[str] = []
    trace = None
    if reader == KINETO:
        try:
            trace = _kineto.load(data)
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from None
        rank = _kineto.rank_of(trace) if _kineto.rank_of(trace) is not None else rank
    elif reader == NCCL_DEBUG and (said := _nccl.rank_of(data)) is not None:
        rank = said
    if rank is None:
        raise InputError(
            f"{path}: cannot tell which rank wrote it (it and its place say none); pass --rank-of {path}=R"
        )
    if trace is not None:
        return _kineto.records(trace, rank), notes
    if reader == FLIGHT:
        try:
            dump, cut = _flight.load(data)
        except _unpickle.Refused as exc:
            raise InputError(f"{path}: refused: the pickle {exc}") from None
        except _flight.NotADump as exc:
            raise InputError(f"{path}: {exc}") from None
        if cut:
            notes.append(f"{path}: the Flight Recorder dump is cut short; its whole entries are read")
        if (note := _flight.version_note(dump)) is not None:
            notes.append(note)
        columns = _flight.Dump(dump, cut, rank, mtime_us)
        if columns.skipped:
            notes.append(f"{path}: {columns.skipped} Flight Recorder entries nested too deep to read, skipped")
        return columns, notes
    if reader == TORCHRUN_ERROR:
        return _torchrun.error_records(data, rank, mtime_us, path.name), notes
    return _lines.records(data, rank, mtime_us, path.name), notes


class Converted:
    """Converted records, read a few hundred at a time. A Flight Recorder dump stays in its columns
    (`flight`), its records made as they are read; other files' records are packed (marshal, then zlib):
    a thousand dumps of 2,000 entries each, or their traces, stay far below their size as Python objects.
    Marshal, not JSON: the records are ours, made here, and come back as they were, without a text to
    write, search and decode again."""

    damage: str | None = None
    cut_lines = 0

    def __init__(self, path: Path, got: list[dict[str, Any]] | _flight.Dump) -> None:
        self.path = path
        self.flight = None if isinstance(got, list) else got
        if self.flight is not None:
            self._chunks: list[tuple[bytes, int]] = []
            self.first = got.records(0, 1)[0]
            self.size = max(1, len(got)) * _FLIGHT_ENTRY_BYTES
        else:
            self._chunks = [
                (zlib.compress(marshal.dumps(got[at : at + PACKED]), 1), len(got[at : at + PACKED]))
                for at in range(0, len(got), PACKED)
            ]
            self.first = got[0] if got else None
            self.size = sum(len(chunk) for chunk, _ in self._chunks)
        self.rewind()

    def rewind(self) -> bool:
        self._next = self.out = 0
        return True

    def next_records(self, size: int) -> Sequence[dict[str, Any]] | None:
        """The next few hundred records (a dump's: about `size` bytes of their text), None after the last."""
        if self.flight is not None:
            return self._next_entries(self.flight, min(PACKED, max(16, size // _FLIGHT_TEXT_BYTES)))
        if self._next == len(self._chunks):
            return None
        chunk, count = self._chunks[self._next]
        self._next += 1
        self.out += len(chunk)
        return Packed(lambda: marshal.loads(zlib.decompress(chunk)), count)

    def _next_entries(self, dump: _flight.Dump, entries: int) -> Packed | None:
        if self._next and self._next >= len(dump):  # (the chunk that ended with the dump's own record was read)
            return None
        at, stop = self._next, self._next + entries
        self._next, self.out = stop, min(stop, max(1, len(dump))) * _FLIGHT_ENTRY_BYTES
        count = dump.records_count(at, stop)
        return Packed(lambda: dump.records(at, stop), count, lambda stamp: dump.texts(at, stop, stamp))

    def progress(self) -> int:
        return self.out

    def close(self) -> None:
        """Read no more: let go of the records (a dump's columns too, once `read_flight` handed them on)."""
        self.flight, self._chunks, self._next = None, [], 0


class Packed(Sequence):
    """Records made when read (unpacked, or made from a dump's columns): a block that only the merge writes
    (its glog text) never holds them as objects. Iterating makes them afresh; indexing makes them once and
    keeps them."""

    def __init__(
        self, make: Callable[[], list[dict[str, Any]]], count: int, texts: Callable[[str], list[bytes]] | None = None
    ) -> None:
        self._make, self._count = make, count
        self._objs: list[dict[str, Any]] | None = None
        self.texts = texts  # texts(stamp): their glog text, where the reader writes it itself (a dump's: faster)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._objs if self._objs is not None else self._make())

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:
        if self._objs is None:
            self._objs = self._make()
        return self._objs[i]
