"""The bytes of one input file, made safe to parse: whatever the file holds, reading it never hangs, never
raises, and never needs more memory than the buffer it is read into.

- A plain file is read with `pread` straight into the caller's buffer; holes (a sparse file's unwritten
  space) are skipped with SEEK_DATA and stand for one NUL byte, and every run of NUL bytes (padding, see the
  format's section 1) is collapsed to one: a 2 GB file of NULs reads as one byte.
- A `.gz` is decompressed here (zlib, member after member) so that everything before a damage is kept and
  the damage is located: `damage` says at which compressed and uncompressed byte reading stopped, and why.
  A read error on a plain file (EIO) ends it the same way.
- A line longer than `line_cap` bytes keeps its first `line_cap` bytes and its newline; the rest is dropped
  and the line counted in `cut_lines`. The parser then never holds more than a capped line per record line.
- However many the files, their descriptors stay within the process's open-file limit (`OPEN_FILES`): a
  file read least recently is closed and opened again, by path, when it is read next.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np

from . import _crash

NEWLINE, NUL = 10, 0
LINE_CAP = 16 << 20  # far above a record line our logger writes (multi-line messages are cut into lines)
GZ_CHUNK = 1 << 20
_TAIL = 4096  # where to look for a buffer's last newline first


class ByteStream:
    """`readinto(view)` -> bytes written (0: the end); `damage` (None, or why reading stopped early),
    `cut_lines`, `progress()` (bytes of the file on disk read so far)."""

    def __init__(self, path: str | os.PathLike, fd: int, gz: bool, line_cap: int = LINE_CAP) -> None:
        st = os.fstat(fd)
        self.path, self.fd, self.size, self.line_cap = path, fd, st.st_size, line_cap
        self._identity = (st.st_dev, st.st_ino)
        self._pins = 0  # reads in progress (OPEN_FILES closes no pinned descriptor)
        self.pos = 0  # in the file on disk
        self.out = 0  # bytes handed out (uncompressed, before NUL and cap edits)
        self.damage: str | None = None
        self.cut_lines = 0
        self._line = 0  # bytes of the current line handed out so far
        self._cutting = False  # dropping the rest of an over-long line
        self._after_nul = False  # the last byte handed out was a NUL (a run continues)
        self._gz = _Gunzip() if gz else None
        self._done = False
        self._crash: tuple[int, bytes] | None = None  # a crash's stacks: where they start, the record read there
        if not gz:
            with contextlib.suppress(OSError):
                self._crash = _crash.find(fd, self.size)
        self._crash_out = 0  # bytes of that record handed out

    def rewind(self) -> bool:
        """Start over from the file's first byte (a plain file only: a .gz's decompressor cannot go back)."""
        if self._gz is not None:
            return False
        self.pos = self.out = self._line = self.cut_lines = self._crash_out = 0
        self._cutting = self._after_nul = self._done = False
        self.damage = None
        return True

    def progress(self) -> int:
        return self.pos

    def close(self) -> None:
        OPEN_FILES.forget(self)

    # -- reading -------------------------------------------------------------------------------------------
    def readinto(self, view: np.ndarray) -> int:
        """Fill `view` (a uint8 array) with as much as is left, up to its length; 0 only at the end."""
        while not self._done:
            got = self._read_raw(view)
            if not got:
                self._done = True
                break
            got = self._edit(view[:got])
            if got:
                return got
        return 0

    def _read_raw(self, view: np.ndarray) -> int:
        try:
            with OPEN_FILES.use(self):
                return self._gz_read(view) if self._gz is not None else self._plain_read(view)
        except OSError as exc:
            self._stop(f"read error ({os.strerror(exc.errno) if exc.errno else exc})")
            return 0

    def _plain_read(self, view: np.ndarray) -> int:
        if self._crash is not None:
            at, record = self._crash
            if self.pos >= at:  # the stacks: read as their record
                got = min(len(view), len(record) - self._crash_out)
                view[:got] = np.frombuffer(record, np.uint8, got, self._crash_out)
                self._crash_out += got
                self.out += got
                if self._crash_out == len(record):
                    self.pos = self.size
                return got
            view = view[: at - self.pos]
        data = self._seek_data()
        if data is None:  # only a hole is left: padding to the end
            self.pos = self.size
            return self._nul(view)
        if data > self.pos:
            self.pos = data
            return self._nul(view)
        got = os.preadv(self.fd, [memoryview(view)], self.pos)
        self.pos += got
        self.out += got
        return got

    def _seek_data(self) -> int | None:
        """Where the next data is (self.pos when no hole starts here), None when none is left."""
        try:
            return os.lseek(self.fd, self.pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # past the last data (or at the end)
                return None if self.pos < self.size else self.pos
            return self.pos  # no SEEK_DATA here (a pipe, an old file system): plain reads

    def _nul(self, view: np.ndarray) -> int:
        view[0] = NUL
        return 1

    def _gz_read(self, view: np.ndarray) -> int:
        gz = self._gz
        while True:
            got = gz.decompress_into(view)
            if got:
                self.out += got
                return got
            if gz.error:
                self._stop(f"{gz.error} at compressed byte {gz.consumed:,}")
                return 0
            chunk = os.pread(self.fd, GZ_CHUNK, self.pos)
            self.pos += len(chunk)
            if not chunk:
                if gz.mid_member:
                    self._stop(f"the compressed data ends at byte {self.pos:,}, before its end marker (truncated)")
                return 0
            gz.feed(chunk)

    def _stop(self, why: str) -> None:
        self.damage = (
            f"unreadable from uncompressed byte {self.out:,}: {why}" if self._gz else f"{why} at byte {self.pos:,}"
        )
        self._done = True

    # -- edits: NUL runs to one NUL, over-long lines cut ---------------------------------------------------
    def _edit(self, region: np.ndarray) -> int:
        n = len(region)
        if region.min() == NUL:
            n = self._collapse(region)
            region = region[:n]
        if self._cutting or self._line + n > self.line_cap:
            return self._cap(region)
        last = _last_newline(region)
        self._line = self._line + n if last < 0 else n - last - 1
        return n

    def _collapse(self, region: np.ndarray) -> int:
        zero = region == NUL
        follows = np.empty_like(zero)
        follows[0] = self._after_nul
        follows[1:] = zero[:-1]
        keep = ~(zero & follows)
        self._after_nul = bool(zero[-1])
        kept = region[keep]
        region[: len(kept)] = kept
        return len(kept)

    def _cap(self, region: np.ndarray) -> int:
        """Keep at most line_cap bytes of each line (its newline kept too): compacts region in place."""
        cap, line, at, out = self.line_cap, self._line, 0, 0
        newlines = np.flatnonzero(region == NEWLINE).tolist() + [len(region)]
        for nl in newlines:
            end = min(nl + 1, len(region))  # this piece of the line, with its newline if it has one
            room = max(cap - line, 0)
            text_end = min(nl, len(region))
            keep = min(text_end - at, room)
            if text_end - at > room and not self._cutting:
                self.cut_lines += 1
                self._cutting = True
            region[out : out + keep] = region[at : at + keep]
            out += keep
            line += keep
            if nl < len(region):  # the line ends here
                region[out] = NEWLINE
                out += 1
                line, self._cutting = 0, False
            at = end
        self._line = line
        if out:
            self._after_nul = region[out - 1] == NUL
        return out


def _last_newline(region: np.ndarray) -> int:
    """The index of the last newline in region, -1 when there is none."""
    end = len(region)
    width = _TAIL
    while end > 0:
        start = max(end - width, 0)
        hits = np.flatnonzero(region[start:end] == NEWLINE)
        if len(hits):
            return start + int(hits[-1])
        end, width = start, width * 8
    return -1


class _Gunzip:
    """gzip members one after another (as `gzip` and `zcat` read them), decompressed into a caller's buffer."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        self._pending = b""  # compressed bytes not yet given to the decompressor
        self.consumed = 0  # compressed bytes the decompressor took
        self.error: str | None = None
        self.mid_member = False  # inside a member (its end marker not yet seen)

    def feed(self, chunk: bytes) -> None:
        self._pending += chunk

    def decompress_into(self, view: np.ndarray) -> int:
        """Up to len(view) bytes decompressed from what was fed; 0 when more input is needed (or on error)."""
        while self._pending and self.error is None:
            if self._d.eof:  # a member ended: the next starts, or the rest is not gzip
                if self._pending[:2] != b"\x1f\x8b":
                    self.error = "data after the last gzip member is not gzip"
                    return 0
                self._d = zlib.decompressobj(zlib.MAX_WBITS | 16)
            data, size = self._pending, len(self._pending)
            try:
                out = self._d.decompress(data, len(view))
            except zlib.error as exc:
                self.error = f"damaged compressed data ({exc})"
                return 0
            self.mid_member = not self._d.eof
            self._pending = self._d.unconsumed_tail or self._d.unused_data
            self.consumed += size - len(self._pending)
            if out:
                view[: len(out)] = np.frombuffer(out, np.uint8)
                return len(out)
        return 0


class _OpenFiles:
    """The descriptors of the streams being read, at most `limit()` open: the soft open-file limit is raised
    to the hard one first, and past it (less a reserve for outputs and libraries) the least recently read
    stream's file is closed, to be opened again by path (and checked to be the same file) when it is read."""

    RESERVE = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[ByteStream, None] = OrderedDict()
        self._limit: int | None = None

    def limit(self) -> int:
        if self._limit is None:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                soft = want
            self._limit = max(8, soft - self.RESERVE)
        return self._limit

    def make_room(self) -> None:
        """Before a file is opened: a descriptor closed if the limit is reached."""
        with self._lock:
            self._make_room()

    def add(self, stream: ByteStream) -> None:
        """A stream whose descriptor was just opened (after make_room)."""
        with self._lock:
            self._open[stream] = None

    @contextlib.contextmanager
    def use(self, stream: ByteStream) -> Iterator[int]:
        """The stream's descriptor, open (again) and kept open while the caller reads."""
        with self._lock:
            if stream in self._open:
                self._open.move_to_end(stream)
            else:
                self._make_room()
                stream.fd = _reopen(stream)
                self._open[stream] = None
            stream._pins += 1
        try:
            yield stream.fd
        finally:
            with self._lock:
                stream._pins -= 1

    def forget(self, stream: ByteStream) -> None:
        with self._lock:
            if self._open.pop(stream, False) is None:
                os.close(stream.fd)
            stream.fd = -1

    def _make_room(self) -> None:
        while len(self._open) >= self.limit():
            idle = next((s for s in self._open if not s._pins), None)
            if idle is None:
                return  # every open file is being read at this moment: one over the limit, briefly
            del self._open[idle]
            os.close(idle.fd)
            idle.fd = -1


def _reopen(stream: ByteStream) -> int:
    fd = os.open(stream.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != stream._identity:
        os.close(fd)
        raise OSError(errno.ESTALE, "the file was replaced while it was read")
    os.set_blocking(fd, True)
    return fd


OPEN_FILES = _OpenFiles()
