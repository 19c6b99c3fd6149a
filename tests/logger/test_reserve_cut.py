"""No reserve (the NUL bytes of the mapped window not yet written) is left at the end of a rank file for
long: a rank that a catchable signal ends (SIGTERM, also as plain `mpirun` forwards it) cuts its own before
it dies; the reserve of one killed beyond any handler's reach (SIGKILL: Hydra's, when another rank dies or
aborts, or the OOM killer's) is cut by the next run in the same log root, but never while its writer may be
alive. Real processes, real signals, real `mpirun` ranks (the mpich wheel's Hydra)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from logger_testkit import HANG_TIMEOUT_S, finish, read_glog, wait_for_line, wait_until

from distvlog.launch.command import find_launcher, launcher_kind, mpi_command
from distvlog.logger import _rundir, append_record

LOGGED = """
import distvlog as dv
log = dv.get_logger("job")
for i in range(100):
    log.info("step", i=i)
log.info("last words")
"""
TICKING = f"""{LOGGED}
import time
print("ready", flush=True)
while True:
    time.sleep(0.01)  # in Python: handlers run at once
"""
BLOCKED_IN_C = f"""{LOGGED}
from mpi4py import MPI
print("ready", flush=True)
MPI.COMM_SELF.recv(source=0)  # no one sends: blocked in C for good
"""
WAITS = f"""{LOGGED}
import sys
print(dv.logger.log_file_path(), flush=True)
sys.stdin.readline()
log.info("after")
"""
NEXT_RUN = """
import distvlog as dv
dv.get_logger("job").info("next run")
"""


def _ends_with_its_last_record(path: Path, last: str = "last words") -> None:
    """The file ends with the whole record `last`, followed by nothing: no NUL anywhere."""
    data = path.read_bytes()
    assert b"\0" not in data and data.endswith(b"\n"), f"{path}: {data[-120:]!r}"
    assert read_glog(path).records[-1].first == last


def _has_reserve(path: Path) -> bool:
    return path.read_bytes().endswith(b"\0")


def _mpirun(n: int, script: Path) -> list[str]:
    launcher = find_launcher(None)
    return mpi_command(launcher, launcher_kind(launcher), n, {}, None) + [sys.executable, str(script)]


def _run_job(scripts, n: int, code: str, name: str) -> subprocess.CompletedProcess:
    """`code` as `name` on n ranks of plain mpirun, to its end."""
    return subprocess.run(
        _mpirun(n, scripts.write(code, name)),
        env=scripts.env(),
        cwd=scripts.tmp,
        capture_output=True,
        timeout=HANG_TIMEOUT_S,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1], ids=lambda s: s.name)
def test_a_process_a_signal_ends_leaves_no_reserve(scripts, signum):
    """Its handler cuts the reserve, then the process dies of the signal, as its default action would have
    it: the file ends with its records, whole."""
    proc = scripts.start(TICKING, env={"DISTVLOG_FLUSH_INTERVAL": "3600"})
    wait_for_line(proc, "ready")
    proc.send_signal(signum)
    returncode, _, err = finish(proc)
    assert returncode == -signum, err
    _ends_with_its_last_record(scripts.only_file())


def test_a_process_blocked_in_c_that_a_sigterm_ends_leaves_no_reserve(scripts):
    """While the main thread is blocked in C, the signal watcher cuts the reserve, then ends the process
    with status 128+15 after the grace period."""
    proc = scripts.start(BLOCKED_IN_C, env={"DISTVLOG_FLUSH_INTERVAL": "3600"})
    wait_for_line(proc, "ready")
    time.sleep(0.5)  # (lets it enter recv; not a speed limit)
    proc.send_signal(signal.SIGTERM)
    returncode, _, err = finish(proc)
    assert returncode == 128 + signal.SIGTERM, err
    data = scripts.only_file().read_bytes()
    assert b"\0" not in data and data.endswith(b"\n")
    assert [r.first for r in read_glog(scripts.only_file()).records][:101] == [f"step i={i}" for i in range(100)] + [
        "last words"
    ]


MPI_TICKING = """
import time
import distvlog as dv
from mpi4py import MPI
dv.init()
log = dv.get_logger("job")
for i in range(100):
    log.info("step", i=i)
MPI.COMM_WORLD.Barrier()
if dv.get_rank() == 0:
    print("ready", flush=True)
while True:
    time.sleep(0.01)
"""


@pytest.mark.parametrize(
    "signum, rc",
    [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, 128 + signal.SIGINT)],  # (Hydra's status: signal N; 130)
    ids=["SIGTERM", "SIGINT"],
)
def test_ranks_that_plain_mpirun_forwards_a_signal_to_leave_no_reserve(scripts, signum, rc):
    """Hydra forwards a SIGTERM or a Ctrl-C (SIGINT) sent to mpirun to every rank, and SIGKILLs the others
    as soon as the first rank dies of it or aborts the job (a KeyboardInterrupt does, lest the others wait
    forever): each rank cuts its reserve first, in its handler or before its abort."""
    proc = subprocess.Popen(
        _mpirun(2, scripts.write(MPI_TICKING)),
        env=scripts.env(),
        cwd=scripts.tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_line(proc, "ready")
    proc.send_signal(signum)
    returncode, _, err = finish(proc)
    assert returncode == rc, err
    files = scripts.files()
    assert [p.name for p in files] == ["rank-0.log", "rank-1.log"]
    for path in files:
        data = path.read_bytes()
        assert b"\0" not in data and data.endswith(b"\n"), path
        steps = [r.first for r in read_glog(path).records if r.first.startswith("step")]
        assert steps == [f"step i={i}" for i in range(100)]


def test_a_sigint_to_a_process_blocked_in_c_cuts_its_reserve_at_once(scripts):
    """A SIGINT is a KeyboardInterrupt once the main thread is back in Python, which a rank blocked in C may
    never be (a job's launcher SIGKILLs it first): the signal watcher cuts the reserve at once, the process
    lives on, and a SIGKILL then leaves a file that ends with its last record."""
    proc = scripts.start(BLOCKED_IN_C, env={"DISTVLOG_FLUSH_INTERVAL": "3600"})
    wait_for_line(proc, "ready")
    time.sleep(0.5)  # (lets it enter recv; not a speed limit)
    path = scripts.only_file()
    assert _has_reserve(path)
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: not _has_reserve(path), what="the reserve cut")
    assert proc.poll() is None
    proc.kill()
    assert finish(proc)[0] == -signal.SIGKILL
    records = read_glog(path).records
    assert records[-1].first.startswith("SIGINT arrived while the main thread was blocked in C")
    assert b"\0" not in path.read_bytes()


RAISES_ON_ONE = """
import distvlog as dv
from mpi4py import MPI
dv.init()
log = dv.get_logger("job")
log.info("started")
if dv.get_rank() == 1:
    raise ValueError("boom on rank 1")
MPI.COMM_WORLD.Barrier()  # rank 1 never comes: the abort SIGKILLs this rank here
"""


def test_a_rank_that_aborts_the_job_cuts_its_reserve_before(scripts):
    """An unhandled exception on one rank of plain mpirun aborts the job: that rank's file has no reserve
    at once; the rank the abort SIGKILLed keeps its reserve (for the next run to cut)."""
    job = _run_job(scripts, 2, RAISES_ON_ONE, "raises.py")
    assert job.returncode == 1, job.stderr
    rank0, rank1 = scripts.files()
    assert b"\0" not in rank1.read_bytes() and rank1.read_bytes().endswith(b"\n")
    assert _has_reserve(rank0)


KILLED_UNDER_MPIRUN = """
import os, signal
import distvlog as dv
from mpi4py import MPI
dv.init()
log = dv.get_logger("job")
for i in range(100):
    log.info("step", i=i)
log.info("last words")
MPI.COMM_WORLD.Barrier()
if dv.get_rank() == 2:
    os.kill(os.getpid(), signal.SIGKILL)  # Hydra then SIGKILLs the others, waiting in the Barrier
MPI.COMM_WORLD.Barrier()
"""
NEXT_JOB = """
import distvlog as dv
dv.init()
dv.get_logger("job").info("next run")
"""


def test_the_next_job_cuts_the_reserves_of_ranks_killed_under_plain_mpirun(scripts):
    """Three ranks killed by SIGKILL (one by itself, two by Hydra) leave their reserves; the next job in the
    same log root, of two ranks, cuts all three (rank 0 takes ranks 0 and 2): each file ends with its last
    record. The new job's own files are whole too."""
    killed = _run_job(scripts, 3, KILLED_UNDER_MPIRUN, "killed.py")
    assert killed.returncode == signal.SIGKILL, killed.stderr  # (Hydra's status for a rank killed by signal 9)
    old = scripts.files()
    assert [p.name for p in old] == ["rank-0.log", "rank-1.log", "rank-2.log"]
    assert all(map(_has_reserve, old))
    nxt = _run_job(scripts, 2, NEXT_JOB, "next.py")
    assert nxt.returncode == 0, nxt.stderr
    for path in old:
        _ends_with_its_last_record(path)
    new = [p for p in scripts.files() if p not in old]
    assert len(new) == 2
    for path in new:
        _ends_with_its_last_record(path, "next run")


def _start_waiting(scripts, name: str = "waits.py") -> tuple[subprocess.Popen, Path]:
    """A WAITS script, alive with its window mapped, and its file; `communicate("go\\n")` lets it finish."""
    proc = subprocess.Popen(
        [sys.executable, str(scripts.write(WAITS, name))],
        env=scripts.env(),
        cwd=scripts.tmp,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, Path(proc.stdout.readline().strip())


def test_a_file_whose_writer_lives_is_never_cut(scripts):
    """A process that is still writing (its window mapped) keeps its reserve while a later run starts in
    the same root, and logs on afterwards without harm (a cut under its window would be a SIGBUS)."""
    proc, path = _start_waiting(scripts)
    before = path.read_bytes()
    assert before.endswith(b"\0")
    scripts.run(NEXT_RUN, name="next.py")
    assert path.read_bytes() == before
    _, err = proc.communicate("go\n", timeout=HANG_TIMEOUT_S)
    assert proc.returncode == 0, err
    assert [r.first for r in read_glog(path).records][-2:] == ["last words", "after"]


def _dead_pid_like(pid: int) -> int:
    """A pid no process has, as many digits long as `pid`."""
    for candidate in range(10 ** len(str(pid)) - 1, pid, -1):
        try:
            os.kill(candidate, 0)
        except ProcessLookupError:
            return candidate
        except PermissionError:
            continue
    raise AssertionError(f"no free pid of {len(str(pid))} digits")


def test_a_live_writer_whose_pid_says_nothing_here_is_never_cut(scripts):
    """A writer in another pid namespace (a container with the same host name) has a pid that means
    nothing here: its flock on its file tells that it lives, and its file is not cut under its window."""
    proc, path = _start_waiting(scripts)
    pid = read_glog(path).meta["pid"]
    with open(path, "r+b") as file:  # (in place, same length: the writer's window stays as it is)
        head = file.read(4096)
        at = head.index(b'"pid":%d' % pid) + len(b'"pid":')
        file.seek(at)
        file.write(b"%d" % _dead_pid_like(pid))
    before = path.read_bytes()
    scripts.run(NEXT_RUN, name="next.py")
    assert path.read_bytes() == before
    _, err = proc.communicate("go\n", timeout=HANG_TIMEOUT_S)
    assert proc.returncode == 0, err
    assert [r.first for r in read_glog(path).records][-2:] == ["last words", "after"]


def _killed_file(scripts, name: str = "killed.py") -> Path:
    """The file of a process SIGKILLed after its last record, with its reserve."""
    proc, path = _start_waiting(scripts, name)
    proc.kill()
    finish(proc)
    assert _has_reserve(path)
    return path


def _edit_meta(path: Path, key: str, old: object, new: object) -> None:
    data = path.read_bytes()
    field = f'"{key}":"{old}"' if isinstance(old, str) else f'"{key}":{old}'
    value = f'"{key}":"{new}"' if isinstance(new, str) else f'"{key}":{new}'
    assert data.count(field.encode()) == 1, data[:600]
    path.write_bytes(data.replace(field.encode(), value.encode()))


def test_a_file_whose_pid_another_program_now_has_is_cut(scripts):
    """The pid in the file's header belongs to a live process that does not hold the file (the pid was
    reused): the writer is gone, and the next run cuts the reserve."""
    path = _killed_file(scripts)
    other = subprocess.Popen(["sleep", "600"])
    try:
        _edit_meta(path, "pid", read_glog(path).meta["pid"], other.pid)
        scripts.run(NEXT_RUN, name="next.py")
        _ends_with_its_last_record(path)
    finally:
        other.kill()
        other.wait()


def test_a_file_written_on_another_host_is_never_cut(scripts):
    """Whether a writer on another host (a shared file system) lives cannot be told from here."""
    path = _killed_file(scripts)
    _edit_meta(path, "host", read_glog(path).meta["host"], "another-host")
    before = path.read_bytes()
    scripts.run(NEXT_RUN, name="next.py")
    assert path.read_bytes() == before


def test_only_the_latest_few_runs_are_looked_at(scripts):
    """A new run looks back at the EARLIER_RUNS runs whose directories changed last, not the whole root: of
    four runs killed with their reserves, the oldest keeps its reserve."""
    started = [_start_waiting(scripts, f"killed{k}.py") for k in range(_rundir.EARLIER_RUNS + 1)]
    procs, paths = zip(*started)  # all alive meanwhile: none cuts another's file
    for proc in procs:
        proc.kill()
        finish(proc)
    now = time.time()
    for age, path in enumerate(reversed(paths)):  # the first run the oldest
        os.utime(path.parent, (now - 100 * (age + 1), now - 100 * (age + 1)))
    scripts.run(NEXT_RUN, name="next.py")
    assert _has_reserve(paths[0])
    for path in paths[1:]:
        _ends_with_its_last_record(path)


SEGFAULT = f"""{LOGGED}
import faulthandler
faulthandler._sigsegv()
"""


def test_the_next_run_brings_a_crashs_stacks_up_to_the_last_record(scripts):
    """A segfault's stacks, which faulthandler wrote past the reserve, follow the last record once the next
    run has cut the reserve: one text file, no NUL in it."""
    scripts.run(SEGFAULT, name="crash.py", rc=-signal.SIGSEGV)
    (path,) = scripts.files()
    assert b"\0" in path.read_bytes()
    scripts.run(NEXT_RUN, name="next.py")
    data = path.read_bytes()
    assert b"\0" not in data
    last, stacks = data.split(b"] [rank 0] last words\n")
    assert stacks.startswith(b"Fatal Python error: Segmentation fault")


USERS_OWN = """
import os, signal, time
import distvlog as dv
signal.signal(signal.SIGUSR1, lambda signum, frame: print("my handler ran", flush=True))
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
dv.get_logger("job").info("first record")
assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
os.kill(os.getpid(), signal.SIGUSR1)
os.kill(os.getpid(), signal.SIGHUP)
time.sleep(0.5)
dv.get_logger("job").info("still here")
"""


def test_a_signal_the_user_handles_or_ignores_is_left_to_the_user(scripts):
    """SIGHUP and SIGUSR1 are taken over only while their action is death: the user's own handler runs as
    before (and the process lives on), an ignored signal stays ignored."""
    run = scripts.run(USERS_OWN)
    assert run.proc.stdout == "my handler ran\n"
    assert [r.first for r in run.records()] == ["first record", "still here"]


MPI_FIRST = """
import os, signal, time
from mpi4py import MPI  # MPICH's MPI_Init catches SIGHUP and SIGUSR1, in C: Python's table still says SIG_DFL
import distvlog as dv
dv.get_logger("job").info("first record")
os.kill(os.getpid(), signal.SIGUSR1)
os.kill(os.getpid(), signal.SIGHUP)
time.sleep(0.5)
dv.get_logger("job").info("still here")
"""


def test_a_signal_that_mpi_handles_is_left_to_mpi(scripts):
    """A handler that C code installed (MPICH's, at MPI_Init) is not replaced: the process outlives SIGUSR1
    and SIGHUP as it does without distvlog."""
    run = scripts.run(MPI_FIRST)
    assert [r.first for r in run.records()] == ["first record", "still here"]


ROLLING = """
import distvlog as dv
log = dv.get_logger("job")
log.info("first")
print(dv.logger.log_file_path(), flush=True)
pad = "x" * 2000
for i in range(10000):  # a new window every ~120 records
    log.info("step", i=i, pad=pad)
"""


def test_records_appended_while_the_writer_moves_its_windows_are_all_kept(scripts):
    """The launcher's parent appends records to a live rank's file; the rank cuts its reserve and reserves
    the next window ~80 times meanwhile. An append never lands between a cut and the next reserve (where the
    window would overwrite it), nor is cut off: every appended record is in the file once, after the rank's
    normal exit no NUL is left, and the rank's own records are all there, in order."""
    proc = subprocess.Popen(
        [sys.executable, str(scripts.write(ROLLING))], env=scripts.env(), stdout=subprocess.PIPE, text=True
    )
    path = Path(proc.stdout.readline().strip())
    appended = 0
    while proc.poll() is None:
        append_record(path, "warning", f"appended {appended}")
        appended += 1
    assert proc.wait() == 0
    data = path.read_bytes()
    assert b"\0" not in data
    assert re.findall(rb"\] \[rank 0\] appended (\d+)\n", data) == [b"%d" % n for n in range(appended)]
    assert re.findall(rb"step i=(\d+) ", data) == [b"%d" % i for i in range(10000)]


# -- the tools: a run read by merge, diff, report or merge --follow has its killed writers' reserves cut ------
KILLED_ALONE = f"""{LOGGED}
import os, signal
os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would: no handler, no exit hook
"""
TOOLS = {
    "merge": ["merge", "{run}", "-o", "{tmp}/timeline.log"],
    "diff": ["diff", "{run}"],
    "report": ["report", "{run}", "-o", "{tmp}/report.html"],
    "follow": ["merge", "--follow", "{run}", "-o", "{tmp}/timeline.log", "--idle", "60"],
}


def _tool(scripts, name: str, run: Path) -> subprocess.CompletedProcess:
    """`distvlog TOOL RUN` in a process of its own (not the test's: its logger would cut nothing of ours)."""
    argv = [arg.format(run=run, tmp=scripts.tmp) for arg in TOOLS[name]]
    return subprocess.run(
        [sys.executable, "-m", "distvlog", *argv],
        env=scripts.env(),
        cwd=scripts.tmp,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )


def _grep_finds(path: Path, text: str) -> None:
    """grep answers with the line itself, not "binary file matches": the file is text again."""
    found = subprocess.run(["grep", text, str(path)], capture_output=True, text=True, timeout=60)
    assert found.returncode == 0 and re.fullmatch(rf"I\S+ \S+ \d+ \S+\] \[rank \d\] {text}\n", found.stdout), found


@pytest.mark.parametrize("tool", list(TOOLS))
def test_a_tool_reading_a_run_cuts_the_reserve_of_a_process_killed_alone(scripts, tool):
    """A single process SIGKILLed leaves its reserve; the first of our tools to read its run cuts it (its pid
    is dead on this host): grep and tail see the last record at the end of the file."""
    scripts.run(KILLED_ALONE, rc=-signal.SIGKILL)
    (path,) = scripts.files()
    assert _has_reserve(path)
    proc = _tool(scripts, tool, path.parent)
    assert "Traceback" not in proc.stderr, proc.stderr  # (diff exits 2: no record it could check)
    _ends_with_its_last_record(path)
    _grep_finds(path, "last words")


def test_diff_cuts_the_reserves_of_ranks_killed_under_plain_mpirun(scripts):
    """Rank 2 SIGKILLs itself, Hydra SIGKILLs the other two: `distvlog diff` of the run cuts all three
    reserves, and grep finds each rank's last record."""
    killed = _run_job(scripts, 3, KILLED_UNDER_MPIRUN, "killed.py")
    assert killed.returncode == signal.SIGKILL, killed.stderr
    files = scripts.files()
    assert len(files) == 3 and all(map(_has_reserve, files))
    _tool(scripts, "diff", files[0].parent)
    for path in files:
        _ends_with_its_last_record(path)
        _grep_finds(path, "last words")


def test_a_tool_leaves_a_live_writers_file_alone(scripts):
    """merge of a run whose writer still logs: its reserve stays, and it logs on without harm."""
    proc, path = _start_waiting(scripts)
    before = path.read_bytes()
    merged = _tool(scripts, "merge", path.parent)
    assert merged.returncode == 0, merged.stderr
    assert path.read_bytes() == before
    _, err = proc.communicate("go\n", timeout=HANG_TIMEOUT_S)
    assert proc.returncode == 0, err
    assert [r.first for r in read_glog(path).records][-2:] == ["last words", "after"]
