"""`distvlog launch` end to end: real ranks, the example training script, a failing rank, bad input."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_testkit import TRAIN, losses, run_dir_of

pytestmark = pytest.mark.timeout(300)

FAILING = """
import time
import distvlog as dv
from mpi4py import MPI

dv.init()
log = dv.get_logger("job")
log.info("started")
if dv.get_rank() == 1:
    time.sleep(0.2)
    raise ValueError("boom on rank 1")
log.info("waiting for rank 1")
MPI.COMM_WORLD.Barrier()
"""


def test_train_on_four_ranks(run_cli):
    proc = run_cli("launch", "-n", "4", TRAIN, "--steps", "12")
    assert proc.returncode == 0, proc.stderr
    found = losses(proc.stdout)
    assert len(found) == 12 and found[-1] < found[0] * 0.8, proc.stdout
    assert re.search(r"parameters bit-identical on all 4 ranks: digest [0-9a-f]{32}", proc.stdout)
    run_dir = run_dir_of(proc)
    assert sorted(p.name for p in run_dir.glob("rank-*")) == [f"rank-{r}.log" for r in range(4)]
    timeline = (run_dir / "timeline.log").read_text()
    assert f"distvlog launch: timeline: {run_dir}/timeline.log" in proc.stderr
    assert all(f"] [rank {r}] allreduce end v=1 step=11 bucket=0" in timeline for r in range(4))
    rank2 = (run_dir / "rank-2.log").read_text()
    assert re.search(r"allreduce begin v=1 step=11 bucket=0 bytes=\d+", rank2)
    assert "grad_stats node=linear" in rank2  # the guarded layer logs at level 5


def test_train_on_two_ranks_with_sgd_and_overlap(run_cli):
    proc = run_cli("launch", "-n", "2", TRAIN, "--steps", "8", "--optimizer", "sgd", "--overlap", "--guard-level", "0")
    assert proc.returncode == 0, proc.stderr
    assert "parameters bit-identical on all 2 ranks" in proc.stdout
    assert "grad_stats" not in (run_dir_of(proc) / "rank-0.log").read_text()


def test_a_failing_rank_aborts_the_job_and_is_named(run_cli, tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAILING)
    proc = run_cli("launch", "-n", "4", str(script))
    assert proc.returncode != 0
    assert "distvlog launch: rank 1 failed: ValueError: boom on rank 1 (fail.py:11)" in proc.stderr
    run_dir = run_dir_of(proc)
    assert re.search(r"^(\w)\S+ .*Unhandled exception", (run_dir / "rank-1.log").read_text(), re.M).group(1) == "F"
    timeline = (run_dir / "timeline.log").read_text()
    for rank in (0, 2, 3):  # killed while waiting for rank 1, their records are on disk and merged all the same
        assert "waiting for rank 1" in (run_dir / f"rank-{rank}.log").read_text()
        assert f"[rank {rank}] waiting for rank 1" in timeline


EXITING = """
import sys
import distvlog as dv
from mpi4py import MPI

dv.init()
if dv.get_rank() == 1:
    {exit}
MPI.COMM_WORLD.Barrier()
"""


@pytest.mark.parametrize(
    "call, reason",
    [
        ("sys.exit('rank 1: config file missing')", "exited with status 1: rank 1: config file missing"),
        ("sys.exit(3)", "exited with status 3"),
    ],
)
def test_a_rank_that_exits_non_zero_is_named_with_its_reason(run_cli, tmp_path, call, reason):
    script = tmp_path / "exits.py"
    script.write_text(EXITING.format(exit=call))
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode != 0
    assert f"distvlog launch: rank 1 failed: {reason} (exits.py:8)" in proc.stderr
    assert "no rank logged" not in proc.stderr
    assert re.search(
        rf"^F\S+ \S+ \d+ exits.py:8\] \[rank 1\] {re.escape(reason)}$",
        (run_dir_of(proc) / "rank-1.log").read_text(),
        re.M,
    )


def test_a_script_that_never_logs_keeps_its_exit_code(run_cli, tmp_path):
    script = tmp_path / "quiet.py"
    script.write_text("print('hello from a rank')\n")
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("hello from a rank") == 2
    assert "no rank wrote a log file" in proc.stderr and "nothing to merge" in proc.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["-n", "2", "no_such_script.py"], "script no_such_script.py: no such file"),
        (["-n", "0", TRAIN], "-n 0: need at least one rank"),
        (["-n", "2", "--mpirun", "no-such-mpirun", TRAIN], "--mpirun no-such-mpirun: not found"),
        (["-n", "2", "--hostfile", "no_such_hosts", TRAIN], "--hostfile no_such_hosts: no such file"),
        (["-n", "2", "/"], "script /: a directory"),
        (["-n", "2", "--log-dir", TRAIN, TRAIN], f"--log-dir {TRAIN}: not a directory"),  # checked before the job
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_cli, args, message):
    proc = run_cli("launch", *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"distvlog launch: error: {message}"), proc.stderr


HUNG = """
import distvlog as dv
from mpi4py import MPI

dv.init()
dv.get_logger("job").info("before the hang")
print("ready", flush=True)
if dv.get_rank() == 1:
    MPI.COMM_WORLD.recv(source=0)  # @recv: blocked in C, as rank 0 is
MPI.COMM_WORLD.Barrier()  # @barrier
"""


def _line(code: str, marker: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), start=1) if marker in line)


def test_a_hung_job_stopped_by_sigterm_keeps_its_logs_and_says_where_ranks_were(start_cli, tmp_path):
    """Ranks blocked in MPI never return to Python, where signal handlers run: a watcher thread flushes and
    logs where its rank is at once and, after a grace period, ends it. A SIGTERM to `distvlog launch`
    (timeout, a scheduler) reaches the ranks through the launcher, and the run is merged all the same."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    proc = start_cli("launch", "-n", "2", str(script), env={"DISTVLOG_FLUSH_INTERVAL": "3600"})  # no timer flush
    assert [proc.stdout.readline() for _ in range(2)] == ["ready\n"] * 2
    time.sleep(0.5)  # (not a speed limit: lets both ranks enter their MPI calls)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    run_dir = run_dir_of(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    timeline = (run_dir / "timeline.log").read_text()
    assert "[rank 0] before the hang" in timeline and "[rank 1] before the hang" in timeline

    def located(severity: str, message: str) -> dict[int, int]:
        pattern = rf"^{severity}\S+ \S+ \d+ hung\.py:(\d+)\] \[rank (\d+)\] {message}"
        return {int(rank): int(line) for line, rank in re.findall(pattern, timeline, re.M)}

    at = located("W", "SIGTERM arrived while the main thread was blocked in C")  # each rank, at once
    assert at == {0: _line(HUNG, "@barrier"), 1: _line(HUNG, "@recv")}, timeline
    ended = located("F", "SIGTERM: the main thread did not return")  # the first to end has the other killed
    assert ended and ended.items() <= at.items(), timeline
    assert re.search(r"rank [01] failed: SIGTERM: the main thread did not return to Python within \d+ s", err), err


KILLED = """
import os, signal
import numpy as np
import distvlog as dv

dv.init()
model = dv.DataParallel(dv.nn.Linear(4, 2))
log = dv.get_logger("job")
x = dv.to_tensor(np.ones((3, 4), "float32"))
for step in range(3):
    if step == 2 and dv.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as a segfault or the OOM killer would
    log.info("before backward", step=step)
    model(x).sum().backward()  # rank 0 waits in the allreduce of step 2 for a rank that is gone
"""


def test_the_records_of_ranks_killed_while_waiting_for_a_dead_rank_are_on_disk(run_cli, tmp_path):
    """The launcher kills the ranks left waiting with SIGKILL, which no handler sees: the engine flushes
    before DataParallel's wait, so everything they logged up to it is in their files."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    proc = run_cli("launch", "-n", "2", str(script), env={"DISTVLOG_FLUSH_INTERVAL": "3600"})  # no timer flush
    assert proc.returncode != 0
    assert "before backward step=2" in (run_dir_of(proc) / "rank-0.log").read_text()


# -- when ranks end badly: a rank failing after the others finished without MPI, a hung job stopped by
# SIGTERM or SIGINT, a rank killed by a signal, a script choosing its own run id, train.py refusing bad values
def _found(text: str, *phrases: str) -> list[str]:
    """Which of `phrases` occur in `text` (pytest's explanation of a failed `not in` diffs long texts slowly)."""
    return [phrase for phrase in phrases if phrase in text]


def _meta_pid(log: str) -> int:
    return int(re.search(r'"pid":(\d+)', log).group(1))


# Rank 1 fails only once rank 0 is done: rank 0 never initialised MPI, so rank 1's MPI_Init, which an abort
# through MPI needs, would wait for it forever.
AFTER_RANK_0 = """
import os, sys, time
{prologue}
if os.environ["PMI_RANK"] == "0":
    open(sys.argv[1], "w").close()  # rank 0 is done
    sys.exit()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
{failure}  # @fail
"""
LAZY_LOGGING = 'import distvlog as dv\ndv.get_logger("job").info("started")'


@pytest.mark.parametrize(
    "prologue, failure, rc, reason",
    [
        ("", "sys.exit(3)", 3, "exited with status 3"),  # no distvlog, no MPI in the script
        (LAZY_LOGGING, "raise ValueError('late boom on rank 1')", 1, "ValueError: late boom on rank 1"),
    ],
    ids=["plain-exit", "lazy-logging-raise"],
)
def test_a_rank_failing_after_the_others_ended_without_mpi_ends_the_job(
    run_cli, tmp_path, prologue, failure, rc, reason
):
    script = tmp_path / "late.py"
    code = AFTER_RANK_0.format(prologue=prologue, failure=failure)
    script.write_text(code)
    proc = run_cli("launch", "-n", "2", str(script), str(tmp_path / "rank0-done"))
    assert proc.returncode == rc, proc.stderr
    assert f"distvlog launch: rank 1 failed: {reason} (late.py:{_line(code, '@fail')})" in proc.stderr


BEFORE_RANK_0 = """
import os, sys
import distvlog as dv
if os.environ["PMI_RANK"] == "1":
    raise ValueError("no data on rank 1")  # @raise
dv.init()  # MPI_Init: waits for rank 1, which never comes
print("rank 0 initialised", flush=True)
"""


def test_a_rank_failing_before_mpi_ends_the_ranks_waiting_in_mpi_init(run_cli, tmp_path):
    """The other way round: rank 1 fails without MPI while rank 0 waits for it in MPI_Init. Rank 1 cannot
    abort through MPI without initialising it, and exiting would leave rank 0 waiting: it aborts the job
    through the launcher."""
    script = tmp_path / "early.py"
    script.write_text(BEFORE_RANK_0)
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode != 0 and not _found(proc.stdout, "rank 0 initialised")
    assert (
        f"distvlog launch: rank 1 failed: ValueError: no data on rank 1 (early.py:{_line(BEFORE_RANK_0, '@raise')})"
        in proc.stderr
    )


HUNG_IN_PYTHON = """
import sys
from pathlib import Path
import numpy as np
import distvlog as dv

dv.init()
model = dv.DataParallel(dv.nn.Linear(4, 2))
x = dv.to_tensor(np.ones((3, 4), "float32"))
for step in range(3):
    dv.get_logger("job").info("step", step=step)
    if step == 1:
        (Path(sys.argv[1]) / f"ready-{dv.get_rank()}").touch()  # (two ranks' prints may interleave)
        if dv.get_rank() == 1:
            while True: sum(range(1000))  # @loop: rank 1 never reaches the allreduce (one line: one place)
    model(x).sum().backward()  # @allreduce: rank 0 waits in it for rank 1
"""


def _signal_once_ready(
    start_cli, tmp_path: Path, name: str, code: str, signum: int, settle_s: float = 0.0
) -> tuple[subprocess.Popen, str]:
    """`distvlog launch -n 2` of `code`, signalled once both ranks touched their ready file (and `settle_s`
    later); the launch process and its stderr once it ended."""
    script = tmp_path / name
    script.write_text(code)
    proc = start_cli("launch", "-n", "2", str(script), str(tmp_path))
    try:
        while proc.poll() is None and len(list(tmp_path.glob("ready-*"))) < 2:
            time.sleep(0.05)
        time.sleep(settle_s)
    finally:
        proc.send_signal(signum)  # (also if the wait fails: its ranks must not outlive the test)
    _, err = proc.communicate(timeout=120)
    return proc, err


def test_sigterm_to_a_job_hung_in_python_and_in_c_says_where_each_rank_was(start_cli, tmp_path):
    """Rank 1 runs Python, so SIGTERM's handler runs in it at once and would end it, and the launcher would
    then kill rank 0 before its watcher could log where it was blocked: the handler logs where rank 1 was
    and holds the exit for a moment."""
    proc, err = _signal_once_ready(
        start_cli, tmp_path, "hang.py", HUNG_IN_PYTHON, signal.SIGTERM, settle_s=0.5
    )  # (not a speed limit: lets rank 0 enter the allreduce)
    assert proc.returncode != 0
    assert (
        f"distvlog launch: rank 1: SIGTERM found its main thread running Python at "
        f"hang.py:{_line(HUNG_IN_PYTHON, '@loop')}"
    ) in err
    assert (
        f"distvlog launch: rank 0: SIGTERM found its main thread blocked in C at "
        f"hang.py:{_line(HUNG_IN_PYTHON, '@allreduce')}"
    ) in err
    assert not _found(err, "before its script", "ended before"), err  # both said where they were
    run_dir = run_dir_of(subprocess.CompletedProcess(proc.args, proc.returncode, "", err))
    rank1 = (run_dir / "rank-1.log").read_text()
    assert re.search(
        r"^W\S+ \S+ \d+ hang\.py:\d+\] \[rank 1\] SIGTERM arrived while the main thread was running "
        r"Python, at \(most recent call last\):.*\n(  .*\n)*    while True: sum\(range\(1000\)\)",
        rank1,
        re.M,
    ), rank1


HOLDING_THE_LOCK = """
import ctypes, sys
from pathlib import Path
import distvlog as dv
from mpi4py import MPI

dv.init()
dv.get_logger("job").info("started")
(Path(sys.argv[1]) / f"ready-{dv.get_rank()}").touch()
if dv.get_rank() == 1:  # a C call that keeps the interpreter lock (as mpi4py's lowercase calls do) and that
    mutex = ctypes.create_string_buffer(64)  # no signal ends: a relocked default pthread mutex deadlocks
    libc = ctypes.PyDLL(None)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # @held
MPI.COMM_WORLD.Barrier()  # @barrier
"""


def test_sigterm_to_a_job_says_where_a_rank_holding_the_interpreter_lock_was(start_cli, tmp_path):
    """Rank 1 is blocked in C holding the interpreter lock: neither its handler nor its watcher thread can
    run. Its parent has its faulthandler print every thread's stack (no lock needed) and logs them; the
    report says where its main thread was."""
    proc, err = _signal_once_ready(start_cli, tmp_path, "held.py", HOLDING_THE_LOCK, signal.SIGTERM, settle_s=0.5)
    assert proc.returncode != 0
    assert (
        f"distvlog launch: rank 1: SIGTERM found its main thread at held.py:{_line(HOLDING_THE_LOCK, '@held')} "
        "(every thread's stack is in its log)\n"
    ) in err, err
    run_dir = run_dir_of(subprocess.CompletedProcess(proc.args, proc.returncode, "", err))
    rank1 = (run_dir / "rank-1.log").read_text()
    assert re.search(
        r"^W\S+ \S+ \d+ distvlog:0\] \[rank 1\] SIGTERM arrived; the Python stack of every thread .* \+lines=\d+\n"
        r"(?:.*\n)*?(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):\n"
        rf'  File "{re.escape(str(tmp_path / "held.py"))}", line {_line(HOLDING_THE_LOCK, "@held")} in <module>',
        rank1,
        re.M,
    ), rank1
    assert not _found(err, "ended the job"), err  # the signal that stopped the job blames no one


LOOPING = """
import sys, time
from pathlib import Path
import distvlog as dv

dv.init()
ready = Path(sys.argv[1]) / f"ready-{dv.get_rank()}"
while True: ready.touch(); time.sleep(0.01)  # @sleep (one line: wherever the signal finds the loop, one place)
"""


def test_ctrl_c_to_a_job_names_where_it_found_each_rank_without_tracebacks(start_cli, tmp_path):
    """A SIGINT that did not come from a terminal (kill -INT, a scheduler) is passed on to the ranks: each
    says in one line where the KeyboardInterrupt found it, logs it as a W record, and the job ends with 130."""
    proc, err = _signal_once_ready(start_cli, tmp_path, "loop.py", LOOPING, signal.SIGINT)
    script = tmp_path / "loop.py"
    line = _line(LOOPING, "@sleep")
    assert proc.returncode == 130, err
    for rank in (0, 1):
        assert f"distvlog: rank {rank}: KeyboardInterrupt at loop.py:{line}\n" in err
    assert (
        f"distvlog launch: ranks 0,1: KeyboardInterrupt found its main thread running Python at loop.py:{line}\n" in err
    )
    assert not _found(err, "Traceback", "before its script", "ended before"), err
    run_dir = run_dir_of(subprocess.CompletedProcess(proc.args, proc.returncode, "", err))
    for rank in (0, 1):
        log = (run_dir / f"rank-{rank}.log").read_text()
        record = re.search(
            rf"^W\S+ \S+ \d+ loop\.py:{line}\] \[rank {rank}\] KeyboardInterrupt arrived while the main "
            r"thread was running Python, at \(most recent call last\): \+lines=\d+\n((?:  .*\n)*)",
            log,
            re.M,
        )
        assert record and "    while True: ready.touch(); time.sleep(0.01)  # @sleep" in record.group(1), log
        # the user's frames: the script's first (then the library call the signal found it in, if any), not
        # the runner's, nor those of the signal handler it was raised in
        frames = re.findall(r'File "([^"]+)"', record.group(1))
        assert frames[0] == str(script) and not any("distvlog" in f or "runpy" in f for f in frames), frames


KILLED_LAST = """
import json, os, signal, time
import distvlog as dv
from distvlog.logger._sink import SINK

dv.get_logger("job").info("started")
if dv.get_rank() == 1:
    rank0 = SINK.path.with_name("rank-0" + SINK.path.suffix)
    while not rank0.exists() or '"pid":' not in rank0.read_text():  # (created, then its header written)
        time.sleep(0.01)
    pid = json.loads(rank0.read_text().split('"pid":', 1)[1].split(",", 1)[0])
    while os.path.exists(f"/proc/{pid}"):  # rank 0 has ended
        time.sleep(0.01)
    dv.get_logger("job").info("about to die")
    dv.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
"""


def _ended_by(stderr: str) -> tuple[int, int]:
    """(rank, pid) of the report's `ended the job` line, whose parent pid is the one MPICH's banner names
    (`PID N RUNNING AT host`): the rank's parent is the process the MPI launcher knows."""
    match = re.search(r"launch: rank (\d+) \(pid (\d+); its parent, pid (\d+), in MPI's messages\) ended", stderr)
    assert match, stderr
    banner = re.search(r"PID (\d+) RUNNING AT", stderr)
    assert banner is None or banner.group(1) == match.group(3), stderr
    return int(match.group(1)), int(match.group(2))


@pytest.mark.parametrize("fmt", ["glog", "jsonl"])
def test_a_rank_killed_by_a_signal_is_named_with_its_pid(run_cli, tmp_path, fmt):
    """SIGKILL (the OOM killer's): the rank's parent writes how it died into its file; the report names it,
    and the job's exit code is the rank's, 128+9."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED_LAST)
    proc = run_cli("launch", "-n", "2", str(script), env={"DISTVLOG_FORMAT": fmt})
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    run_dir = run_dir_of(proc)
    suffix = ".log" if fmt == "glog" else ".jsonl"
    pid = _meta_pid((run_dir / f"rank-1{suffix}").read_text())
    assert "ended the job: its process killed by SIGKILL (status 137)\n" in proc.stderr
    assert _ended_by(proc.stderr) == (1, pid)
    launch_lines = "\n".join(line for line in proc.stderr.splitlines() if line.startswith("distvlog launch:"))
    assert not _found(launch_lines, "launch: rank 0", "ranks 0,1"), proc.stderr  # rank 0 ended normally


OS_EXIT = """
import os
import distvlog as dv
from mpi4py import MPI

dv.init()
dv.get_logger("job").info("started")
dv.flush()
if dv.get_rank() == 1:
    os._exit(5)
MPI.COMM_WORLD.Barrier()  # rank 0 waits for rank 1 until the launcher kills it
"""


def test_a_rank_ending_by_os_exit_is_named_with_its_status(run_cli, tmp_path):
    """os._exit(5) runs no handler: the rank's parent sees the status and writes it into the rank's file.
    The report names that rank, not the one the launcher killed after it; the job's exit code is 5."""
    script = tmp_path / "exits.py"
    script.write_text(OS_EXIT)
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode == 5, proc.stderr
    pid = _meta_pid((run_dir_of(proc) / "rank-1.log").read_text())
    assert "ended the job: its process exited with status 5\n" in proc.stderr and _ended_by(proc.stderr) == (1, pid)
    assert not _found(proc.stderr, "launch: rank 0", "ranks 0,1", "ended before"), proc.stderr


SEGFAULT = """
import faulthandler, threading, time
import distvlog as dv
from mpi4py import MPI

dv.init()
dv.get_logger("job").info("started")
threading.Thread(target=time.sleep, args=(3600,), name="idle", daemon=True).start()
if dv.get_rank() == 1:
    faulthandler._sigsegv()  # @segv
MPI.COMM_WORLD.Barrier()  # rank 0 waits here until the launcher kills it
"""


def test_a_segfaulting_rank_is_named_with_its_place_and_its_threads_stacks_are_logged(run_cli, tmp_path):
    """A segfault: the report names the rank, SIGSEGV as 128+11 and the line; the rank's file ends with the
    F record of its death whose continuation lines are every thread's Python stack (faulthandler's)."""
    script = tmp_path / "seg.py"
    script.write_text(SEGFAULT)
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode == 128 + signal.SIGSEGV, proc.stderr
    line = _line(SEGFAULT, "@segv")
    pid = _meta_pid((run_dir_of(proc) / "rank-1.log").read_text())
    assert f"ended the job: its process killed by SIGSEGV (status 139) at seg.py:{line}\n" in proc.stderr
    assert _ended_by(proc.stderr) == (1, pid)
    log = (run_dir_of(proc) / "rank-1.log").read_text()
    died = log[log.index("] [rank 1] the rank's process ended: killed by SIGSEGV") :]
    assert re.match(
        r"\] \[rank 1\] the rank's process ended: killed by SIGSEGV \(status 139\) status=139 parent=\d+ "
        r"signal=SIGSEGV \+lines=\d+\n",
        died,
    ), died
    assert f'File "{script}", line {line} in <module>' in died
    other_threads = re.findall(
        r'^Thread 0x[0-9a-f]+ \(most recent call first\):\n  File "[^"]*threading\.py"', died, re.M
    )
    assert other_threads, died  # the idle thread's stack too, not only the crashing one's
    timeline = (run_dir_of(proc) / "timeline.log").read_text()
    assert "[rank 1] the rank's process ended: killed by SIGSEGV" in timeline  # a whole record, merged


FAILING_ON_TWO = """
import distvlog as dv
from mpi4py import MPI

dv.init()
if dv.get_rank() == 1:
    raise ValueError("boom on rank 1")  # @raise
MPI.COMM_WORLD.Barrier()  # rank 0 waits here until rank 1's abort kills it
"""
ENDING = """
import distvlog as dv
dv.init()
dv.get_logger("job").info("done")
"""


def test_ranks_killed_after_another_failed_or_ended_normally_are_not_named(run_cli, tmp_path):
    """Ranks the abort of a failed rank killed are not suspects; ranks that ended normally log the end."""
    script = tmp_path / "fail.py"
    script.write_text(FAILING_ON_TWO)
    failed = run_cli("launch", "-n", "2", str(script))
    assert (
        f"distvlog launch: rank 1 failed: ValueError: boom on rank 1 (fail.py:{_line(FAILING_ON_TWO, '@raise')})"
        in failed.stderr
    )
    assert not _found(failed.stderr, "before its script", "ended before"), failed.stderr
    script.write_text(ENDING)
    fine = run_cli("launch", "-n", "2", str(script))
    assert fine.returncode == 0 and not _found(fine.stderr, "before its script", "ended before"), fine.stderr
    for rank in (0, 1):
        assert (run_dir_of(fine) / f"rank-{rank}.log").read_text().endswith(f"] [rank {rank}] the script ended\n")


@pytest.mark.parametrize(
    "init, hint",
    [
        (
            "run_id='myrun'",
            "latest now points to {logs}/myrun, written during this job: a script that passes run_id= "
            "to dv.init() logs there instead (distvlog merge {logs}/myrun)",
        ),
        ("log_dir='elsewhere'", "a script that passes run_id= or log_dir= to dv.init() logs where those say, not here"),
    ],
)
def test_a_script_choosing_its_own_run_or_log_dir_is_told_where_its_logs_went(run_cli, tmp_path, init, hint):
    script = tmp_path / "own.py"
    script.write_text(f"import distvlog as dv\ndv.init({init})\ndv.get_logger('job').info('hi')\n")
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "nothing to merge" in proc.stderr
    assert hint.format(logs=(tmp_path / "logs").resolve()) in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--guard-level", "-1"], "--guard-level -1: must be at least 0"),
        (["--bucket-mb", "-1"], "--bucket-mb -1.0: must be positive"),
        (["--lr", "0"], "--lr 0.0: must be positive"),
        (
            ["--inject-nan-rank", "0", "--inject-nan-step", "9"],
            "--inject-nan-step 9: beyond the last step, 2 (--steps 3)",
        ),
        (["--inject-nan-rank", "0"], "--inject-nan-step 3 (the default): beyond the last step, 2 (--steps 3)"),
        (["--inject-nan-step", "1"], "--inject-nan-step 1: needs --inject-nan-rank"),
    ],
)
def test_train_refuses_bad_values_as_argparse_does(tmp_path, args, message):
    """Checked before MPI starts: `python train.py` alone shows it."""
    env = {**os.environ, "PYTHONPATH": str(Path(TRAIN).parents[1]), "DISTVLOG_LOG_DIR": str(tmp_path / "logs")}
    proc = subprocess.run(
        [sys.executable, TRAIN, "--steps", "3", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"train.py: error: {message}", proc.stderr


def test_train_refuses_a_nan_rank_beyond_the_world_once_on_every_rank(run_cli):
    proc = run_cli("launch", "-n", "2", TRAIN, "--steps", "3", "--inject-nan-rank", "5", "--inject-nan-step", "1")
    assert proc.returncode == 2
    assert proc.stderr.count("train.py: error: --inject-nan-rank 5: beyond the last rank, 1 (2 ranks)\n") == 1
    assert re.search(r"^distvlog launch: ranks 0,1 failed: exited with status 2 \(digits\.py:\d+\)$", proc.stderr, re.M)
    assert not _found(proc.stdout, "step   0")
