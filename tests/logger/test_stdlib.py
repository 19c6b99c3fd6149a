"""capture_stdlib(): records of Python's `logging` land in the rank file with our prefix, their own
severity, the stdlib caller's file:line and a `logger=<name>` field."""

from __future__ import annotations

from logger_testkit import GLOG_PREFIX, line_of

LIBRARY = """
import logging
lib = logging.getLogger("thirdparty.io")
def load():
    lib.info("loading %s", "shard-1")  # @lib
"""

CAPTURE = """
import logging
import distvlog.logger as dlog
import library
logging.getLogger().addHandler(logging.StreamHandler())  # other handlers keep working
logging.getLogger("early").warning("before capture")
dlog.capture_stdlib()
other = logging.getLogger("other")
library.load()
other.debug("not at INFO")
other.warning("watch out")  # @warning
other.error("went wrong")  # @error
other.critical("fatal")  # @critical
try:
    1 / 0
except ZeroDivisionError:
    other.exception("with traceback")  # @exception
dlog.capture_stdlib(logging.DEBUG, logger="other")
other.debug("now at DEBUG")  # @debug
"""


def test_stdlib_records_land_in_the_rank_file(scripts):
    scripts.write(LIBRARY, name="library.py")
    run = scripts.run(CAPTURE)
    records = run.records()
    assert [(r.severity, r.file, r.line, r.first) for r in records] == [
        ("I", "library.py", line_of(LIBRARY, "lib"), "loading shard-1 logger=thirdparty.io"),
        ("W", "script.py", line_of(CAPTURE, "warning"), "watch out logger=other"),
        ("E", "script.py", line_of(CAPTURE, "error"), "went wrong logger=other"),
        ("F", "script.py", line_of(CAPTURE, "critical"), "fatal logger=other"),
        ("E", "script.py", line_of(CAPTURE, "exception"), "with traceback logger=other"),
        ("I", "script.py", line_of(CAPTURE, "debug"), "now at DEBUG v=1 logger=other"),
    ]
    assert records[4].more[0] == "Traceback (most recent call last):"
    assert records[4].more[-1] == "ZeroDivisionError: division by zero"
    stderr = run.proc.stderr.splitlines()
    assert "before capture" in stderr and "watch out" in stderr  # the StreamHandler still prints
    assert any(GLOG_PREFIX.match(line) and line.endswith("watch out logger=other") for line in stderr)
