"""Stopping a running job: Ctrl-C or another signal to `distvlog launch`, `--timeout`, `--idle-timeout`.

The MPI launcher runs in a session of its own (`LAUNCHER_SESSION`), so a Ctrl-C typed in the terminal, or a
signal to our process group (`timeout`, a CI runner), reaches this process alone and the job gets it once:
Hydra takes a second SIGINT for "force abort" and kills every rank before it can say where it was.

The first stop asks the ranks to end where they are, each saying where that was (see `supervise` and the
logger's signal watcher): a SIGINT reaches them as SIGINT, so a script's own KeyboardInterrupt handling runs;
ranks still running INTERRUPT_GRACE_S later get SIGTERM, which ends a rank blocked in C too (a hung
collective, which never returns to Python to raise KeyboardInterrupt). SIGTERM, SIGHUP (the terminal closed)
and the timeouts send SIGTERM at once. A second signal kills the launcher.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import format as fmt
from ..logger import env_seconds

INTERRUPT_GRACE_S = 5.0  # a rank running Python has aborted the job on its KeyboardInterrupt well within this
TIMEOUT_STATUS = 124  # the exit status of a job our timeout stopped, as `timeout` exits
_POLL_S = 0.25
_PEEK_BYTES = 4096  # read past a rank file's last known content end, to see whether it grew
_CATCH_UP_BYTES = 1 << 16  # then read on in larger bites, to the new content end
_LOOK_S = 1.0  # how often the rank files are looked at for --idle-timeout
_PR_SET_PDEATHSIG = 1
_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _launcher_preexec() -> None:
    """In the MPI launcher, before exec: a session of its own (its stdin, a terminal included, stays its own to
    forward to rank 0), and SIGTERM when `distvlog launch` dies (the job then stops as for a SIGTERM)."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


LAUNCHER_SESSION = {"preexec_fn": _launcher_preexec}  # Popen's keywords for the MPI launcher


class Stopper:
    """While the job runs (`with Stopper(...)`): our handlers of the stopping signals, and a thread that ends
    the job on a timeout and escalates a SIGINT the ranks did not end on. `status` afterwards: None if
    nothing stopped the job, else the exit status its stop calls for (130 for Ctrl-C, 124 for a timeout)."""

    def __init__(
        self, proc: subprocess.Popen, run_dir: Path, timeout_s: float | None = None, idle_s: float | None = None
    ) -> None:
        self.proc, self.timeout_s, self.idle_s = proc, timeout_s, idle_s
        self.status: int | None = None
        self._writes = _Writes(run_dir)
        self._escalate_at: float | None = None
        self._lock = threading.Lock()
        self._previous: dict[int, object] = {}
        self._done = threading.Event()

    def __enter__(self) -> Stopper:
        for signum in _STOPPING:  # a signal ignored by whoever started us (`nohup`, `cmd &`) stays ignored
            if signal.getsignal(signum) != signal.SIG_IGN:
                self._previous[signum] = signal.signal(signum, self._signalled)
        threading.Thread(target=self._watch, name="distvlog-launch-stop", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _signalled(self, signum: int, _frame: object) -> None:
        if self.status is not None:
            _say(f"{signal.Signals(signum).name} while the job stops: killing it")
            self.proc.kill()
            return
        if signum == signal.SIGINT:
            self._stop(
                signum,
                128 + signum,
                f"SIGINT: stopping the ranks (SIGTERM to any still running "
                f"{INTERRUPT_GRACE_S:g} s later), then merging their logs; Ctrl-C again kills them",
            )
            self._escalate_at = time.monotonic() + INTERRUPT_GRACE_S
        else:
            name = signal.Signals(signum).name
            self._stop(
                signal.SIGTERM,
                128 + signum,
                f"{name}: stopping the ranks, then merging their logs ({name} again kills them)",
            )

    def stop(self, status: int) -> None:
        """Stop the job as a timeout does, for a reason its caller has said (`launch --watch`'s verdict), the
        exit status `status`."""
        self._stop(signal.SIGTERM, status, None)

    def _stop(self, signum: int, status: int, text: str | None) -> None:
        with self._lock:
            if self.status is not None:
                return
            self.status = status
        if text:
            _say(text)
        self._send(signum)

    def _send(self, signum: int) -> None:
        with contextlib.suppress(OSError):  # (the job may have ended meanwhile)
            self.proc.send_signal(signum)

    def _watch(self) -> None:
        started = time.monotonic()
        while not self._done.wait(_POLL_S) and self.proc.poll() is None:
            now = time.monotonic()
            if self._escalate_at is not None and now >= self._escalate_at:
                self._escalate_at = None
                _say(f"ranks still running {INTERRUPT_GRACE_S:g} s after SIGINT (blocked in C?): SIGTERM")
                self._send(signal.SIGTERM)
            if self.status is not None:
                continue
            if self.timeout_s is not None and now - started >= self.timeout_s:
                self._stop(
                    signal.SIGTERM,
                    TIMEOUT_STATUS,
                    f"--timeout {self.timeout_s:g} s passed: stopping the ranks, then merging their logs",
                )
            elif self.idle_s is not None and now - self._writes.last_news(now) >= self.idle_s:
                self._stop(
                    signal.SIGTERM,
                    TIMEOUT_STATUS,
                    f"no rank wrote for {self.idle_s:g} s "
                    "(--idle-timeout): stopping the ranks, then merging their logs",
                )


class _Writes:
    """When a rank last wrote to its file in the run directory. A rank's file is mapped: its size includes
    a reserve of NUL bytes that records overwrite, so what grows is the content before them. Each look
    reads a page past the content end last seen, not the whole reserve, and each byte written once."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.ends: dict[str, tuple[int, int]] = {}  # file name -> (size, content end)
        self.news: float | None = None
        self.looked = -_LOOK_S

    def last_news(self, now: float) -> float:
        """When a rank last wrote; `now` until one has (a job's start-up is not idleness: --timeout is for
        a job that hangs before it logs)."""
        if now - self.looked >= _LOOK_S:
            self.looked = now
            if self._grew():
                self.news = now
        return now if self.news is None else self.news

    def _grew(self) -> bool:
        grew = False
        with contextlib.suppress(OSError), os.scandir(self.run_dir) as entries:
            for entry in entries:
                if fmt.RANK_FILE_NAME.fullmatch(entry.name):
                    grew = self._look(entry.path, entry.name) or grew
        return grew

    def _look(self, path: str, name: str) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            size = os.fstat(fd).st_size
            known = self.ends.get(name)
            end = min(known[1], size) if known is not None else 0
            bite = _PEEK_BYTES
            while end < size and (chunk := os.pread(fd, bite, end).rstrip(b"\0")):
                end, bite = end + len(chunk), _CATCH_UP_BYTES
        except OSError:
            return False
        finally:
            os.close(fd)
        self.ends[name] = (size, end)
        return known != (size, end)


def seconds_argument(text: str) -> float:
    """`--timeout S`: a positive, finite number of seconds."""
    try:
        return env_seconds(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of seconds") from None


def _say(text: str) -> None:
    print(f"distvlog launch: {text}", file=sys.stderr, flush=True)
