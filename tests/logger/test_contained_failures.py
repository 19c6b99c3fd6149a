"""A log call never raises and the logger's threads never die: values that cannot be rendered become
placeholders naming their type; records that cannot be written (a file-size limit, a full filesystem, the
log directory deleted) are dropped and counted, said once on stderr, and once writing works again the file
says how many were dropped and why (the format's DROPPED record), then goes on.

Real limits only: RLIMIT_FSIZE set by the script on itself, a real 1 MB tmpfs (needs root to mount; skipped
otherwise), a real `rm -r` of the run directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from logger_testkit import finish, read_glog, read_jsonl, wait_for_line, wait_until

from distvlog import format as fmt

UNRENDERABLE = """
import distvlog as dv
log = dv.get_logger("job")

class Broken:
    def __repr__(self): raise RuntimeError("no repr")
    def __str__(self): raise RuntimeError("no str")

deep = []
for _ in range(100_000):
    deep = [deep]
looped = {"name": "loop"}
looped["self"] = looped
log.info("broken", value=Broken(), n=1)
log.info(Broken())
log.info("deep", value=deep, n=2)
log.info("looped", value=looped, n=3)
log.warning("surrogate \\udc80", value="x\\ud800y", n=4)
print("all logged")
"""


@pytest.mark.parametrize("fmt_name", ["glog", "jsonl"])
def test_values_that_cannot_be_rendered_become_placeholders_naming_their_type(scripts, fmt_name):
    """A __str__/__repr__ that raises, nesting too deep for the JSON writer, a container holding itself, lone
    surrogates: the call returns, the record is written with the rest of its fields, the value as
    `<unrenderable TYPE: ERROR>`; stderr says it once."""
    run = scripts.run(UNRENDERABLE, env={"DISTVLOG_FORMAT": fmt_name})
    assert run.proc.stdout == "all logged\n"
    assert run.proc.stderr.count("could not be rendered") == 1, run.proc.stderr
    if fmt_name == "glog":
        records = [(r.first, r.severity) for r in run.glog().records]
        assert records == [
            ('broken value="<unrenderable Broken: RuntimeError>" n=1', "I"),
            ("<unrenderable Broken: RuntimeError>", "I"),
            ('deep value="<unrenderable list: RecursionError>" n=2', "I"),
            ('looped value="<unrenderable dict: RecursionError>" n=3', "I"),
            (r'"surrogate \udc80" value="x\ud800y" n=4', "W"),
        ]
    else:
        _, objs = read_jsonl(run.only_file())
        assert [(o["event"], o.get("value")) for o in objs] == [
            ("broken", "<unrenderable Broken: RuntimeError>"),
            ("<unrenderable Broken: RuntimeError>", None),
            ("deep", "<unrenderable list: RecursionError>"),
            ("looped", "<unrenderable dict: RecursionError>"),
            ("surrogate \udc80", "x\ud800y"),
        ]


FAILING_PROCESSOR = """
import distvlog as dv
from distvlog.logger import add_processor

def broken(logger, method, ed):
    raise ValueError("my processor failed")

add_processor(broken)
dv.get_logger("job").info("kept", step=3)
print("returned")
"""


def test_a_processor_that_raises_does_not_reach_the_caller(scripts):
    """A user's processor that raises: the call returns and the record is written with its own fields."""
    run = scripts.run(FAILING_PROCESSOR)
    assert run.proc.stdout == "returned\n"
    assert "ValueError: my processor failed" in run.proc.stderr
    assert [r.first for r in run.records()] == ["kept step=3"]


def _dropped(record_first: str) -> tuple[int, str]:
    body = fmt.split_body(record_first)
    assert body.message.startswith(fmt.DROPPED), record_first
    return body.fields[fmt.DROPPED_COUNT], body.fields[fmt.DROPPED_REASON]


def _ids(records) -> list[int]:
    return [int(r.first.rsplit(" i=", 1)[1]) for r in records if r.first.startswith("filler ")]


SIZE_LIMIT = """
import resource
import distvlog as dv

log = dv.get_logger("job")
log.info("first")
dv.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (dv.logger.log_file_path().stat().st_size + 5000, hard))
for i in range(10000):  # ~75 bytes each: the limit is met once the window reserved at open (256 KB) is full
    log.info("filler", i=i)
dv.flush()
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
log.info("after")
dv.flush()
print("survived")
"""


def test_a_file_size_limit_drops_counted_records_and_logging_resumes(scripts):
    """EFBIG under RLIMIT_FSIZE: no exception, one line on stderr naming the file and the error, no torn
    record; once the limit is raised the next write starts with the DROPPED record, and the records kept
    plus those it counts are exactly those logged."""
    run = scripts.run(SIZE_LIMIT)
    assert run.proc.stdout == "survived\n"
    said = [line for line in run.proc.stderr.splitlines() if "cannot write" in line]
    assert len(said) == 1 and "(EFBIG)" in said[0] and str(run.only_file()) in said[0], run.proc.stderr
    records = run.records()  # read strictly: whole records only
    assert records[0].first == "first" and records[-1].first == "after"
    dropped = [r for r in records if r.first.startswith(fmt.DROPPED)]
    assert len(dropped) == 1 and dropped[0].severity == "W" and records[-2] is dropped[0]
    count, reason = _dropped(dropped[0].first)
    kept = _ids(records)
    assert kept == list(range(len(kept))) and len(kept) + count == 10000 and count > 0
    assert reason == "File too large (EFBIG)"


SLOW_UNDER_LIMIT = """
import resource, threading, time
import distvlog as dv

log = dv.get_logger("job")
log.info("first")
dv.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (dv.logger.log_file_path().stat().st_size, hard))
for i in range(1800):  # ~170 bytes each: the window reserved at open (256 KB) holds ~1500, and the rest
    log.info("filler", pad="x" * 100, i=i)  # (< 64 KB) wait in the buffer for the flush thread
time.sleep(0.5)  # the flush thread's turn (interval 0.02 s): it meets the limit, not this thread
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
log.info("after")
print("threads", sorted(t.name for t in threading.enumerate()), flush=True)
time.sleep(3600)
"""


def test_the_flush_thread_survives_a_failed_write_and_resumes(scripts):
    """The timer's flush meets the limit: the thread lives on, and once the limit is raised it writes the
    DROPPED record and the next records without any explicit flush."""
    proc = scripts.start(SLOW_UNDER_LIMIT, env={"DISTVLOG_FLUSH_INTERVAL": "0.02"})
    try:
        assert "distvlog-flush" in wait_for_line(proc, "threads")
        wait_until(lambda: scripts.files() and b"] [rank 0] after\n" in scripts.only_file().read_bytes())
    finally:
        proc.kill()
        _, _, err = finish(proc)
    assert "Exception in thread" not in err and err.count("cannot write") == 1, err
    records = scripts.records()
    count, reason = _dropped(records[-2].first)
    kept = _ids(records)
    assert kept == list(range(len(kept))) and len(kept) + count == 1800 and count > 0
    assert reason == "File too large (EFBIG)"


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MB tmpfs at tmp_path/fs (root only: mounting needs it)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


FULL_DISK = """
import os, sys
import distvlog as dv

log = dv.get_logger("job")
log.info("first")
dv.flush()
ballast = sys.argv[1]
fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
try:
    while True:  # until the filesystem is full (tmpfs: no reserved blocks)
        os.write(fd, b"x" * 4096)
except OSError:
    os.close(fd)
for i in range(10000):  # more than the window reserved at open (256 KB) holds
    log.info("filler", i=i)
dv.flush()
os.unlink(ballast)  # space freed
log.info("after")
dv.flush()
print("survived")
"""


def test_a_full_filesystem_drops_counted_records_and_logging_resumes(scripts, small_fs):
    """ENOSPC on a real full tmpfs: as with a size limit, counted, said once, resumed once space is freed."""
    script = scripts.write(FULL_DISK)
    proc = subprocess.run(
        [sys.executable, str(script), str(small_fs / "ballast")],
        env=scripts.env({"DISTVLOG_LOG_DIR": str(small_fs / "logs")}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout == "survived\n", proc.stderr
    assert proc.stderr.count("cannot write") == 1 and "(ENOSPC)" in proc.stderr, proc.stderr
    (path,) = [p for p in (small_fs / "logs").glob("*/rank-0.log") if p.parent.name != "latest"]
    records = read_glog(path).records
    count, reason = _dropped(records[-2].first)
    kept = _ids(records)
    assert kept == list(range(len(kept))) and len(kept) + count == 10000 and count > 0
    assert reason == "No space left on device (ENOSPC)" and records[-1].first == "after"


DELETED = """
import shutil
import distvlog as dv

log = dv.get_logger("job")
log.info("before")
dv.flush()
path = dv.logger.log_file_path()
shutil.rmtree(path.parent)  # the run directory, as a careless cleanup would
log.info("after")
dv.flush()
print(path)
"""


def test_a_deleted_log_directory_is_said_and_the_file_created_again(scripts):
    """The run directory removed under a running process: said once on stderr, the file created again at
    its path with its header, a DROPPED record saying why, then the records logged since."""
    run = scripts.run(DELETED)
    path = Path(run.proc.stdout.strip())
    assert run.proc.stderr.count("cannot write") == 1 and "the log file was deleted" in run.proc.stderr
    log = read_glog(path)
    assert log.meta["run_id"] == path.parent.name and log.meta["pid"] > 0
    assert [r.first for r in log.records][1:] == ["after"]
    count, reason = _dropped(log.records[0].first)
    assert (count, reason) == (0, "the log file was deleted")


def test_a_log_root_deleted_for_good_drops_records_without_raising(scripts):
    """The whole log root removed: nothing to write into (the root is not created again), every later call
    returns and the process ends normally."""
    code = DELETED.replace("shutil.rmtree(path.parent)", "shutil.rmtree(path.parent.parent)")
    run = scripts.run(code)
    assert run.proc.stderr.count("cannot write") == 1
    assert not scripts.log_dir.exists()


def test_dropped_count_matches_the_records_of_a_failed_write():
    """The format counts a buffer's records by their first lines: continuation lines never count."""
    text = (
        b"I1201 10:00:00.000001 1 a.py:1] [rank 0] one\n"
        b"W1201 10:00:00.000002 1 a.py:2] [rank 0] two +lines=2\n  I1201 x\n  [rank 0]\n"
    )
    assert fmt.count_records(text, "glog") == 2
    assert fmt.count_records(b'{"a":1}\n{"b":2}\n', "jsonl") == 2
