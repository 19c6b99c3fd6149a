"""The last records survive any death of the process: a record logged right before a SIGKILL (the OOM
killer's), a segfault, an abort or os._exit is in the file, whole, with no flush in between (the file is
mapped: the kernel owns a record once it is copied). The reserve a death leaves is cut off by whoever sees
the rank die (the launcher's parent), a normal exit leaves none, and a file-size limit never becomes a
SIGBUS. Real processes, real signals, a real RLIMIT_FSIZE."""

from __future__ import annotations

import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from logger_testkit import HANG_TIMEOUT_S, finish, line_of, read_glog, wait_for_line

from distvlog import format as fmt
from distvlog.logger import append_record, trim_reserve
from distvlog.tools.read import open_sources, read_records

NO_TIMER = {"DISTVLOG_FLUSH_INTERVAL": "3600"}  # no flush thread: a record must reach the file by itself

DEATHS = {
    "SIGKILL": ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    "os._exit": ("os._exit(3)", 3),
    "segfault": ("faulthandler._sigsegv()  # @crash", -signal.SIGSEGV),
    "abort": ("os.abort()  # @crash", -signal.SIGABRT),
}

LAST_WORDS = """
import faulthandler, os, signal
import distvlog as dv
log = dv.get_logger("job")
for i in range(3000):  # more than one window
    log.info("step", i=i)
log.info("last words")
{death}
"""


@pytest.mark.parametrize("death", DEATHS)
def test_the_record_logged_right_before_a_death_is_in_the_file(scripts, death):
    """No flush, no exit hook, no flush thread: the records, up to the one logged just before the process
    died, are all there, whole and in order."""
    code, rc = DEATHS[death]
    run = scripts.run(LAST_WORDS.format(death=code), env=NO_TIMER, rc=rc)
    path = run.only_file()
    content, reserve, stacks = path.read_bytes().partition(b"\0")
    path.write_bytes(content)  # (what is before the reserve, read strictly: whole records)
    records = read_glog(path).records
    assert [r.first for r in records] == [f"step i={i}" for i in range(3000)] + ["last words"]
    if rc in (-signal.SIGSEGV, -signal.SIGABRT):  # faulthandler's stacks, after the reserve
        assert stacks.lstrip(b"\0").startswith(b"Fatal Python error: ")
    else:
        assert not stacks.strip(b"\0")


@pytest.mark.parametrize("fmt_name", ["glog", "jsonl"])
@pytest.mark.parametrize("death", ["segfault", "abort"])
def test_a_crash_leaves_every_threads_stack_as_a_record_of_its_rank(scripts, death, fmt_name):
    """Under plain python, faulthandler prints every thread's stack into the rank's file, after the
    reserve; the reader shows it as an F record at distvlog:0 right after the last record, with its time,
    thread and rank, naming the line that crashed; nothing is skipped."""
    code, rc = DEATHS[death]
    script = LAST_WORDS.format(death=code)
    scripts.run(script, env={**NO_TIMER, "DISTVLOG_FORMAT": fmt_name}, rc=rc)
    (source,) = sources = open_sources([str(scripts.files()[0])])
    records = list(read_records(sources))
    last, crash = records[-2:]
    assert last.event == "last words" and len(records) == 3003  # the meta record, 3000 steps, these two
    assert (crash.severity, crash.file, crash.line, crash.rank) == ("F", fmt.OWN_FILE, fmt.OWN_LINE, 0)
    assert (crash.ts, crash.tid) == (last.ts, last.tid)
    assert crash.event.startswith("Fatal Python error: ")
    assert f'script.py", line {line_of(script, "crash")} in <module>' in crash.event
    assert "Thread 0x" in crash.event  # (the flush and signal threads' stacks too)
    assert not sum(source.counts.skipped.values()) and not source.counts.torn


HELD = """
import ctypes
import distvlog as dv
dv.get_logger("job").info("before the blocking call")
print("ready", flush=True)
ctypes.PyDLL(None).sleep(3600)  # a C call that holds the interpreter lock (as mpi4py's lowercase collectives)
"""


def test_a_process_blocked_holding_the_interpreter_lock_keeps_its_records_when_killed(scripts):
    """No Python thread can run while the main thread holds the lock in C; SIGKILL from outside then: the
    record is in the file all the same."""
    proc = scripts.start(HELD)
    wait_for_line(proc, "ready")
    proc.kill()
    assert finish(proc)[0] == -signal.SIGKILL
    assert [r.first for r in scripts.records()] == ["before the blocking call"]


BIG = """
import os, signal
import distvlog as dv
log = dv.get_logger("job")
log.info("small")
log.info("big", payload="x" * 1_000_000)  # larger than a window: it gets a window of its size
log.info("after")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_record_larger_than_a_window_survives_whole(scripts):
    run = scripts.run(BIG, env=NO_TIMER, rc=-signal.SIGKILL)
    records = run.records()
    assert [r.first.split(" ", 1)[0] for r in records] == ["small", "big", "after"]
    assert records[1].first == f"big payload={'x' * 1_000_000}"


THREADS = """
import threading, time
import distvlog as dv
log = dv.get_logger("job")
logged = [0] * 8
def work(t):
    for i in range(10**9):
        log.info("work", t=t, i=i, pad="y" * (i % 300))
        logged[t] = i + 1
for t in range(8):
    threading.Thread(target=work, args=(t,), daemon=True).start()
while min(logged) < 2000:  # every thread well under way, over several windows (8 x 2000 x ~220 bytes)
    time.sleep(0.01)
print("ready", flush=True)
threading.Event().wait()
"""


def test_threads_logging_when_killed_leave_whole_records_and_at_most_one_torn(scripts):
    """Eight threads writing without a lock, SIGKILL from outside: every record read is whole, each
    thread's records are its first ones in order with none missing, and at most one record (the one being
    copied at the kill) is cut: the reader counts it as torn, never reads it as whole."""
    proc = scripts.start(THREADS, env=NO_TIMER)
    wait_for_line(proc, "ready")
    proc.kill()
    assert finish(proc)[0] == -signal.SIGKILL
    (source,) = sources = open_sources([str(scripts.only_file())])
    by_thread: dict[int, list[int]] = {}
    for record in read_records(sources):
        if record.event == "work":
            pad = record.fields["pad"]
            assert pad == "y" * (record.fields["i"] % 300)
            by_thread.setdefault(record.fields["t"], []).append(record.fields["i"])
    assert sorted(by_thread) == list(range(8))
    assert all(ids == list(range(len(ids))) for ids in by_thread.values())
    assert min(map(len, by_thread.values())) >= 2000
    assert source.counts.torn <= 1


def _limit_file_size(limit: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return preexec


UNDER_LIMIT = """
import distvlog as dv
log = dv.get_logger("job")
for i in range(5000):
    log.info("filler", i=i)
print("survived")
"""


def test_a_file_size_limit_below_one_window_is_no_sigbus(scripts):
    """Under `ulimit -f` smaller than a window, from the start: the reserve fails (EFBIG, SIGXFSZ ignored),
    records go through write() until the limit, the rest are dropped and said once; the process ends
    normally, and the file holds the first records, whole, within the limit."""
    limit = 64 * 1024
    script = scripts.write(UNDER_LIMIT)
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=scripts.env(NO_TIMER),  # (a timer's small write between two failures would start a second episode)
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
        preexec_fn=_limit_file_size(limit),
    )
    assert (proc.returncode, proc.stdout) == (0, "survived\n"), proc.stderr
    assert proc.stderr.count("cannot write") == 1 and "(EFBIG)" in proc.stderr, proc.stderr
    path = scripts.only_file()
    assert path.stat().st_size <= limit and b"\0" not in path.read_bytes()
    records = scripts.records()
    kept = [int(r.first.rsplit("=", 1)[1]) for r in records if r.first.startswith("filler")]
    dropped = sum(int(r.first.split(" dropped=")[1].split()[0]) for r in records if r.first.startswith(fmt.DROPPED))
    assert kept == sorted(set(kept)) and len(kept) + dropped == 5000 and dropped > 0


def test_a_normal_exit_leaves_no_reserve(scripts):
    """The reserve is cut off at exit: the file ends with its last record (the end record)."""
    scripts.run(LAST_WORDS.format(death="log.info('the end')"))
    data = scripts.only_file().read_bytes()
    assert b"\0" not in data
    assert data.splitlines()[-2].endswith(b"] [rank 0] the end")
    assert data.endswith(f"distvlog:0] [rank 0] {fmt.END_RECORD}\n".encode())


KILLED_UNDER_LAUNCH = """
import os, signal
import distvlog as dv
log = dv.get_logger("job")
for i in range(3000):
    log.info("step", i=i)
log.info("last words")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_launcher_cuts_a_killed_ranks_reserve_so_text_tools_read_it(scripts, tmp_path):
    """Under `distvlog launch` the rank's parent sees it die and cuts its reserve off before it appends the
    DIED record: no NUL byte left, `grep` reads it as text, `sort` finds no long line, and lnav parses every
    record (when installed)."""
    script = scripts.write(KILLED_UNDER_LAUNCH)
    proc = subprocess.run(
        [sys.executable, "-m", "distvlog", "launch", "-n", "1", str(script)],
        env=scripts.env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    path = scripts.only_file()
    assert b"\0" not in path.read_bytes()
    records = read_glog(path).records
    assert records[-2].first == "last words" and records[-1].first.startswith(fmt.DIED)
    grep = subprocess.run(["grep", "-c", "step i=", str(path)], capture_output=True, text=True, check=True)
    assert grep.stdout == "3000\n"
    longest = max(map(len, subprocess.run(["sort", str(path)], capture_output=True, check=True).stdout.split(b"\n")))
    assert longest < 1000
    if shutil.which("lnav"):
        from test_lnav import _lnav_rows

        rows = _lnav_rows(path, tmp_path)
        assert [level for _, level in rows[4:]] == ["info"] * 3001 + ["fatal"]


APPENDED_WHILE_ALIVE = """
import os, signal, sys
import distvlog as dv
log = dv.get_logger("job")
log.info("before")
print(dv.logger.log_file_path(), flush=True)
sys.stdin.readline()  # meanwhile another process appends a record to this file
log.info("after")
{end}
"""


@pytest.mark.parametrize("end", ["pass", "os.kill(os.getpid(), signal.SIGKILL)"])
def test_a_record_appended_by_another_process_while_the_writer_lives_ends_up_after_its_records(scripts, end):
    """The launcher's parent appends a STACKS record while the rank lives: it lands past the reserve, and
    the rank's own trim at exit (or the parent's trim_reserve after a SIGKILL) moves it up to the end of the
    rank's records: no NUL left, every record whole."""
    script = scripts.write(APPENDED_WHILE_ALIVE.format(end=end))
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=scripts.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    path = Path(proc.stdout.readline().strip())
    append_record(path, "warning", "from outside")
    assert re.search(rb"\0\nW\d{4} ", path.read_bytes())  # past the reserve, on a line of its own
    proc.communicate("go\n", timeout=HANG_TIMEOUT_S)
    if proc.returncode:
        trim_reserve(path)
    assert b"\0" not in path.read_bytes()
    assert [(r.severity, r.first) for r in read_glog(path).records] == [
        ("I", "before"),
        ("I", "after"),
        ("W", "from outside"),
    ]
