"""A rank of a job that `merge --follow` watches: it logs COUNT records PAUSE seconds apart (every fifth one
spans three lines), starting after START seconds; with DIE_AT it SIGKILLs itself before record DIE_AT.

    python -m distvlog.launch.supervise follow_writer.py COUNT PAUSE [START [DIE_AT]]
"""

from __future__ import annotations

import os
import signal
import sys
import time

import distvlog as dv

count, pause = int(sys.argv[1]), float(sys.argv[2])
start = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
die_at = int(sys.argv[4]) if len(sys.argv) > 4 else -1
time.sleep(start)
log = dv.get_logger("writer")
for i in range(count):
    if i == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if i % 5 == 4:
        log.info(f"tick {i}\n  second line of {i}\n  third line of {i}", i=i)
    else:
        log.info(f"tick {i}", i=i)
    time.sleep(pause)
