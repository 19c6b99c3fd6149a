"""Stopping a hung `distvlog launch`: Ctrl-C typed in its terminal (once: the ranks say where they were; twice:
killed), `--timeout` and `--idle-timeout`. Real ranks, a real terminal (a pty), real signals."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
from launch_testkit import HANG_TIMEOUT_S, TRAIN, job_env

from distvlog.logger import content_size

pytestmark = pytest.mark.timeout(300)

HUNG = """
import distvlog as dv
from mpi4py import MPI

dv.init()
dv.get_logger("job").info("before the hang")
if dv.get_rank() == 1:
    MPI.COMM_WORLD.recv(source=0)  # @recv: blocked in C, as rank 0 is
MPI.COMM_WORLD.Barrier()  # @barrier
"""

HOLDING_THE_LOCK = """
import ctypes
import distvlog as dv

dv.get_logger("job").info("started")
mutex = ctypes.create_string_buffer(64)  # a relocked default pthread mutex deadlocks, holding the interpreter lock:
libc = ctypes.PyDLL(None)  # no signal handler, no watcher thread, no SIGTERM ends this rank
libc.pthread_mutex_lock(mutex)
libc.pthread_mutex_lock(mutex)  # @held
"""


def _line(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if marker in line)


def _take_terminal() -> None:
    """In the child (a new session's leader): the pty on its stdin becomes its controlling terminal, with
    the child's process group in the foreground, as a shell runs a command."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """`distvlog ARGS` in a terminal of its own: a Ctrl-C typed there (ETX on the pty) is the kernel's
    SIGINT to the terminal's foreground process group, as in an interactive shell."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "distvlog", *args],
            env=job_env(tmp_path, None),
            cwd=tmp_path,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        self.master, self.screen = master, bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every process holding the terminal has ended
                return
            if not chunk:
                return
            self.screen += chunk

    def text(self) -> str:
        return self.screen.decode(errors="replace").replace("\r\n", "\n")

    def type_ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def wait_for(self, pattern: str) -> None:
        deadline = time.monotonic() + HANG_TIMEOUT_S
        while not re.search(pattern, self.text()) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert re.search(pattern, self.text()), self.text()

    def end(self) -> tuple[int, str]:
        """The exit status once the command ended, and all it printed."""
        try:
            code = self.proc.wait(timeout=HANG_TIMEOUT_S)
        finally:
            self.proc.kill()
        self.reader.join(timeout=10)
        os.close(self.master)
        return code, self.text()


def _wait_until_stuck(logs: Path, ranks: int) -> None:
    """Until every rank's file exists and none has grown for 1.5 s (a rank slowed by load still logs)."""
    deadline, before, quiet = time.monotonic() + HANG_TIMEOUT_S, None, 0
    while quiet < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
        files = sorted(logs.glob("*-launch*/rank-*.log"))
        now = tuple(content_size(p) for p in files) if len(files) == ranks else None
        quiet, before = (quiet + 1 if now is not None and now == before else 0), now


def test_ctrl_c_in_the_terminal_stops_a_hung_job_and_says_where_each_rank_was(tmp_path):
    """Rank 2 skips an allreduce: ranks 0,1,3 wait in it, rank 2 in the next one, all blocked in C, where no
    KeyboardInterrupt can reach them. One Ctrl-C: each rank logs where SIGINT found it, those still blocked
    get SIGTERM a few seconds later and end, and the report names the places once; exit status 130."""
    train = Path(TRAIN).read_text()
    term = Terminal(
        tmp_path, "launch", "-n", "4", TRAIN, "--data", "synthetic", "--steps", "8",
        "--inject-skip-allreduce-rank", "2", "--inject-skip-allreduce-step", "4",
    )  # fmt: skip
    term.wait_for(r"step +3 ")
    _wait_until_stuck(tmp_path / "logs", 4)
    term.type_ctrl_c()
    code, screen = term.end()
    assert code == 130, screen
    assert screen.count("distvlog launch: SIGINT: stopping the ranks") == 1, screen
    at_backward, at_loss = _line(train, "loss.backward(retain_graph"), _line(train, "mean_loss = MPI.COMM_WORLD")
    assert re.search(rf"distvlog launch: ranks 0,1,3 failed: .*blocked in C.*\(train\.py:{at_backward}\)\n", screen)
    assert re.search(rf"distvlog launch: rank 2 failed: .*blocked in C.*\(train\.py:{at_loss}\)\n", screen), screen
    assert "killed by a signal or" not in screen, screen
    run_dir = next((tmp_path / "logs").glob("*-launch*"))
    for rank in range(4):
        log = (run_dir / f"rank-{rank}.log").read_text()
        assert re.search(r"^W\S+ \S+ \d+ train\.py:\d+\] \[rank \d\] SIGINT arrived while the main thread was blocked in C", log, re.M), log  # fmt: skip


def test_a_second_ctrl_c_kills_a_job_that_the_first_did_not_end(tmp_path):
    """A rank that holds the interpreter lock in C outlives SIGINT and SIGTERM: the second Ctrl-C kills the
    job, the rank included; the report still says where the first found it."""
    script = tmp_path / "held.py"
    script.write_text(HOLDING_THE_LOCK)
    term = Terminal(tmp_path, "launch", "-n", "1", str(script))
    _wait_until_stuck(tmp_path / "logs", 1)
    term.type_ctrl_c()
    rank0 = next((tmp_path / "logs").glob("*-launch*/rank-0.log"))
    deadline = time.monotonic() + HANG_TIMEOUT_S  # until its parent has logged every thread's stack
    while "SIGINT arrived; the Python stack" not in rank0.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    term.type_ctrl_c()
    code, screen = term.end()
    assert code == 130 and "distvlog launch: SIGINT while the job stops: killing it" in screen, screen
    assert f"rank 0: SIGINT found its main thread at held.py:{_line(HOLDING_THE_LOCK, '@held')}" in screen, screen
    pid = int(re.search(r'"pid":(\d+)', rank0.read_text())[1])
    deadline = time.monotonic() + HANG_TIMEOUT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), f"rank 0 (pid {pid}) outlived the job"


@pytest.mark.parametrize(
    "option, value, said",
    [("--timeout", "8", "--timeout 8 s passed"), ("--idle-timeout", "2", "no rank wrote for 2 s (--idle-timeout)")],
)
def test_a_timeout_stops_a_hung_job_and_says_where_each_rank_was(run_cli, tmp_path, option, value, said):
    """From a script or CI, no signal needed: the job is stopped as a SIGTERM stops it, exit status 124."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    proc = run_cli("launch", option, value, "-n", "2", str(script))
    assert proc.returncode == 124, proc.stderr
    assert f"distvlog launch: {said}: stopping the ranks, then merging their logs\n" in proc.stderr
    for rank, marker in ((0, "@barrier"), (1, "@recv")):
        assert re.search(rf"rank {rank} failed: .*blocked in C.*\(hung\.py:{_line(HUNG, marker)}\)\n", proc.stderr)


def test_a_timeout_must_be_a_positive_number_of_seconds(run_cli):
    proc = run_cli("launch", "--idle-timeout", "0", "-n", "2", TRAIN)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "distvlog launch: error: argument --idle-timeout: '0': expected a positive number of seconds"
    )
