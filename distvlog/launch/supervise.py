"""`python -m distvlog.launch.supervise script.py [args]`: the parent of a rank's process under `distvlog
launch`. It starts the rank (`python -m distvlog.launch.run script.py [args]`), waits for it and, when the rank
died badly, appends how to the rank's file (the format's DIED record) — what no process can write about its
own os._exit(), segfault or SIGKILL. It then ends as the rank did (same status, same signal), so the MPI
launcher sees the rank's own end.

The rank's faulthandler writes into a pipe this process reads: a crash's Python stacks (every thread) become
the DIED record's continuation lines. The rank dies with this process (PR_SET_PDEATHSIG), and the signals
that stop a job (SIGTERM, SIGINT) are passed on to it, after DUMP_SIGNAL: the rank's faulthandler prints
every thread's stack at once, without the interpreter lock, and this process appends them as a record (the
format's STACKS), so a stopped job says where each rank was even when a rank's main thread holds the lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from .. import format as fmt
from ..logger import IDENTITY, SINK, append_record, trim_reserve

CRASH_FD = "DISTVLOG_CRASH_FD"  # set in the rank's environment: where its faulthandler writes
DUMP_SIGNAL = signal.SIGRTMIN + 7  # the rank's faulthandler prints every thread's stack (a signal nobody uses)
_QUIET_S = 0.2  # a stack dump is over when its pipe stays quiet this long
_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGTERM, signal.SIGINT)


def _rank_preexec() -> None:
    """In the rank, before exec: a process group of its own, so that a signal the MPI launcher sends to our
    group reaches it once, through this parent (twice, the second would end its hold at once: see the
    logger's SIGTERM handler); and SIGKILL when this parent dies (a launcher's SIGKILL reaches both)."""
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run(argv: list[str]) -> int:
    """Run `python -m distvlog.launch.run ARGV` as the rank; its exit status (128+N after signal N)."""
    SINK.discard()  # this process's own records (its failures) are no rank's: never a file in the run
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    rank = subprocess.Popen(
        [sys.executable, "-m", "distvlog.launch.run", *argv],
        env={**os.environ, CRASH_FD: str(write_end)},
        close_fds=False,  # the launcher's own descriptors (Hydra's PMI_FD) are the rank's
        preexec_fn=_rank_preexec,
    )
    os.close(write_end)
    pipe = _Pipe(read_end, rank.pid)
    for signum in _FORWARDED:
        signal.signal(signum, lambda signum, _frame: pipe.stop(rank, signum))
    reader = threading.Thread(target=pipe.read_all, daemon=True)
    reader.start()
    returncode = rank.wait()
    reader.join(timeout=1.0)  # (a forked child of the rank may hold the pipe open: its text is not needed)
    status = 128 - returncode if returncode < 0 else returncode
    path = _rank_file(rank.pid)  # (none if it never logged)
    if path is not None:
        trim_reserve(path)  # a rank that died without settling its file (os._exit, a signal) left its reserve
        if status:
            _record_death(path, status, -returncode if returncode < 0 else None, pipe.take())
    if returncode < 0:  # end as the rank did, so the launcher reports the same signal
        with contextlib.suppress(OSError, ValueError):  # (SIGKILL's cannot be set, nor caught)
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    return status


class _Pipe:
    """What the rank's faulthandler writes: the stacks asked for by a signal become a STACKS record once the
    pipe goes quiet; anything else (a crash's stacks) is kept for the DIED record."""

    def __init__(self, fd: int, pid: int) -> None:
        self.fd, self.pid = fd, pid
        self.text = bytearray()
        self.asked: str | None = None  # the signal whose stacks are on their way
        self.dumped = False  # (once: a second signal only passes on)

    def stop(self, rank: subprocess.Popen, signum: int) -> None:
        if not self.dumped:
            self.dumped, self.asked = True, signal.Signals(signum).name
            with contextlib.suppress(OSError):
                rank.send_signal(DUMP_SIGNAL)
        rank.send_signal(signum)

    def read_all(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                ready, _, _ = select.select([self.fd], [], [], _QUIET_S if self.text and self.asked else None)
                if not ready:  # the asked-for dump is complete
                    _record_stacks(self.pid, self.asked, self.take())
                    self.asked = None
                    continue
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    break
                self.text += chunk
        os.close(self.fd)

    def take(self) -> str:
        text, self.text = self.text.decode("utf-8", "replace").strip("\n"), bytearray()
        return text


def _record_stacks(pid: int, name: str, stacks: str) -> None:
    path = _rank_file(pid)
    if path is not None:
        with contextlib.suppress(OSError):
            append_record(path, "warning", f"{name}{fmt.STACKS}\n{stacks}")


def _record_death(path: Path, status: int, signum: int | None, stacks: str) -> None:
    """The DIED record, in the rank's file."""
    fields = {fmt.DIED_STATUS: status, fmt.DIED_PARENT: os.getpid()}
    if signum is not None:
        name = signal.Signals(signum).name
        how, fields = f"killed by {name} (status {status})", {**fields, fmt.DIED_SIGNAL: name}
    else:
        how = f"exited with status {status}"
    with contextlib.suppress(OSError):
        append_record(path, "critical", f"{fmt.DIED}: {how}" + (f"\n{stacks}" if stacks else ""), **fields)


def _rank_file(pid: int) -> Path | None:
    run_dir = Path(os.environ.get("DISTVLOG_LOG_DIR", "")) / os.environ.get("DISTVLOG_RUN_ID", "")
    for suffix in fmt.SUFFIXES.values():
        path = run_dir / f"{fmt.rank_file_stem(IDENTITY.rank)}{suffix}"
        try:  # (never through a symlink, never blocking on a FIFO)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            meta = fmt.meta_of_head(os.read(fd, 4096))
        except OSError:
            meta = None
        finally:
            os.close(fd)
        if meta is not None and meta.get("pid") == pid:
            return path
    return None


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m distvlog.launch.supervise script.py [args]")
    sys.exit(run(sys.argv[1:]))
