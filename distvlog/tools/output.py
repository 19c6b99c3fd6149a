"""Where the tools write: one safe writer for every output file (`merge -o`, `trace -o`, `diff -o`).

    with output(args.output, input_paths) as fd:   # None or "-": standard output
        write_all(fd, data)

A file is written to a temporary file in the target's directory and renamed into place when the tool
succeeds: a failed or interrupted run leaves the old file as it was, never half a file. The target is
refused, with one line naming it, when it is one of the inputs (`trace A B -o A` would destroy A), a
directory, or a symbolic link (a link planted at the output must not make the tool overwrite its target).
A character device or FIFO (`/dev/null`, `/dev/stdout`, a named pipe) is written in place, as a stream.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import InputError

# Written in pieces of this size: the kernel copies a multi-MB write() into the page cache at a fraction
# of the speed (measured: 4 MB writes often cost 3x the system time of 256 KB ones for the same bytes).
WRITE_BYTES = 256 << 10


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:WRITE_BYTES]) :]


@contextlib.contextmanager
def output(path: str | None, inputs: Iterable[Path], option: str = "-o") -> Iterator[int]:
    """A file descriptor to write the output to (see the module's docstring)."""
    if path is None or path == "-":
        sys.stdout.flush()
        yield sys.stdout.fileno()
        return
    stream = _check(path, inputs, option)
    if stream:
        fd = _open_stream(path, option)
        try:
            yield fd
        finally:
            os.close(fd)
        return
    directory = os.path.dirname(path) or "."
    import tempfile  # (here: ~3 ms of a small merge, which may write to a stream)

    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write there ({exc.strerror})") from None
    closed = False
    try:
        yield fd
        os.close(fd)
        closed = True
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        if not closed:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno in _FULL:
            raise InputError(f"{option} {path}: cannot write ({exc.strerror}); left as it was") from None
        raise


_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO}  # the file system refused the output


def _check(path: str, inputs: Iterable[Path], option: str) -> bool:
    """InputError when path must not be written; True when it is a stream (written in place)."""
    try:
        final = os.stat(path)
    except OSError:
        final = None
    if final is not None:
        for source in inputs:
            with contextlib.suppress(OSError):
                if os.path.samestat(final, os.stat(source)):
                    raise InputError(f"{option} {path}: that is one of the input files ({source})")
        if stat.S_ISDIR(final.st_mode):
            raise InputError(f"{option} {path}: a directory; give a file name")
    stream = final is not None and (stat.S_ISCHR(final.st_mode) or stat.S_ISFIFO(final.st_mode))
    if os.path.islink(path) and not stream:
        raise InputError(
            f"{option} {path}: a symbolic link (to {os.readlink(path)}); refusing to write through it "
            "(remove the link or give the file it points to)"
        )
    return stream


def _open_stream(path: str, option: str) -> int:
    try:  # O_NONBLOCK: a FIFO nobody reads fails here instead of blocking the tool forever
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "a FIFO that nobody reads" if exc.errno == errno.ENXIO else exc.strerror
        raise InputError(f"{option} {path}: cannot write there ({why})") from None
    os.set_blocking(fd, True)
    return fd


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
