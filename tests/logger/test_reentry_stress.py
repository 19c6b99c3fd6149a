"""Re-entering the sink under stress, with real signals and real threads: signal handlers that log, nested
in each other, while the main thread logs in a loop; daemon threads still logging, and a finaliser that
logs, as the interpreter exits."""

from __future__ import annotations

import subprocess
import sys

import pytest
from logger_testkit import finish, wait_for_line

NESTED_HANDLERS = """
import os, signal, subprocess, sys, time
import distvlog as dv

log = dv.get_logger("job")
counts = {"alrm": 0, "usr2": 0}

def on_alrm(signum, frame):
    counts["alrm"] += 1
    log.info("alrm", n=counts["alrm"], pad="a" * 300)

def on_usr2(signum, frame):  # a warning: the locked path, flushed at once, interrupted by SIGALRM's handler
    counts["usr2"] += 1
    log.warning("usr2", n=counts["usr2"], pad="u" * 300)

signal.signal(signal.SIGALRM, on_alrm)
signal.signal(signal.SIGUSR2, on_usr2)
log.info("start")
sender = subprocess.Popen([sys.executable, "-c", f'''
import os, signal, time
while True:
    os.kill({os.getpid()}, signal.SIGUSR2)
    time.sleep(0.0005)
'''])
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
t0, i = time.monotonic(), 0
while time.monotonic() - t0 < 1.0 or counts["usr2"] < 20:
    log.info("main", i=i, pad="m" * 500)  # windows fill and are replaced under the handlers
    i += 1
sender.kill()
sender.wait()
signal.setitimer(signal.ITIMER_REAL, 0)
signal.signal(signal.SIGUSR2, signal.SIG_IGN)
print("counts", counts["alrm"], counts["usr2"], i, flush=True)
if sys.argv[1:] == ["kill"]:
    os.kill(os.getpid(), signal.SIGKILL)  # every record must be in the file already
"""


@pytest.mark.parametrize("end", ["exit", "kill"])
def test_nested_logging_signal_handlers_never_crash_and_lose_nothing(scripts, end):
    """A 0.5 ms SIGALRM timer and a SIGUSR2 from another process, both handlers logging while the main thread
    logs (and fills windows) in a loop: no SIGBUS, no exception into a handler, every handler's record in the
    file whole, also when the process is SIGKILLed right after (nothing waits in a buffer)."""
    proc = _start_with(scripts, scripts.write(NESTED_HANDLERS), *(["kill"] if end == "kill" else []))
    counts = wait_for_line(proc, "counts").split()[1:]
    rc, err = _finish(scripts, proc)
    assert rc == (0 if end == "exit" else -9), err
    assert "Traceback" not in err and "Error" not in err, err[-2000:]
    alrm, usr2, main = map(int, counts)
    records = scripts.records()  # strict: every line inside a whole record
    firsts = [r.first.split(" ", 1)[0] for r in records]
    assert (firsts.count("alrm"), firsts.count("usr2"), firsts.count("main")) == (alrm, usr2, main)
    assert alrm > 0 and usr2 >= 20


def _start_with(scripts, script, *args):
    """Start `script`; its stderr (every warning echoed: more than a pipe holds) goes to a file."""
    with open(scripts.tmp / "stderr", "w") as err:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            env=scripts.env(),
            cwd=scripts.tmp,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


def _finish(scripts, proc) -> tuple[int, str]:
    """(returncode, stderr) of a script started by `_start_with`, once it exits (a hang fails the test)."""
    rc, _, _ = finish(proc)
    return rc, (scripts.tmp / "stderr").read_text()


AT_EXIT = """
import gc, threading, time
import distvlog as dv

log = dv.get_logger("job")

def metrics(k):  # a metrics / prefetch thread that logs until the interpreter freezes it
    i = 0
    while True:
        log.info("metric", k=k, i=i)
        if i % 50 == 0:
            log.warning("metric warning", k=k, i=i)  # (the locked path: flushed and echoed)
        i += 1

for k in range(3):
    threading.Thread(target=metrics, args=(k,), daemon=True).start()

class Library:
    def __del__(self, log=log):
        for j in range(20):
            log.info("from __del__", j=j)

gc.disable()  # the library's object is garbage in a cycle, collected as the interpreter shuts down
obj = Library()
obj.me = obj
del obj
time.sleep(0.2)
print("main done", flush=True)
"""


@pytest.mark.parametrize("attempt", [1, 2])
def test_daemon_threads_and_a_finaliser_logging_at_exit_never_hang(scripts, attempt):
    """The interpreter freezes daemon threads as it exits, maybe holding the sink's lock; a __del__ then
    logs: the process exits (it hung forever), with the finaliser's records in the file."""
    proc = _start_with(scripts, scripts.write(AT_EXIT))
    wait_for_line(proc, "main done")
    rc, err = _finish(scripts, proc)
    assert rc == 0, err
    data = scripts.only_file().read_bytes()
    assert data.count(b"] [rank 0] from __del__ j=") == 20
    assert b"\0" not in data
