"""Where a process logs: `<log_dir>/<run_id>/rank-<R>.log`, one run id shared by all ranks of a job.

A run never writes into another run's files: files are created with O_EXCL and without following
symlinks; if a rank's file already exists (a reused run id), the rank moves on to `<run_id>.1`, `.2`, ...
Every rank of the reused job sees the same files, so all of them land in the same new directory. Only a
process started by the file's writer (a helper of that rank) joins that run instead.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import os
import re
import stat
import time
from pathlib import Path

from ..format import RANK_FILE_NAME, SUFFIXES, meta_of_head, rank_file_stem
from . import _job

# (read-write: the sink maps the file)
CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def log_dir() -> Path:
    return Path(os.environ.get("DISTVLOG_LOG_DIR") or "distvlog_logs")


def _stamp(epoch_s: float) -> str:
    """UTC: ranks whose time zones differ (containers, hosts) name the same second alike."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(epoch_s))


def _parent_start() -> tuple[int, float] | None:
    """(ppid, wall-clock start time of the parent): the same for all ranks one launcher proxy started."""
    ppid = os.getppid()
    try:
        fields = Path(f"/proc/{ppid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        btime = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return ppid, btime + ticks / os.sysconf("SC_CLK_TCK")


def default_run_id(world_size: int, root: Path) -> str:
    """The run id when nobody handed one down: the environment's, the launcher's job's, else a new one.

    A job a launcher of `_job` started is named `<UTC time>-<its tag>`: the time its first rank to log chose,
    given to the others by torchrun's store or by a claim in the log root (`claim_run`). Without such a
    launcher, ranks started by one launcher process agree because they share its pid and start time.
    """
    explicit = os.environ.get("DISTVLOG_RUN_ID")
    if explicit:
        return sanitize_run_id(explicit)
    tag = _job.tag()
    if tag:
        candidate = f"{_stamp(time.time())}-{tag}"
        return sanitize_run_id(_job.agreed(candidate) or claim_run(root, tag, candidate))
    if world_size > 1:
        parent = _parent_start()
        if parent:
            return f"{_stamp(parent[1])}-p{parent[0]}"
    return f"{_stamp(time.time())}-{os.getpid()}"


CLAIMS = ".jobs"  # the log root's folder of claims (a dot: no run, and `ls` leaves it out)
CLAIM_KEPT_S = 24 * 3600  # how long a job's claim names its run: a launcher may hand a later job the same tag


def claim_run(root: Path, tag: str, candidate: str) -> str:
    """The run id of the job `tag` names, agreed through the log root its ranks share: the first rank to
    claim the tag (a symlink `.jobs/<tag>` to `candidate`, made atomically) names the run, the others read
    the claim. A claim older than CLAIM_KEPT_S is an earlier job's: the next one (`.jobs/<tag>.1`, ...) is
    made, or read. Where the root cannot hold a claim, `candidate` (the rank names the run by itself)."""
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        _real_dir(root / CLAIMS)
        for attempt in range(1000):
            link = root / CLAIMS / (tag + (f".{attempt}" if attempt else ""))
            with contextlib.suppress(FileExistsError):
                os.symlink(candidate, link)
                return candidate
            with contextlib.suppress(FileNotFoundError):  # (removed meanwhile: the next one is read)
                if time.time() - os.lstat(link).st_mtime < CLAIM_KEPT_S:
                    return os.readlink(link)
    return candidate


def sanitize_run_id(run_id: str) -> str:
    clean = _UNSAFE.sub("_", run_id).strip("._")
    if not clean:
        raise ValueError(f"distvlog: run id {run_id!r} has no usable characters")
    return clean


def _real_dir(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (symlinks are not followed)", str(path))


def _meta_of(path: Path) -> dict | None:
    """The meta record of a rank file, None if it has none or cannot be read. Only a regular file is read:
    never through a symlink, never a FIFO (opening one for reading would block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        try:
            return meta_of_head(os.read(fd, 4096)) if stat.S_ISREG(os.fstat(fd).st_mode) else None
        finally:
            os.close(fd)
    except OSError:
        return None


def _written_by_an_ancestor(path: Path) -> bool:
    """Whether the process that created `path` (per its header) started this one: this process is its
    helper, of the same job."""
    meta = _meta_of(path)
    return meta is not None and meta.get("pid") in _job.ancestors()


def _world_size_of(run_dir: Path) -> int:
    """How many ranks the run in `run_dir` had, from its rank 0's header (1 when it cannot tell)."""
    for suffix in SUFFIXES.values():
        meta = _meta_of(run_dir / f"{rank_file_stem(0)}{suffix}")
        if meta is not None:
            return int(meta.get("world_size") or 1)
    return 1


EARLIER_RUNS = 3  # how many of the log root's other runs a new rank file looks back at


def earlier_rank_files(root: Path, run_id: str, rank: int, world_size: int) -> list[Path]:
    """The rank files of the latest EARLIER_RUNS other runs under `root` (by when their directories last
    changed) that rank `rank` of `world_size` looks after as its job starts (see `writer_gone`). Rank R takes
    the files of ranks R, R + world_size, ...: a new job's ranks share the work, never on one file."""
    runs = []
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):  # (a run removed meanwhile)
                if entry.name not in (run_id, CLAIMS) and entry.is_dir(follow_symlinks=False):  # (not `latest`)
                    runs.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.path))
    files = []
    for _, run in heapq.nlargest(EARLIER_RUNS, runs):
        with contextlib.suppress(OSError), os.scandir(run) as entries:
            for entry in entries:
                name = RANK_FILE_NAME.fullmatch(entry.name)
                if name and int(name.group(1)) % world_size == rank and entry.is_file(follow_symlinks=False):
                    files.append(Path(entry.path))
    return files


def writer_gone(path: Path, host: str) -> bool:
    """Whether the process that wrote `path` is gone for sure: its header names `host` (this one), and no
    process with its pid holds the file (none has that pid, or another program has it now). Unsure (another
    host, no header, a process this one may not look into) is not gone: a live writer's file is never cut.
    (The trim itself also finds a live writer by its flock.)"""
    meta = _meta_of(path)
    pid = meta.get("pid") if meta is not None and meta.get("host") == host else None
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process
        return False
    try:
        return not _holds(pid, os.stat(path, follow_symlinks=False))
    except OSError:
        return False


def _holds(pid: int, file: os.stat_result) -> bool:
    """Whether process `pid` has `file` open or mapped (raises OSError when that cannot be seen)."""
    with os.scandir(f"/proc/{pid}/fd") as fds:
        for fd in fds:
            with contextlib.suppress(OSError):  # (closed meanwhile)
                held = os.stat(fd.path)
                if (held.st_dev, held.st_ino) == (file.st_dev, file.st_ino):
                    return True
    with open(f"/proc/{pid}/maps", "rb") as maps:  # (a mapping outlives its descriptor)
        inode = str(file.st_ino).encode()
        return any(line.split()[4:5] == [inode] for line in maps)


def create_rank_file(root: Path, run_id: str, stem: str, suffix: str, pid: int) -> tuple[int, Path, str]:
    """Create `root/<run id>/<stem><suffix>` exclusively; returns (fd, path, the run id actually used).

    A name held by the process that started this one (a helper spawned by a rank inherits its rank and run
    id) gives this process `<stem>.<pid><suffix>` in that run; a name held by anyone else (a finished job,
    or another job running with the same run id) moves the rank on to the next run id.
    """
    root.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        rid = run_id if attempt == 0 else f"{run_id}.{attempt}"
        _real_dir(root / rid)
        names = [stem + suffix]
        if _written_by_an_ancestor(root / rid / names[0]):
            names.append(f"{stem}.{pid}{suffix}")
        for name in names:
            path = root / rid / name
            try:
                return os.open(path, CREATE_FLAGS, 0o644), path, rid
            except FileExistsError:
                continue
    raise OSError(f"could not create {stem}{suffix} under {root}/{run_id}.*: 1000 runs use that id")


def point_latest(root: Path, run_id: str, world_size: int) -> Path | None:
    """Atomically point `root/latest` at the run (a no-op when `latest` is not ours to replace). A single
    process that no launcher started (a script tried alone) leaves a `latest` that points at a job of several
    ranks, whose logs are what the tools are asked about: it returns that run, for the process to say so."""
    link = root / "latest"
    if link.exists() and not link.is_symlink():
        return None
    if world_size == 1 and not os.environ.get("DISTVLOG_RUN_ID") and link.is_dir() and _world_size_of(link) > 1:
        return link.resolve()
    tmp = root / f".latest.{os.getpid()}"
    try:
        os.symlink(run_id, tmp)
        os.replace(tmp, link)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
