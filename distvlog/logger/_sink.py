"""The process's log file, opened on first use: records are copied into a window of the file mapped in
memory, so the kernel owns each record the moment it is copied, with no system call per record.

A SIGKILL, segfault, abort or os._exit right after a log call leaves the record in the file (the page cache
writes it back; only a machine crash loses it). `mmap.write` copies a whole record and advances the position
in one C call under the interpreter lock, so threads write without a lock, and a record never straddles two
windows: when one is full, the next window starts at the page holding the end of the content. Each window's
blocks are reserved (written as NUL bytes) before it is mapped: a full disk or a file-size limit is then an
OSError here, never a SIGBUS when a page is touched. The reserved space not yet written (the format's
RESERVE: NUL bytes) is cut off when the process settles its file (at exit, or before a signal's death, see
`_lifecycle`), and a crashed process's by whoever sees it die (`trim_reserve`, the launcher's parent), else
by the next run in the same log root (a SIGKILL under plain `mpirun`). Where a mapping is impossible or
makes no sense (stderr, /dev/null, while the reserve fails) records are buffered and written whole with
`os.write`. A forked child gets its own file. The rest of "never lose a record" (signals, exit,
exceptions) lives in `_lifecycle`.

Re-entry. A signal handler (also one interrupted by another) or a finaliser (`__del__`, a weakref callback)
may log on a thread that is inside the sink. Between two lock-free copies nothing is mid-change: its record
is copied into the window like any other. Inside the lock (a window being replaced, the file being opened,
a flush) the state is mid-change, so only the outermost holder on a thread changes it: a nested call copies
its record into the window if that is live and has room (in the file when the call returns), else queues
it, and the holder places the queue before it releases the lock (microseconds later, before the code it
interrupted goes on). A nested flush, settle or open is left to the holder. Our own SIGTERM/SIGINT handler
waits for the holder instead (`flush_for_signal`). At interpreter exit, once Python finalises, threads
that try to run Python are frozen for good (daemon threads): a lock one of them held is never released,
so after `_FROZEN_WAIT_S` the finalising thread, the only one left running Python, takes a new lock; and
stderr is written to its descriptor, past its stream's lock.

Writing never raises into the caller. When the file cannot be written (a full disk, a file-size limit, an
I/O error, the file or its directory deleted), the records are dropped and counted, one line on stderr says
so, and every later flush tries again; the first write that succeeds starts with a record of how many were
dropped and why (the format's DROPPED). A deleted file is created again, in the same run directory. A file
truncated under the process (logrotate's copytruncate, under DISTVLOG_MMAP=0) is found shorter than this
process left it at the next write, which starts it again with its header: it stays a rank file, and the
header's clock slots are rewritten there, never at their old offset, over records.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import fcntl
import mmap
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import format as _format
from . import _env, _render, _rundir
from ._clock import now_us
from ._identity import IDENTITY
from ._processors import SEVERITY as _SEVERITY

WINDOW_BYTES = 256 * 1024  # reserved and mapped at a time: the most a crashed file's reserve can be (but for
# a record larger than a window, which gets one of its size)
_FROZEN_WAIT_S = 0.1  # at interpreter exit, the longest the sink waits for a lock that a frozen thread may hold
_PAGE = mmap.ALLOCATIONGRANULARITY
_ZEROS = bytes(WINDOW_BYTES)
_TAIL_SCAN_BYTES = 1 << 22  # how far back from the end `trim_reserve` looks for the reserve
_DEAD_TAIL_BYTES = 1 << 16  # ... in an earlier run's file: past its reserve, at most faulthandler's stacks
_COPY_BYTES = 1 << 20  # what `move_to` copies at a time


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class RankFile:
    """One per process. Its `write`/`write_urgent` are what the structlog pipeline's logger calls."""

    def __init__(self) -> None:
        self.format = _env.read("DISTVLOG_FORMAT", _env.one_of(_render.RENDERERS), "glog")
        self.renderer = _render.RENDERERS[self.format]()
        self.run_id: str | None = None
        self.root: Path | None = None
        self.path: Path | None = None
        self.buffer_bytes = 64 * 1024
        self.echo_all = _env.read("DISTVLOG_ALSOLOGTOSTDERR", _env.boolean, False)
        self.on_open: list = []  # called with the sink once its file exists (lifecycle hooks)
        self._reset()
        self._clock: dict[str, str] = {}  # header clock slots measured so far (kept by a forked child)
        self._deferred_signal: list[tuple] = []  # handlers of ours that waited for the lock, in order
        self.signals_held = SignalsHeld(self)
        os.register_at_fork(
            before=self._before_fork, after_in_parent=self._lock_release, after_in_child=self._after_fork_child
        )

    def _reset(self) -> None:
        self._lock = threading.RLock()  # an RLock knows its owner: see flush_for_signal
        self._buf = bytearray()  # whole records only, while there is no mapped window
        self._fd = -1
        self._unwritten: int | None = None  # on stderr for a rank of several: records below WARNING left out
        self._map: mmap.mmap | None = None  # the window records are copied into (None: the buffer is used)
        self._base = 0  # the window's offset in the file
        self._reserved = 0  # where this process's reserve ends: the file's size, unless someone appended
        self._checked = 0  # the window position at the last check that the file still exists
        # Records go to a window when one can be reserved (a regular file, not settled). DISTVLOG_MMAP=0: for a
        # file that something truncates under the running process (logrotate's copytruncate), which would
        # kill it with SIGBUS at its next record in a window past the new end; records then wait in the
        # buffer (a death loses up to the flush interval's), as `os.write` survives a truncation.
        self._mapping = _env.read("DISTVLOG_MMAP", _env.boolean, True)
        self._child = False
        self._queued: deque[bytes] = deque()  # records of calls nested in a holder of the lock (see _nested)
        self._meta: dict | None = None  # the meta record of the file; its header is owed while _head_owed
        self._head_owed = False
        self._header = b""  # the header as it stands at the start of the file (its clock slots rewritten in place)
        self._end = 0  # where this process's last write ended: a file found shorter was truncated under it
        self._dropped = 0  # records dropped since the last successful write
        self._drop_reason: str | None = None  # set while writing fails

    # -- configuration (before the first record) ---------------------------------------------------
    def configure(
        self, *, fmt: str | None = None, log_dir: str | os.PathLike | None = None, run_id: str | None = None
    ) -> None:
        if self.file_open:
            raise RuntimeError(f"distvlog: the log file {self.path} is already open; configure before logging")
        if fmt is not None:
            if fmt not in _render.RENDERERS:
                raise ValueError(f"distvlog: unknown log format {fmt!r} (choose from {sorted(_render.RENDERERS)})")
            self.format, self.renderer = fmt, _render.RENDERERS[fmt]()
        if log_dir is not None:
            self.root = Path(log_dir)
        if run_id is not None:
            self.run_id = _rundir.sanitize_run_id(run_id)

    # -- the structlog logger interface ------------------------------------------------------------
    def write(self, record: bytes) -> None:
        """Append a whole record. Writers take no lock: `mmap.write` (and `bytearray.extend`, without a
        window) is one C call, atomic under the GIL; a full or closed window raises ValueError, and the
        record is placed under the lock."""
        window = self._map
        if window is not None:
            try:
                window.write(record)
            except ValueError:  # full, or closed meanwhile
                self._locked(self._place, record)
        elif self._fd >= 0 and not self._mapping:  # written with os.write: stderr, /dev/null, after exit
            if self._unwritten is not None:  # (a rank of several on stderr: warnings and above only)
                self._unwritten += 1
                return
            buf = self._buf
            buf.extend(record)
            if len(buf) >= self.buffer_bytes:
                self.flush()
        else:  # no file yet, or no window while the reserve fails
            self._locked(self._place_below_warning, record)
        if self.echo_all:
            _echo(record)
        if self._deferred_signal:
            self._redeliver()

    def write_urgent(self, record: bytes, echo: bool = True) -> None:
        """WARNING and above: flushed at once and (unless the caller prints it anyway) echoed to stderr."""
        self._locked(self._place_now, record)
        if echo and self.file_open:  # (else the record went to stderr already)
            _echo(record)
        if self._deferred_signal:
            self._redeliver()

    def write_own(self, method: str, event: str, **fields: Any) -> None:
        """A record of the logger's own (at `distvlog:0`), written at once without the processor chain: no
        user processor or bound context changes it."""
        self.write_urgent(_own_record(self.renderer, method, event, fields), echo=False)

    def flush(self) -> None:
        self._locked(self._flush_locked)
        if self._deferred_signal:
            self._redeliver()

    def settle(self) -> None:
        """Cut the reserve off the file and write every later record with `os.write` (at exit: hooks that
        run after this may still log, and a file left by a process must end with its last record)."""
        self._locked(self._settle_locked)

    def cut_reserve(self) -> None:
        """Cut the reserve off the file now, as a death no handler sees may come (a launcher's SIGKILL); the
        next record reserves a new window."""
        self._locked(self._unmap_locked)

    # -- the lock: one owner changes the sink's state; a call nested in it on the same thread changes nothing --
    def _locked(self, action: Callable[..., None], record: bytes | None = None) -> None:
        """`action(record)` (or `action()`) holding the lock as this thread's outermost holder. A call that
        re-enters the sink on the thread that holds it (a signal handler or a finaliser that interrupted it,
        mid-change) runs no action: see `_nested`."""
        if not self._enter():
            if record is not None:
                self._nested(record)
            return
        try:
            action() if record is None else action(record)
        finally:
            self._leave()

    def _enter(self) -> bool:
        """Take the lock; False when this thread holds it already. Once the interpreter is finalising only
        this thread runs Python: a lock still held after _FROZEN_WAIT_S belongs to a thread that exit froze
        (a daemon thread), which will never release it, and the sink goes on with a lock of its own."""
        lock = self._lock
        if lock._is_owned():
            return False
        if not sys.is_finalizing():
            lock.acquire()
        elif not lock.acquire(timeout=_FROZEN_WAIT_S):
            self._lock = lock = threading.RLock()
            lock.acquire()
        return True

    def _nested(self, record: bytes) -> None:
        """A nested call's record: into the window when it is live and has room (one C call: in the file
        when the call returns), else queued for the interrupted call, which places it before it returns."""
        window = self._map
        if window is not None:
            try:
                window.write(record)
                return
            except ValueError:  # full, or being closed by the call it interrupted
                pass
        self._queued.append(record)

    def _leave(self) -> None:
        """Place the records nested calls queued, then release the lock; a record queued after the last look
        and before the release is placed under the lock taken again."""
        while True:
            queued = self._queued
            if queued:
                while queued:
                    self._place(queued.popleft())
                self._flush_locked()
            elif len(self._buf) and len(self._buf) >= self.buffer_bytes:  # appended by a nested call meanwhile
                self._flush_locked()
            self._lock.release()
            if not self._queued:
                return
            self._lock.acquire()

    def _place_now(self, record: bytes) -> None:
        self._place(record)
        self._flush_locked()

    def _settle_locked(self) -> None:
        self._mapping = False
        self._unmap_locked()
        self._flush_locked()
        if self._unwritten:
            _echo(
                f"distvlog: rank {IDENTITY.rank}: {self._unwritten} records below WARNING were not written\n".encode()
            )
            self._unwritten = 0

    def _unmap_locked(self) -> None:
        if self._map is not None:
            self._unmap()

    # -- internals -----------------------------------------------------------------------------------
    def _place(self, record: bytes) -> None:
        """A record that did not go into the window at once (the caller holds the lock): opens the file, maps
        the next window, or buffers it (no window: not a regular file, or the reserve failed)."""
        if self._fd < 0:
            self._open_locked()
        while self._map is not None:
            try:
                self._map.write(record)
                return
            except ValueError:  # full (a window is sized for the record; nested calls may fill it first)
                self._map_window(len(record))
        buf = self._buf
        buf.extend(record)
        if len(buf) >= self.buffer_bytes:
            self._flush_locked()

    def _place_below_warning(self, record: bytes) -> None:
        """`_place` for a record below WARNING: the first one opens the file, and may find it cannot (see
        `_log_to_stderr`)."""
        if self._fd < 0:
            self._open_locked()
        if self._unwritten is not None:
            self._unwritten += 1
        else:
            self._place(record)

    def _map_window(self, need: int) -> None:
        """Map the window after the current one (or the first), large enough for `need` more bytes; without
        one (the reserve failed), records go to the buffer until a write succeeds."""
        end = self._close_window()
        with _appends_held(self._fd):  # (a record appended between the cut and the reserve would be overwritten)
            end = self._cut(end)
            base = end - end % _PAGE
            length = max(WINDOW_BYTES, -(-(end - base + need) // _PAGE) * _PAGE)
            try:
                _reserve(self._fd, base + length - end)
                window = mmap.mmap(self._fd, length, offset=base)
            except (OSError, ValueError, OverflowError):
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, end)  # (the reserve may have grown before it failed)
                return
        window.seek(end - base)
        self._map, self._base, self._reserved, self._checked = window, base, base + length, end - base

    def _unmap(self) -> int:
        """Close the window and cut the reserve off (see `_cut`); where the content ends, the file's size."""
        end = self._close_window()
        with _appends_held(self._fd):
            return self._cut(end)

    def _close_window(self) -> int | None:
        """Close the window (late lock-free writers then raise ValueError and come here); where its content
        ends. None without a window: the buffer is written instead. Before `_appends_held`, never inside it:
        closing a mapping closes its own copy of the descriptor, which drops this process's POSIX locks."""
        if self._map is None:
            self._flush_locked()
            return None
        window, self._map = self._map, None
        end = self._base + _stop(window)
        window.close()
        return end

    def _cut(self, end: int | None) -> int:
        """Cut the reserve off at `end` and bring records appended by another process past it (the launcher's
        parent) to the content's end; returns that end, the file's size. The caller holds `_appends_held`."""
        if end is None:
            return os.fstat(self._fd).st_size
        with contextlib.suppress(OSError):
            size = os.fstat(self._fd).st_size
            appended = os.pread(self._fd, size - self._reserved, self._reserved) if size > self._reserved else b""
            appended = appended.lstrip(b"\n")  # (the line append_record began past the reserve)
            os.ftruncate(self._fd, end)
            _write_all(self._fd, appended)  # (the descriptor appends)
            end += len(appended)
        return end

    def _flush_locked(self) -> None:
        if self._map is not None:
            self._check_window()
            return
        buf = self._buf
        if buf and self._fd >= 0:
            data = bytes(buf)  # whole records: each was appended in one step
            del buf[: len(data)]  # what lock-free writers appended meanwhile stays for the next flush
            self._write(data)
            if not self._buf and self._drop_reason is None and self._mapping and self.path is not None:
                self._map_window(0)  # writing works (again): back to a window

    def _check_window(self) -> None:
        """A file deleted under the window: the records copied since the last check go to the file created
        again (as the buffer's would), through `_write`, which says why and then maps a window there."""
        window = self._map
        try:
            deleted = os.fstat(self._fd).st_nlink == 0
        except OSError:
            return
        if deleted:
            self._map = None  # (the deleted file's reserve goes with it)
            since = window[self._checked : _stop(window)]
            window.close()
            self._buf[:0] = since
            self._flush_locked()
        else:
            self._checked = window.tell()

    def _write(self, data: bytes) -> None:
        """Write whole records, or drop and count them: never raises."""
        if self.path is None:  # stderr or /dev/null: nowhere else to say it
            with contextlib.suppress(OSError):
                _write_all(self._fd, data)
            return
        try:
            info = os.fstat(self._fd)
            if info.st_nlink == 0:  # deleted (or its directory): records written there are lost for good
                self._drop(0, "the log file was deleted")
                info = self._recreate()
            elif info.st_size < self._end:  # truncated under us (logrotate's copytruncate): a rank file again
                self._head_owed = True
            head = self.renderer.header({**self._meta, **self._clock}) if self._head_owed else b""
            out = head + self._owed_drops() + data
            start = info.st_size
            try:
                _write_all(self._fd, out)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)  # no torn record: what reached the file is taken back
                raise
            # The descriptor appends: its offset is now the file's end, past these records.
            self._end = os.lseek(self._fd, 0, os.SEEK_CUR)
        except OSError as exc:
            self._drop(_format.count_records(data, self.format), _reason(exc))
            return
        if self._head_owed:
            self._header = head
        self._head_owed, self._dropped, self._drop_reason = False, 0, None

    def _owed_drops(self) -> bytes:
        """The record of the records dropped, which must precede the next records."""
        if self._drop_reason is None:
            return b""
        return _own_record(
            self.renderer,
            "warning",
            f"{_format.DROPPED}: {self._drop_reason}",
            {_format.DROPPED_COUNT: self._dropped, _format.DROPPED_REASON: self._drop_reason},
        )

    def _recreate(self) -> os.stat_result:
        """A new file at the deleted one's path (and its run directory, if the log root is still there); its
        header is owed. Raises OSError while that is impossible."""
        path = self.path
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.parent)
        fd = _held(os.open(path, _rundir.CREATE_FLAGS, 0o644))  # (exclusive: never into someone else's file)
        os.close(self._fd)
        self._fd, self._head_owed = fd, True
        if _crash_fd:
            _crash_stacks_to(fd)
        return os.fstat(fd)

    def _drop(self, count: int, reason: str) -> None:
        """Count dropped records; the first drop of a failure says so on stderr, once."""
        if self._drop_reason is None:
            _echo(
                f"distvlog: rank {IDENTITY.rank} cannot write to {self.path}: {reason}; dropping records "
                "(counted) until it can write again\n".encode()
            )
            self._drop_reason = reason
        self._dropped += count

    def open(self) -> None:
        """Create this process's file: at its first record, or earlier when asked (its run id is then final).
        A signal handler, atexit hook or __del__ that logs meanwhile (in this thread) waits in the queue."""
        self._locked(self._open_locked)

    def _open_locked(self) -> None:
        if self._fd < 0:
            self._open()

    def _open(self) -> None:
        ident = IDENTITY
        ident.refresh_pid()
        root = self.root or _rundir.log_dir()
        run_id = self.run_id or _rundir.default_run_id(ident.world_size, root)
        stem = _format.rank_file_stem(ident.rank) + (f".{ident.pid}" if self._child else "")
        try:
            fd, path, rid = _rundir.create_rank_file(root, run_id, stem, self.renderer.suffix, ident.pid)
        except OSError as exc:
            self._log_to_stderr(exc.filename or root, exc.strerror or str(exc))
            return
        _held(fd)
        meta = _format.make_meta(
            rank=ident.rank,
            world_size=ident.world_size,
            host=ident.host,
            pid=ident.pid,
            tid=threading.get_native_id(),
            run_id=rid,
            fmt=self.format,
            created_us=now_us(),
        )
        self._meta, self._head_owed = meta, True
        self._fd, self.path, self.run_id, self.root = fd, path, rid, root
        self._write(b"")  # the header
        if self._mapping and stat.S_ISREG(os.fstat(fd).st_mode):
            self._map_window(0)
        _crash_stacks_to(fd)
        with contextlib.suppress(Exception):  # (someone else's files: nothing there may stop this rank's)
            _trim_left_by_the_dead(root, rid)
        kept = _rundir.point_latest(root, rid, ident.world_size)
        kept_text = f" (latest stays at {kept.name}, a job of several ranks)" if kept else ""
        # (one write: the ranks' lines stay whole)
        _echo(f"distvlog: rank {ident.rank} (pid {ident.pid}) logs to {path}{kept_text}\n".encode())
        for callback in self.on_open:
            # (a thread cannot start at interpreter shutdown: the file works without its timer)
            with contextlib.suppress(Exception):
                callback(self)

    def discard(self) -> None:
        """Write records nowhere, open no file: for a process whose records are no rank's (the `distvlog`
        tools, whose crash must not start a run in the user's log directory and move `latest`)."""
        self._locked(self._discard_locked)

    def _discard_locked(self) -> None:
        if self._fd < 0:
            self._fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            self._mapping = False

    def move_to(self, run_id: str) -> None:
        """Carry the open file over to run `run_id` (the job's, once its ranks agreed through a communicator):
        the same records under a header naming that run, in a file of its own there; the old file goes.
        Writers wait on the lock meanwhile: no record is lost. Raises OSError when the new file cannot be made
        (the old one is kept)."""
        with self._lock:
            if not self.file_open or run_id == self.run_id:
                return
            end = self._unmap()
            head = len(self.renderer.header({**self._meta, **self._clock}))
            stem = self.path.name[: -len(self.renderer.suffix)]
            fd, path, rid = _rundir.create_rank_file(self.root, run_id, stem, self.renderer.suffix, IDENTITY.pid)
            meta = {**self._meta, "run_id": rid}
            header = self.renderer.header({**meta, **self._clock})
            _write_all(_held(fd), header)
            for offset in range(head, end, _COPY_BYTES):  # (in pieces: memory stays bounded)
                _write_all(fd, os.pread(self._fd, min(_COPY_BYTES, end - offset), offset))
            if _crash_fd:
                _crash_stacks_to(fd)
            os.close(self._fd)
            old, self._fd, self.path, self.run_id, self._meta = self.path, fd, path, rid, meta
            self._header, self._end = header, os.lseek(fd, 0, os.SEEK_END)
            with contextlib.suppress(OSError):
                os.unlink(old)
                os.rmdir(old.parent)  # (only when no other process's file is left in the old run)
            if self._mapping and stat.S_ISREG(os.fstat(fd).st_mode):
                self._map_window(0)
            _rundir.point_latest(self.root, rid, IDENTITY.world_size)
        _echo(f"distvlog: rank {IDENTITY.rank} (pid {IDENTITY.pid}) moved its log from {old} to {path}\n".encode())

    def _log_to_stderr(self, where: object, reason: str) -> None:
        """As glog does when it cannot create its file: say so once, then write every record to stderr (once,
        as it comes), so a bad log directory never stops the job. A rank of several writes only its warnings
        and errors there (unless DISTVLOG_ALSOLOGTOSTDERR=1): a thousand ranks' info records would bury the
        console; it counts the others and says how many at exit."""
        some = IDENTITY.world_size > 1 and not self.echo_all
        self._unwritten = 0 if some else None
        what = "warnings and errors" if some else "logging"
        _echo(f"distvlog: cannot log to {where}: {reason}; {what} to stderr\n".encode())
        try:
            self._fd = os.dup(2)  # the sink's own descriptor: a forked child closes it, not its stderr
        except OSError:  # no stderr either
            self._fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        self.buffer_bytes = 0
        self.echo_all = False
        self._mapping = False

    @property
    def forked(self) -> bool:
        """Whether this process is a forked child of the rank's process (its file is rank-<R>.<pid>)."""
        return self._child

    @property
    def file_open(self) -> bool:
        """Whether records go to this process's file (neither before the first record nor when logging
        to stderr)."""
        return self._fd >= 0 and self.path is not None

    def set_clock(self, slot: str, offset_us: float, uncertainty_us: float, ts_us: int) -> None:
        """Record a measured clock offset to rank 0 in the header (in place: the slot has a fixed width)."""
        text = _format.clock_slot(offset_us, uncertainty_us, ts_us)
        self._clock[slot] = text
        self._locked(self._write_clock, slot)
        if self._deferred_signal:
            self._redeliver()

    def _write_clock(self, slot: str) -> None:
        """Rewrite the slot in the header at the start of the file, only while the file still starts with the
        header as this process left it: a file truncated under it (copytruncate) holds records there, and a
        file replaced at its path is another's. The next write after a truncation starts with a fresh header,
        which carries the slot. A truncation between the look and the rewrite puts the slot's text past the
        file's new end, after NUL bytes (padding and a stray line to a reader), still never over a record."""
        if not self.file_open or self._head_owed:  # (an owed header will carry it)
            return
        header, text = self._header, self._clock[slot].encode()
        at = _format.clock_slot_offsets(header)[slot]
        # (a descriptor of its own: pwrite on an O_APPEND one appends, on Linux)
        with contextlib.suppress(OSError):  # the header keeps its earlier slot: the records matter more
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
            try:
                if os.pread(fd, len(header), 0) == header:
                    os.pwrite(fd, text, at)
                    self._header = header[:at] + text + header[at + len(text) :]
            finally:
                os.close(fd)

    # -- signals: a handler that interrupts our own critical section waits until it is over -------------
    # Every method that takes the lock in the main thread checks `_deferred_signal` once it is released.
    # Inside `with SINK.signals_held:` (a node making its batch of lines) a signal waits too.
    def flush_for_signal(self, signum: int, frame: object, chain) -> None:
        # (handlers run in the main thread: the lock's owner or the holding thread is this one)
        if self._lock._is_owned() or threading.get_ident() in self.signals_held.depth:
            self._deferred_signal.append((signum, frame, chain))  # (a second signal meanwhile waits too)
            return
        self.flush()
        chain(signum, frame)

    def _redeliver(self) -> None:
        """Run the deferred handler once the lock is free: in the main thread, where it was deferred and
        where Python runs handlers (a KeyboardInterrupt raised in another thread would stop only that one)."""
        if threading.current_thread() is not threading.main_thread():
            return
        waiting = self._deferred_signal
        while waiting:
            signum, frame, chain = waiting.pop(0)
            self.flush()
            chain(signum, frame)

    # -- fork: the child opens its own file -----------------------------------------------------------
    def _before_fork(self) -> None:
        self._lock.acquire()
        if self._fd >= 0:
            self._flush_locked()
        elif self.run_id is None:  # no file yet: settle the run id now, so the child's file joins our run
            self.run_id = _rundir.default_run_id(IDENTITY.world_size, self.root or _rundir.log_dir())

    def _lock_release(self) -> None:
        self._lock.release()

    def _after_fork_child(self) -> None:
        fd, window = self._fd, self._map
        self._reset()
        if window is not None:
            window.close()  # (this process's mapping only: the parent's window and file are untouched)
        if _crash_fd:
            _crash_stacks_to(None)  # (the child's file gets it when it opens)
        self._child = True  # same run, own file: rank-<R>.<pid>, same clock offsets as the parent
        if fd >= 0:
            os.close(fd)


class SignalsHeld:
    """`with SINK.signals_held:` a SIGTERM/SIGINT waits until the block ends (for microseconds: a node making
    its batch of lines), so the lines being made reach the buffer before a handler can end the process.
    Holds nest; each thread counts its own."""

    __slots__ = ("_sink", "depth")

    def __init__(self, sink: RankFile) -> None:
        self._sink = sink
        self.depth: dict[int, int] = {}  # thread -> how many holds it is inside

    def __enter__(self) -> None:
        depth, tid = self.depth, threading.get_ident()
        depth[tid] = depth.get(tid, 0) + 1

    def __exit__(self, *exc: object) -> None:
        depth, tid = self.depth, threading.get_ident()
        left = depth.pop(tid, 1) - 1
        if left:
            depth[tid] = left
        elif self._sink._deferred_signal:
            self._sink._redeliver()


def _own_record(renderer: Any, method: str, event: str, fields: dict[str, Any], rank: int | None = None) -> bytes:
    """A record of the logger's own (at `distvlog:0`), rendered without the processor chain; as this process's
    rank's, or `rank`'s."""
    ident = IDENTITY
    return renderer(
        None,
        method,
        {
            _format.EVENT: event,
            **fields,
            _format.TS: now_us(),
            _format.SEVERITY: _SEVERITY[method],
            _format.RANK: ident.rank if rank is None else rank,
            _format.WORLD_SIZE: ident.world_size,
            _format.TID: threading.get_native_id(),
            _format.FILE: _format.OWN_FILE,
            _format.LINE: _format.OWN_LINE,
        },
    )


def append_record(path: Path, method: str, event: str, *, rank: int | None = None, **fields: Any) -> None:
    """Append one record of the logger's own to another process's rank file (`path`, whose format its
    suffix tells), in one write: for the process that ran a rank, once that rank has died, or (the stacks a
    signal asked for) while it lives: then past its reserve, on a line of its own, and the rank's trim (at
    its exit, or `trim_reserve` after its death) brings the record up to the end of its records. `rank`: the
    file's rank, for a process that is not that rank's (`distvlog watch`)."""
    fmt = "jsonl" if path.suffix == _format.SUFFIXES["jsonl"] else "glog"
    data = _own_record(_render.RENDERERS[fmt](), method, event, fields, rank)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    try:
        with _appends_held(fd):
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) == b"\0":  # past a live rank's reserve: on a line of its own
                data = b"\n" + data
            _write_all(fd, data)
    finally:
        os.close(fd)


_APPEND_WAIT_S = 0.1  # the longest a cut or an append waits for another process's (each takes microseconds)


@contextlib.contextmanager
def _appends_held(fd: int) -> Iterator[None]:
    """No other process appends to the file meanwhile (append_record), nor cuts its reserve: a POSIX record
    lock, apart from the writer's flock (Linux keeps the two apart). Held for microseconds by each; after
    _APPEND_WAIT_S the caller goes on without it rather than wait on a stopped process."""
    deadline = time.monotonic() + _APPEND_WAIT_S
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.001)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN)


def _reserve(fd: int, size: int) -> None:
    """Append `size` NUL bytes (the descriptor appends): the blocks are the file's from then on, so a full
    disk or a file-size limit is an OSError here (EFBIG: Python ignores SIGXFSZ), never a SIGBUS when a mapped
    page is touched. Written rather than fallocated: the pages are then in the page cache, and the first
    touch of each mapped page costs less (measured: about 190 vs 280 ns a record, reserve included)."""
    zeros = _ZEROS if size <= len(_ZEROS) else bytes(size)
    if os.write(fd, memoryview(zeros)[:size]) < size:  # a limit reached partway: the next write would fail
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))


def _stop(window: mmap.mmap) -> int:
    """Where the content of a window ends; lock-free writers find it full from then on. One C call, so no
    thread writes between finding the end and closing the window: `read` moves the position to the end and
    returns what was past it."""
    return len(window) - len(window.read())


def trim_reserve(path: Path, look_back: int = _TAIL_SCAN_BYTES) -> None:
    """Cut the reserve off the file of a process that died without settling it (SIGKILL, a segfault,
    os._exit): the last run of NUL bytes goes, and what another process appended after it (the launcher's
    parent's records) moves up to the content's end. A record the death cut mid-copy keeps one NUL after
    it, so it stays cut (torn), never read as whole. Only for a file whose writer is gone: a live one would
    be killed by SIGBUS on its next record, so a file whose writer still holds its flock (see `_held`), or
    that another process is trimming, is left as it is. Finds the reserve in the last `look_back` bytes
    only (what follows it: a crash's stacks, the launcher's records); never raises, never waits."""
    with contextlib.suppress(OSError):  # (BlockingIOError: the flock is held)
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with _appends_held(fd):
                _trim_fd(fd, look_back)
        finally:
            os.close(fd)


def _held(fd: int) -> int:
    """`fd`, its file flocked (shared) for as long as this process has it open: a trim, which takes the flock
    exclusively and never waits for it, then leaves a live writer's file alone even where its pid says
    nothing (a writer in another pid namespace: a container with the same host name)."""
    with contextlib.suppress(OSError):  # (a file system without flock: the pid tells, on this host)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    return fd


def _trim_left_by_the_dead(root: Path, run_id: str) -> None:
    """The reserves that earlier runs' processes killed beyond any handler's reach (SIGKILL: Hydra's when one
    rank dies or aborts, the OOM killer's) left in their files, cut off by the next run in the same log root
    (see `_rundir.earlier_rank_files`: a few runs, this rank's share; files whose writer is gone)."""
    for path in _rundir.earlier_rank_files(root, run_id, IDENTITY.rank, IDENTITY.world_size):
        trim_if_writer_gone(path)


def trim_if_writer_gone(path: Path) -> None:
    """Cut the reserve off `path` if the process that wrote it is gone for sure (`_rundir.writer_gone`: it
    ran on this host and its pid runs no more, or runs another program; the trim's flock is free): for a
    tool reading a run that a SIGKILL ended, so that grep and tail read its files as text from then on.
    Never raises, never touches a live writer's file."""
    with contextlib.suppress(OSError):
        if _rundir.writer_gone(path, IDENTITY.host):
            trim_reserve(path, look_back=_DEAD_TAIL_BYTES)  # (most files have no reserve: a short look tells)


def content_size(path: Path) -> int:
    """The size of a rank file without the reserve at its end (its writer's, live or dead): what a copy of
    it holds. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    try:
        return _before_nuls(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _before_nuls(fd: int, end: int) -> int:
    """Where the run of NUL bytes that ends at `end` starts (`end` when there is none)."""
    while end > 0:
        start = max(0, end - _TAIL_SCAN_BYTES)
        kept = os.pread(fd, end - start, start).rstrip(b"\0")
        if kept:
            return start + len(kept)
        end = start
    return 0


def _trim_fd(fd: int, look_back: int) -> None:
    size = os.fstat(fd).st_size
    start = max(0, size - look_back)
    tail = os.pread(fd, size - start, start)
    last_nul = tail.rfind(b"\0")
    if last_nul < 0:
        return  # no reserve (settled, or never mapped)
    appended = tail[last_nul + 1 :]
    end = _before_nuls(fd, start + last_nul + 1)
    if end and os.pread(fd, 1, end - 1) != b"\n":
        end += 1  # a record cut mid-copy: one NUL keeps it cut
    else:
        appended = appended.lstrip(b"\n")  # (the line append_record began past the reserve)
    if appended:
        os.pwrite(fd, appended, end)
    if end + len(appended) < size:  # (a file already cut stays as it is: what was appended since, too)
        os.ftruncate(fd, end + len(appended))


_crash_fd: list[int] = []  # the descriptor faulthandler was given here, while it writes there


def _crash_stacks_to(fd: int | None) -> None:
    """A segfault or an abort prints every thread's Python stack into the file, after its reserve
    (faulthandler appends to the descriptor; the reserve's trim brings the stacks up to the content, and
    readers take them as the format's CRASH block). Not when faulthandler already writes somewhere else (the
    user's choice, or the launcher's parent's pipe). None: the descriptor is closed, faulthandler stops."""
    with contextlib.suppress(Exception):
        if _crash_fd:
            faulthandler.disable()
            _crash_fd.clear()
        if fd is not None and not faulthandler.is_enabled():
            faulthandler.enable(file=fd, all_threads=True)
            _crash_fd.append(fd)


def _reason(exc: OSError) -> str:
    """`No space left on device (ENOSPC)`."""
    name = errno.errorcode.get(exc.errno or 0)
    return f"{exc.strerror or exc}{f' ({name})' if name else ''}"


def _echo(record: bytes) -> None:
    try:
        stream = sys.stderr
        if sys.is_finalizing():  # a thread that exit froze may hold the stream's lock: Python would abort
            _write_all(stream.fileno(), record)  # after waiting a second for it
        else:
            stream.write(record.decode("utf-8", "replace"))
            stream.flush()
    except Exception:  # no stderr (closed, detached, full), or a handler's call nested in this one's
        pass  # the file still has the record


SINK = RankFile()
