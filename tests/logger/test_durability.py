"""Never lose a record: SIGTERM/SIGINT flush and then act as before, SIGKILL leaves only whole records,
unhandled exceptions are logged where they were raised, threads, fork and the flush timer.

Signal tests wait for the script's "ready" line before signalling, so every record logged before it must
be in the file; nothing here limits how fast anything happens (timeouts only guard against hangs)."""

from __future__ import annotations

import ast
import signal
import time

import pytest
from logger_testkit import finish, line_of, read_glog, wait_for_line, wait_until

from distvlog.format import END_RECORD


def _ids(records) -> list[int]:
    """The `i=` field of every record, checking that they are 0, 1, 2, ... without gaps or repeats."""
    ids = [int(r.first.rsplit(" i=", 1)[1]) for r in records]
    assert ids == list(range(len(ids)))
    return ids


LOOP = """
import signal, sys
import distvlog.logger as dlog
{prologue}
log = dlog.get_logger()
i = 0
while True:
    log.info({message}, i=i)
    i += 1
    if i == 2000:
        print("ready", flush=True)
"""
ONE_LINE = 'f"record {i}"'
THREE_LINES = 'f"record {i}\\n  detail {i}\\n  end {i}"'
MY_HANDLER = """
def mine(signum, frame):
    print("my handler ran", flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, mine)
"""


@pytest.mark.parametrize(
    "signum, prologue, rc",
    [
        (signal.SIGTERM, "", -signal.SIGTERM),
        (signal.SIGINT, "", -signal.SIGINT),  # KeyboardInterrupt, then Python exits by SIGINT
        (signal.SIGTERM, MY_HANDLER, 3),  # the handler that was there before ours runs after the flush
    ],
    ids=["SIGTERM", "SIGINT", "SIGTERM-chained"],
)
def test_a_signal_mid_run_loses_nothing(scripts, signum, prologue, rc):
    proc = scripts.start(LOOP.format(prologue=prologue, message=ONE_LINE))
    wait_for_line(proc, "ready")
    proc.send_signal(signum)
    returncode, out, err = finish(proc)
    assert returncode == rc, err
    records = scripts.records()
    assert len(_ids(records)) >= 2000
    assert all(r.severity == "I" for r in records)  # a KeyboardInterrupt is not an error record
    assert ("my handler ran" in out) == bool(prologue)


SIGNAL_IN_CRITICAL_SECTION = """
import os, signal, time
import distvlog.logger as dlog
from distvlog.logger._sink import SINK
log = dlog.get_logger()
log.info("before")
original = SINK._flush_locked
def interrupted():  # the signal arrives while the sink holds its lock
    SINK._flush_locked = original
    os.kill(os.getpid(), signal.{signal})
    original()
SINK._flush_locked = interrupted
{call}
print("the signal was lost", flush=True)
time.sleep(10)
"""


@pytest.mark.parametrize(
    "signum, call",
    [
        ("SIGTERM", "dlog.flush()"),  # the engine flushes at the end of every backward pass
        ("SIGINT", "dlog.flush()"),
        ("SIGTERM", 'log.warning("urgent")'),
        ("SIGINT", 'log.warning("urgent")'),
    ],
)
def test_a_signal_inside_the_sinks_critical_section_is_delivered_after_it(scripts, signum, call):
    run = scripts.run(SIGNAL_IN_CRITICAL_SECTION.format(signal=signum, call=call), rc=-getattr(signal, signum))
    assert "lost" not in run.proc.stdout
    assert [r.first for r in run.records()] == ["before"] + (["urgent"] if "warning" in call else [])


SIGNAL_IN_A_BATCH = """
import os, signal
import distvlog.logger as dlog
from distvlog.logger._logger import LineWriter
from distvlog.logger._sink import SINK

class Signal:  # an event whose text is made while the batch is rendered
    def __str__(self):
        os.kill(os.getpid(), signal.{signal})  # the handler runs at the next instruction, inside the batch
        return "held 3"

writer = LineWriter(dlog.get_logger(), 4, node="n")
writer.lines([(4, "before", None)])
dlog.flush()
with SINK.signals_held:
    records = [(4, "held 1", None)]
    os.kill(os.getpid(), signal.{signal})  # while the node's lines are being made
    records += [(4, "held 2", None), (4, Signal(), None)]
    with SINK.signals_held:  # (holds nest)
        pass
    writer.lines(records)
print("the signal was lost", flush=True)
"""


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_signal_inside_a_batch_is_handled_once_its_records_are_written(scripts, signum):
    run = scripts.run(SIGNAL_IN_A_BATCH.format(signal=signum), rc=-getattr(signal, signum))
    assert "lost" not in run.proc.stdout
    assert [r.first for r in run.records()] == [
        "before node=n v=4",
        "held 1 node=n v=4",
        "held 2 node=n v=4",
        "held 3 node=n v=4",
    ]


BLOCKED_IN_C = """
from mpi4py import MPI
import distvlog.logger as dlog
dlog.get_logger().info("before")  # @before
print("ready", flush=True)
try:
    MPI.COMM_SELF.recv(source=0)  # no one sends: blocked in C for good  # @recv
except KeyboardInterrupt:
    print("the KeyboardInterrupt was raised", flush=True)
"""


def test_signals_to_a_process_blocked_in_c(scripts):
    """A watcher thread flushes as each signal arrives and logs where the main thread is blocked. SIGINT is
    left to Python (a KeyboardInterrupt the user may catch, whenever the main thread gets back); a SIGTERM
    whose handler is death ends the process after the grace period, as SIG_DFL would have at once."""
    from distvlog.logger._lifecycle import SIGNAL_GRACE_S

    proc = scripts.start(BLOCKED_IN_C, env={"DISTVLOG_FLUSH_INTERVAL": "3600"})  # only the watcher flushes
    wait_for_line(proc, "ready")
    time.sleep(0.5)  # (lets it enter recv; not a speed limit)
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: len(scripts.records()) == 2, what="the SIGINT record")
    time.sleep(SIGNAL_GRACE_S + 1)
    assert proc.poll() is None  # still blocked: not ended for a SIGINT
    proc.send_signal(signal.SIGTERM)
    returncode, out, _ = finish(proc)
    assert returncode == 128 + signal.SIGTERM and "KeyboardInterrupt" not in out
    records = [(r.severity, r.line, r.first) for r in scripts.records()]
    line = line_of(BLOCKED_IN_C, "recv")
    arrived = "arrived while the main thread was blocked in C, at (most recent call last):"
    assert records == [
        ("I", line_of(BLOCKED_IN_C, "before"), "before"),
        ("W", line, f"SIGINT {arrived}"),
        ("W", line, f"SIGTERM {arrived}"),
        (
            "F",
            line,
            "SIGTERM: the main thread did not return to Python within 3 s (blocked in C, "
            "such as an MPI call that cannot complete); exited with status 143",
        ),
    ]
    assert scripts.records()[1].more[-1].strip().startswith("MPI.COMM_SELF.recv(source=0)")  # the stack's last line


ON_ANOTHER_THREAD = """
import signal, threading, time
import multiprocessing as mp
import distvlog.logger as dlog
dlog.get_logger().info("before")
lock = mp.get_context("fork").Lock()
lock.acquire()
idle = threading.Thread(target=threading.Event().wait, daemon=True)  # (a thread that runs no Python)
idle.start()

def send():
    time.sleep(0.5)  # (the main thread waits by then; not a speed limit)
    signal.pthread_kill(idle.ident, signal.{signal})  # as the kernel may deliver the process's signal: elsewhere

threading.Thread(target=send, daemon=True).start()
try:
    lock.acquire()  # an idle pool worker's wait, which a signal to the main thread ends
except KeyboardInterrupt:
    print("the KeyboardInterrupt was raised", flush=True)
"""


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_signal_that_lands_on_another_thread_still_reaches_the_main_threads_wait(scripts, signum):
    """A signal sent to a process may be delivered to any of its threads; the main thread waiting on a lock
    is then woken by the watcher (which sends it on), and handles it as Python does: SIGTERM ends the process
    by the signal, SIGINT raises a KeyboardInterrupt there. No record says it was blocked in C (it was not),
    and SIGTERM does not wait out the grace period to end it with an exit status of the watcher's."""
    run = scripts.run(ON_ANOTHER_THREAD.format(signal=signum), rc=-signal.SIGTERM if signum == "SIGTERM" else 0)
    assert ("KeyboardInterrupt was raised" in run.proc.stdout) == (signum == "SIGINT"), run.proc.stdout
    assert [r.first for r in run.records()] == ["before"]


IN_A_FORKED_CHILD = """
import os, signal, threading, time
import multiprocessing as mp
import distvlog.logger as dlog
dlog.get_logger().info("before")
pid = os.fork()
if pid == 0:  # a forked child that logs (a pool's worker), then waits on a lock
    dlog.get_logger().info("in the child")
    lock = mp.get_context("fork").Lock()
    lock.acquire()
    idle = threading.Thread(target=threading.Event().wait, daemon=True)
    idle.start()
    threading.Timer(0.5, signal.pthread_kill, (idle.ident, signal.SIGTERM)).start()
    lock.acquire()
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child:", f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}")
"""


def test_a_forked_childs_main_thread_is_woken_too(scripts):
    """The same in a forked child (its main thread is its first, whatever Python's records of the parent's say):
    the SIGTERM that landed on another thread ends it by the signal, not by the watcher after the grace period."""
    run = scripts.run(IN_A_FORKED_CHILD)
    assert "child: killed by signal 15" in run.proc.stdout, run.proc.stdout


HANDLED_AT_ONCE = """
import os, signal, threading, time
import distvlog.logger as dlog
dlog.get_logger().info("before")
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()

def busy(seconds):  # Python: the handler runs at once
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))

try:
    busy(5)
except KeyboardInterrupt:
    busy(1)  # the script goes on, past the watcher's looks
dlog.get_logger().info("after")
"""


def test_a_signal_handled_at_once_leaves_no_record_of_a_wait_in_c(scripts):
    """The main thread runs Python: the handler runs within microseconds, and the watcher, which looks twice
    (before and after waking a waiting main thread), counts that run once and logs nothing."""
    run = scripts.run(HANDLED_AT_ONCE)
    assert [r.first for r in run.records()] == ["before", "after"]


BLOCKED_BY_THE_MAIN_THREAD = """
import os, signal, threading, time
import distvlog.logger as dlog
dlog.get_logger().info("before")
caught = 0
old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # a critical section: SIGINT goes elsewhere
threading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
lock = threading.Lock()
lock.acquire()
try:
    lock.acquire(True, 1.0)  # a wait in the critical section, past the watcher's look
except KeyboardInterrupt:  # (once it returns to Python)
    caught += 1
try:
    signal.pthread_sigmask(signal.SIG_SETMASK, old)  # (a SIGINT pending in this thread would come now)
    time.sleep(0.5)
except KeyboardInterrupt:
    caught += 1
print(f"{caught} KeyboardInterrupt", flush=True)
"""


def test_a_signal_the_main_thread_blocks_is_not_sent_on_to_it(scripts):
    """The main thread blocks SIGINT for a while: the kernel gives the process's SIGINT to another thread, and
    the watcher leaves it so (sent on, it would wait in the main thread's mask and be handled twice)."""
    run = scripts.run(BLOCKED_BY_THE_MAIN_THREAD)
    assert "1 KeyboardInterrupt" in run.proc.stdout, run.proc.stdout


def test_sigkill_leaves_only_whole_records(scripts):
    proc = scripts.start(LOOP.format(prologue="", message=THREE_LINES))
    wait_for_line(proc, "ready")
    time.sleep(0.2)  # let it write some more; any moment will do
    proc.kill()
    assert finish(proc)[0] == -signal.SIGKILL
    records = scripts.records()  # parses: every line inside a record, the file ends with a newline
    ids = _ids(records)
    assert len(ids) >= 1000  # the 2000 records before "ready" filled three 64 KB buffers
    assert all(r.more == [f"  detail {i}", f"  end {i}"] for i, r in zip(ids, records))


BACKWARD = """
import distvlog as dv
x = dv.randn([3, 4])
x.stop_gradient = False
def hook(grad):
    raise ValueError("bad gradient")  # @raise
x.register_hook(hook)
with dv.backward_vlog_guard(4):
    loss = (x * 2).sum()
    loss.backward()
"""


def test_an_exception_mid_backward_leaves_its_traceback(scripts):
    run = scripts.run(BACKWARD, rc=1)
    records = run.records()
    assert any(r.file == "_lines.py" and "begin run" in r.first for r in records)  # the nodes that ran
    last = records[-1]
    assert (last.severity, last.file, last.line) == ("F", "script.py", line_of(BACKWARD, "raise"))
    assert last.first == "Unhandled exception in main thread:"
    assert "ValueError: bad gradient" in last.more
    assert last.more[-1].startswith("distvlog.autograd.engine.BackwardError:")


INSIDE_DISTVLOG = [
    """
import distvlog as dv
def configure():
    dv.set_vlog_level("engine")  # @call
configure()
""",
    """
import distvlog as dv
x = dv.randn([3, 4])
x.stop_gradient = False
loss = (x * 2).sum()
loss.backward()
loss.backward()  # @call
""",
]


@pytest.mark.parametrize("code", INSIDE_DISTVLOG)
def test_an_exception_raised_inside_distvlog_is_located_at_the_users_call(scripts, code):
    last = scripts.run(code, rc=1).records()[-1]
    assert (last.severity, last.file, last.line) == ("F", "script.py", line_of(code, "call"))
    assert any(line.startswith('  File "') and "/distvlog/" in line for line in last.more)  # the whole traceback


IN_A_LIBRARY = """
import json
import distvlog.logger as dlog
dlog.get_logger().info("started")
json.loads("{")  # @call
"""


def test_an_exception_raised_inside_a_library_is_located_at_the_users_call(scripts):
    last = scripts.run(IN_A_LIBRARY, rc=1).records()[-1]
    assert (last.severity, last.file, last.line) == ("F", "script.py", line_of(IN_A_LIBRARY, "call"))
    assert last.more[-1].startswith("json.decoder.JSONDecodeError")


def test_a_syntax_error_is_located_at_its_line(scripts):
    scripts.write("x = 1\ndef broken(:\n", name="broken.py")
    last = scripts.run("import distvlog.logger\nimport broken\n", rc=1).records()[-1]
    assert (last.severity, last.file, last.line) == ("F", "broken.py", 2)


THREAD = """
import threading
import distvlog.logger as dlog
log = dlog.get_logger()
def work():
    log.info("worker started")
    raise RuntimeError("worker failed")  # @raise
t = threading.Thread(target=work, name="worker-1")
t.start()
t.join()
log.info("main goes on")
"""


def test_an_exception_in_a_thread_is_an_error_record(scripts):
    run = scripts.run(THREAD)
    records = run.records()
    assert [r.first for r in records] == ["worker started", "Unhandled exception in thread worker-1:", "main goes on"]
    error = records[1]
    assert (error.severity, error.file, error.line) == ("E", "script.py", line_of(THREAD, "raise"))
    assert error.more[0] == "Traceback (most recent call last):" and error.more[-1] == "RuntimeError: worker failed"
    assert "RuntimeError: worker failed" in run.proc.stderr


THREADS = """
import threading
import distvlog.logger as dlog
log = dlog.get_logger()
tids = {}
def work(t):
    tids[t] = threading.get_native_id()
    for i in range(5000):
        if i % 7:
            log.info(f"t{t} n{i}", t=t, n=i)
        else:
            log.info(f"t{t} n{i}\\n  continued t{t} n{i}", t=t, n=i)
threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(tids)
"""


def test_eight_threads_every_record_once_and_whole(scripts):
    run = scripts.run(THREADS)
    tids = ast.literal_eval(run.proc.stdout)
    seen: dict[int, list[int]] = {t: [] for t in range(8)}
    for rec in run.records():
        t, n = rec.first.split(" ")[:2]
        t, n = int(t[1:]), int(n[1:])
        assert rec.first == f"t{t} n{n} t={t} n={n}" and rec.tid == tids[t]
        assert rec.more == ([f"  continued t{t} n{n}"] if n % 7 == 0 else [])
        seen[t].append(n)
    assert seen == {t: list(range(5000)) for t in range(8)}  # each once, in each thread's order


TIMESTAMPS = """
import sys, threading
import distvlog.logger as dlog
sys.setswitchinterval(1e-6)  # switch threads as often as possible
log = dlog.get_logger()
BASE = 1_700_000_000_000_000
def work(t):
    for i in range(4000):
        second = (i + t) % 2
        log.info("stamped", second=second, ts=BASE + second * 1_000_000 + 5)
threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_threads_get_their_own_timestamps(scripts):
    """Records of different seconds rendered by racing threads each show their own second."""
    records = scripts.run(TIMESTAMPS).records()
    stamps = {s: time.strftime("%m%d %H:%M:%S", time.localtime(1_700_000_000 + s)) for s in (0, 1)}
    wrong = [r for r in records if f"{r.mmdd} {r.hms}.{r.us}" != f"{stamps[int(r.first[-1])]}.000005"]
    assert len(records) == 16000
    assert not wrong, f"{len(wrong)} records show another record's second, e.g. line {wrong[0].lineno}"


FORK = """
import os, sys
import distvlog.logger as dlog
log = dlog.get_logger()
for i in range({before}):
    log.info(f"parent before fork {{i}}")
pid = os.fork()
if pid == 0:
    for i in range(3):
        log.info(f"child {{i}}")
    sys.exit(0)
log.info("parent after fork")
os.waitpid(pid, 0)
print(pid)
"""


@pytest.mark.parametrize("before", [3, 0], ids=["file-open", "no-file-yet"])
def test_fork_child_writes_its_own_file(scripts, before):
    run = scripts.run(FORK.format(before=before))
    child = int(run.proc.stdout)
    files = {p.name: read_glog(p) for p in run.files()}
    assert sorted(files) == sorted(["rank-0.log", f"rank-0.{child}.log"])
    assert len({p.parent for p in run.files()}) == 1  # one run: the child's file is next to its parent's
    assert [r.first for r in files["rank-0.log"].records] == [f"parent before fork {i}" for i in range(before)] + [
        "parent after fork"
    ]
    assert files[f"rank-0.{child}.log"].meta["pid"] == child
    assert [r.first for r in files[f"rank-0.{child}.log"].records] == ["child 0", "child 1", "child 2"]


PROCESSES = """
import multiprocessing as mp
import distvlog.logger as dlog
log = dlog.get_logger()
def work(k):
    for i in range(3):
        log.info(f"worker {k} record {i}")
if __name__ == "__main__":
    log.info("parent")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=work, args=(k,)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print(*(p.pid for p in procs))
"""


def test_multiprocessing_fork_workers_keep_their_records(scripts):
    """multiprocessing ends a forked worker with os._exit (no atexit): its records must be flushed first."""
    run = scripts.run(PROCESSES)
    pids = [int(p) for p in run.proc.stdout.split()]
    run_dir = run.files()[0].parent
    for k, pid in enumerate(pids):
        records = read_glog(run_dir / f"rank-0.{pid}.log").records
        assert [r.first for r in records] == [f"worker {k} record {i}" for i in range(3)]


IDLE = """
import time
import distvlog.logger as dlog
dlog.get_logger().info("lonely record")
print("ready", flush=True)
time.sleep(120)
"""


def test_an_idle_process_record_is_in_the_file_before_exit(scripts):
    proc = scripts.start(IDLE)
    try:
        wait_for_line(proc, "ready")

        def flushed() -> bool:
            files = scripts.files()
            return bool(files) and b"lonely record" in files[0].read_bytes()

        wait_until(flushed, timeout=30, what="the record in the file")
        assert proc.poll() is None  # in the file while the process lives, not at exit
    finally:
        proc.kill()
        finish(proc)


EACH_CALL = """
import os
import distvlog as dv
import distvlog.logger as dlog
log = dlog.get_logger()
def lines_on_disk():
    return open(dlog.log_file_path()).read().count("\\n")
log.info("info")
lines = [lines_on_disk()]
log.warning("urgent")
lines.append(lines_on_disk())
x = dv.randn([2, 2])
x.stop_gradient = False
with dv.backward_vlog_guard(4):
    (x * 3).sum().backward()
lines.append(lines_on_disk())
log.info("info again")
lines.append(lines_on_disk())
print(*lines)
os._exit(0)
"""


def test_every_record_is_in_the_file_when_its_call_returns(scripts):
    """No flush needed, whatever the record (info, warning, a backward pass's lines): the file is mapped, so
    another process reads each record as soon as the call returns (and os._exit loses none)."""
    run = scripts.run(EACH_CALL, env={"DISTVLOG_FLUSH_INTERVAL": "3600"})  # no timer flush in between
    header = 4  # glog's three lines and the meta record
    info, urgent, backward, again = map(int, run.proc.stdout.split())
    assert (info, urgent) == (header + 1, header + 2)
    assert backward > urgent + 10 and again == backward + 1


@pytest.mark.parametrize(
    "ending, ends_with_end_record",
    [("pass", True), ("raise SystemExit(3)", True), ("1 / 0", False)],
    ids=["normal", "sys.exit(3)", "exception"],
)
def test_a_script_that_ends_leaves_the_end_record_and_one_that_fails_its_failure(scripts, ending, ends_with_end_record):
    """At exit the logger writes END_RECORD (once) as the last record; an unhandled exception's F record is
    the last record instead."""
    run = scripts.run(f"import distvlog.logger as dlog\ndlog.get_logger().info('work')\n{ending}\n", rc=None)
    logged = read_glog(scripts.only_file())
    assert logged.ended is ends_with_end_record, run.proc.stderr
    assert END_RECORD not in [r.first for r in logged.records]  # once, as the last record
    if not ends_with_end_record:
        assert logged.records[-1].severity == "F" and "ZeroDivisionError" in logged.records[-1].text
