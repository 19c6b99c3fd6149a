"""lnav's built-in glog format reads our files: every line after glog's three header lines belongs to a
parsed record with the record's level (CI installs lnav; elsewhere the test is skipped)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess

import pytest
from logger_testkit import HANG_TIMEOUT_S, read_glog

LNAV = shutil.which("lnav")
LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "fatal"}

MIXED = """
import logging, threading
import distvlog as dv
import distvlog.logger as dlog
dlog.capture_stdlib()
log = dlog.get_logger()
log.info("plain", step=1, note="a b")
log.warning("two lines\\n  and the second")
log.error("\\nstarts with a newline")
log.info("ends with a newline\\n")
log.info("blank lines\\n\\n\\ninside")
log.info("")
log.critical("critical", value=[1, 2])
logging.getLogger("thirdparty").warning("from the stdlib %d", 3)
try:
    {}["missing"]
except KeyError:
    log.exception("caught")
t = threading.Thread(target=lambda: log.vlog(0, "from a thread"))
t.start()
t.join()
x = dv.randn([4, 3])
x.stop_gradient = False
with dv.backward_vlog_guard(4):  # the engine's multi-line node records
    loss = (dv.tanh(x @ dv.randn([3, 2])) * 2).sum()
    loss.backward()
raise SystemExit(0)
"""


def _lnav_rows(path, home) -> list[tuple[int, str]]:
    proc = subprocess.run(
        [LNAV, "-n", "-c", ";SELECT log_line, log_level FROM glog_log", "-c", ":write-csv-to -", str(path)],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
        env=dict(os.environ, HOME=str(home)),
    )
    assert proc.returncode == 0, proc.stderr
    return [(int(row["log_line"]), row["log_level"]) for row in csv.DictReader(io.StringIO(proc.stdout))]


@pytest.mark.skipif(LNAV is None, reason="lnav is not installed (CI installs it with apt)")
def test_lnav_parses_every_record(scripts):
    run = scripts.run(MIXED)
    path = run.only_file()
    glog = read_glog(path)
    assert sum(len(r.more) for r in glog.records) > 50  # a multi-line heavy file
    expected = (
        [(n, "unknown") for n in range(3)]
        + [(3, "info")]
        + [(r.lineno, LEVELS[r.severity]) for r in glog.records]
        + [(path.read_text().count("\n") - 1, "info")]  # the end record
    )
    assert glog.ended
    assert _lnav_rows(path, scripts.tmp) == expected
