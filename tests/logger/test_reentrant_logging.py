"""Logging from a signal handler, an atexit hook or a __del__ at shutdown works at any moment, including
while the file is being created: one run, one directory, one descriptor, every record once."""

from __future__ import annotations

SIGNAL_DURING_OPEN = """
import os, signal, sys
import distvlog as dv

log = dv.get_logger("job")
signal.signal(signal.SIGUSR1, lambda signum, frame: log.info("from the handler"))

def audit(event, args):  # a real signal, raised while the logger opens its file (between two of its steps)
    if event == "open" and str(args[0]).endswith("rank-0.log") and (args[2] or 0) & os.O_CREAT:
        signal.raise_signal(signal.SIGUSR1)

sys.addaudithook(audit)
log.info("first record")
dv.flush()
fds = os.listdir("/proc/self/fd")  # (one of them is the listing's own, gone by now)
links = [os.readlink(f"/proc/self/fd/{fd}") for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")]
windows = [line for line in open("/proc/self/maps") if line.rstrip().endswith(".log")]
print(sorted(link for link in links if link.endswith(".log")), len(windows))
"""


def test_a_handler_logging_while_the_file_is_created_joins_that_file(scripts):
    """A signal handler that logs while the first record creates the file: its record waits in the buffer
    and lands in the same file; no second run directory (`<run>.1`), no leaked descriptor."""
    run = scripts.run(SIGNAL_DURING_OPEN)
    (path,) = run.files()
    # the one open descriptor of a rank file is this one, and the one its mapped window holds (a dup)
    assert run.proc.stdout == f"[{str(path)!r}, {str(path)!r}] 1\n"
    assert sorted(p.name for p in scripts.log_dir.iterdir()) == [path.parent.name, "latest"]
    assert sorted(r.first for r in run.records()) == ["first record", "from the handler"]


AT_SHUTDOWN = """
import atexit
import distvlog as dv

log = dv.get_logger("job")

class Late:
    def __del__(self):
        log.info("from __del__ at shutdown")

late = Late()  # collected as the interpreter finalises its modules
{more}
"""
ATEXIT = 'atexit.register(lambda: log.info("from atexit"))'


def test_a_first_record_from_del_at_shutdown_is_written(scripts):
    """A __del__ run while the interpreter shuts down logs the process's first record: the file is created
    and the record written (no flush thread can start then; nothing hangs)."""
    run = scripts.run(AT_SHUTDOWN.format(more=""))
    assert [r.first for r in run.records()] == ["from __del__ at shutdown"]


def test_records_from_atexit_and_del_at_shutdown_are_written_in_order(scripts):
    """An atexit hook's first record opens the file; a __del__ after it still logs into the same file."""
    run = scripts.run(AT_SHUTDOWN.format(more=ATEXIT))
    assert [r.first for r in run.records()] == ["from atexit", "from __del__ at shutdown"]
