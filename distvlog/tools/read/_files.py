"""Which files a PATH argument means, checked before anything is opened, and opening them as byte streams.

A PATH is a log file, a run directory (`rank-*.log`, `rank-*.jsonl`, `.gz` too) or a log root, which
stands for its latest run (the `latest` link, else the newest run directory). Bad paths raise InputError
with one line naming the path and what is wrong with it (a symlink loop, a dangling link, a directory that
cannot be searched, a FIFO or device: opening a FIFO would block); files that cannot be read as logs
raise BadFile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ... import format as fmt
from ...errors import InputError
from . import _evidence
from ._stream import OPEN_FILES, ByteStream

_RANK_FILE = re.compile(rf"^{fmt.RANK_FILE_NAME.pattern}(?:\.gz)?$")


class BadFile(InputError):
    """A file that cannot be read as a log (unreadable, empty, not a log): the tools skip it when others can be read."""


@dataclass(frozen=True)
class InputFile:
    """One input file, in the order tools read them (rank from its name when it has our layout)."""

    path: Path
    name_rank: int | None  # the R of rank-R[.pid].log, or the rank a launcher's layout gives (_evidence)
    child_of: Path | None  # a forked child's file points at its parent's rank-R file
    reader: str | None = None  # another program's file that _evidence converts (None: glog / JSON lines)

    @property
    def gz(self) -> bool:
        return self.path.name.endswith(".gz")


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _rank_files(directory: Path) -> list[Path]:
    return sorted(
        (p for p in directory.iterdir() if _RANK_FILE.match(p.name) and not p.is_dir()), key=lambda p: _natural(p.name)
    )


def runs_read_for_roots(args: list[str]) -> dict[str, Path]:
    """The log roots among PATH arguments, each with the run directory that stands for it (its latest run):
    a tool says which run it read, since `latest` moves as jobs run."""
    out = {}
    for arg in args:
        path = Path(arg)
        with contextlib.suppress(OSError):  # (a bad path is refused when it is expanded)
            if path.is_dir() and not _rank_files(path) and (run := _latest_run(path)) is not None:
                out[arg] = run
    return out


def _latest_run(root: Path) -> Path | None:
    latest = root / "latest"
    if latest.is_dir():
        return latest.resolve()
    runs = [d for d in root.iterdir() if d.is_dir() and _rank_files(d)]
    return max(runs, key=lambda d: d.stat().st_mtime) if runs else None


_KINDS = {
    stat.S_ISFIFO: "a FIFO",
    stat.S_ISSOCK: "a socket",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
}


def check_path(arg: str | Path) -> os.stat_result:
    """The path's status, or InputError saying in one line why it cannot be an input (nothing is opened)."""
    try:
        return os.stat(arg)
    except OSError as exc:
        raise InputError(f"{arg}: {_why(arg, exc)}") from None


def _why(arg: str | Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a loop of symbolic links"
    if exc.errno == errno.ENOENT and os.path.islink(arg):
        return f"a dangling symbolic link (to {os.readlink(arg)}, which does not exist)"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno == errno.EACCES:
        return "permission denied (a directory on the way cannot be searched)"
    if exc.errno == errno.ENOTDIR:
        return "not a directory on the way"
    return exc.strerror or str(exc)


def _kind(st: os.stat_result) -> str | None:
    """What a path is when it is neither a regular file nor a directory."""
    return next((name for test, name in _KINDS.items() if test(st.st_mode)), None)


def _expand(arg: str) -> list[Path]:
    path = Path(arg)
    st = check_path(arg)
    if not stat.S_ISDIR(st.st_mode):
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{arg}: {_kind(st) or 'not a regular file'}, not a log file")
        return [path]
    try:
        files = _rank_files(path)
        if not files and (run := _latest_run(path)) is not None:
            return _rank_files(run)
    except OSError as exc:
        raise InputError(f"{arg}: cannot list the directory ({exc.strerror})") from None
    files += _evidence.find(path)
    if not files:
        raise InputError(
            f"{arg}: no distvlog logs here (no rank-*.log or rank-*.jsonl, no run directory) and no other "
            "program's (no Flight Recorder dump, torchrun log directory or Paddle workerlog)"
        )
    return files


def resolve_inputs(args: list[str]) -> list[InputFile]:
    """The files the PATH arguments name, each once (through links too), in argument order (a directory's
    files by name)."""
    seen: set = set()
    paths: list[Path] = []
    for arg in args:
        for path in _expand(arg):
            try:
                key: object = (path.stat().st_dev, path.stat().st_ino)
            except OSError:
                key = path.resolve()
            if key not in seen:
                seen.add(key)
                paths.append(path)
    if not paths:
        raise InputError("no input files")
    named = {(p.parent.resolve(), m.group(1), m.group(2)): p for p in paths if (m := _RANK_FILE.match(p.name))}
    files = []
    for path in paths:
        match = _RANK_FILE.match(path.name)
        parent = None
        if match and match.group(2):  # rank-R.<pid>.log: a forked child shares its parent's clock
            parent = named.get((path.parent.resolve(), match.group(1), None))
        if match:
            files.append(InputFile(path, int(match.group(1)), parent))
        else:
            reader = _evidence.sniff(path)
            files.append(InputFile(path, _evidence.layout_rank(path, reader), None, reader))
    return files


def trim_left_by_the_dead(paths: Iterable[Path]) -> None:
    """Cut the reserve (the NUL bytes a rank file ends with while its writer lives) off the files whose
    writer died without settling them (SIGKILL under plain `mpirun`, or alone) and is provably gone, so that
    grep and tail read them as text; a live writer's file is left as it is. The logger owns the rule, and
    is loaded only for a file that ends with a NUL byte: a running or killed job's."""
    padded = [path for path in paths if _ends_with_nul(path)]
    if padded:
        from ...logger import trim_if_writer_gone

        for path in padded:
            trim_if_writer_gone(path)


def _ends_with_nul(path: Path) -> bool:
    """(Opened without blocking and checked to be a regular file: a FIFO named like a rank file is skipped
    later, with a warning, and must not block here.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        return stat.S_ISREG(info.st_mode) and info.st_size > 0 and os.pread(fd, 1, info.st_size - 1) == b"\0"
    except OSError:  # (gone meanwhile)
        return False
    finally:
        os.close(fd)


def open_input(file: InputFile) -> ByteStream:
    """The file opened for reading as a ByteStream (decompressed when .gz). Opened without blocking, and
    checked to be a regular file once open: a path swapped for a FIFO after the check cannot block."""
    OPEN_FILES.make_room()
    try:
        fd = os.open(file.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise BadFile(f"{file.path}: cannot read ({_why(file.path, exc)})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise BadFile(f"{file.path}: {_kind(st) or 'not a regular file'}, not a log file")
    if st.st_size == 0:
        os.close(fd)
        raise BadFile(f"{file.path}: empty file")
    os.set_blocking(fd, True)
    stream = ByteStream(file.path, fd, file.gz)
    OPEN_FILES.add(stream)
    return stream


_INT_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def parse_int_list(option: str, text: str) -> list[int]:
    """`0,2-3` as [0, 2, 3] (sorted, each once): how --ranks and --steps name what they keep."""
    out: set[int] = set()
    for part in text.split(","):
        match = _INT_RANGE.fullmatch(part.strip())
        if not match or (match[2] is not None and not 0 <= int(match[2]) - int(match[1]) < 1 << 20):
            raise InputError(f"{option} {text!r}: expected a list like 0,2-3 (a range of at most 1,048,576)")
        out.update(range(int(match[1]), int(match[2] or match[1]) + 1))
    return sorted(out)


def parse_rank_of(specs: list[str] | None) -> dict[str, int]:
    """`--rank-of FILE=R` options as {FILE: R}; FILE matches a path as given, resolved, or its name."""
    out: dict[str, int] = {}
    for spec in specs or ():
        name, sep, rank = spec.rpartition("=")
        if not sep or not name or not rank.isdigit():
            raise InputError(f"--rank-of {spec!r}: expected FILE=RANK with a non-negative integer rank")
        out[name] = int(rank)
    return out


def rank_given(rank_of: dict[str, int], path: Path) -> int | None:
    for key in (str(path), str(path.resolve()), path.name):
        if key in rank_of:
            return rank_of[key]
    return None
