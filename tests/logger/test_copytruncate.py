"""logrotate's `copytruncate` on the files of a running job, with the documented `DISTVLOG_MMAP=0`: every
record is whole in the rotated copy or in the live file, the live file starts again with its header (its
meta record, the clock offsets measured since), and the clock slot rewritten at `dv.finalize()` lands in
that header, never over the records logged after the truncation.

Real ranks under `distvlog launch -n 2`; the rotation is the real `logrotate -f` (skipped, saying so, where it
is not installed) and the same copy-then-truncate done by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from logger_testkit import HANG_TIMEOUT_S, GlogFile, read_glog, wait_until

from distvlog import format as fmt

PER_PHASE = 200  # records a rank logs before the rotation, and again after it

ROTATED_JOB = f"""
import sys, time
from pathlib import Path
import distvlog as dv
dv.init()
log = dv.get_logger("job")
rank = dv.get_rank()
for i in range({PER_PHASE}):
    log.info("before", i=i)
dv.flush()
here = Path(sys.argv[1])
(here / f"ready-{{rank}}").write_text(str(dv.logger.log_file_path()))
while not (here / "rotated").exists():  # the test rotates the files meanwhile
    time.sleep(0.01)
for i in range({PER_PHASE}):
    log.info("after", i=i)
dv.finalize()  # measures the clock offsets again: rewrites the header's clock_end slot
"""


def _logrotate(paths: list[Path], tmp: Path) -> None:
    """`logrotate -f` with copytruncate over `paths`: each copied to `<path>.1`, then truncated."""
    conf = tmp / "logrotate.conf"
    conf.write_text(f"{' '.join(map(str, paths))} {{\n  copytruncate\n  rotate 1\n  missingok\n}}\n")
    subprocess.run(
        ["logrotate", "-f", "-s", str(tmp / "logrotate.state"), str(conf)],
        check=True,
        capture_output=True,
        timeout=HANG_TIMEOUT_S,
    )


def _by_hand(paths: list[Path], tmp: Path) -> None:
    """What copytruncate does: copy the file, then truncate it in place (the writer keeps its descriptor)."""
    for path in paths:
        shutil.copyfile(path, f"{path}.1")
        path.write_bytes(b"")


def _script_records(log: GlogFile) -> list[str]:
    return [r.first for r in log.records if r.file == "script.py"]


LOGROTATE = pytest.mark.skipif(shutil.which("logrotate") is None, reason="logrotate is not installed")


@pytest.mark.parametrize("rotate", [pytest.param(_logrotate, marks=LOGROTATE), _by_hand], ids=["logrotate", "by-hand"])
def test_copytruncate_under_launch_keeps_every_record_whole(scripts, tmp_path, rotate):
    """Each rank's records are split between `rank-R.log.1` (before) and `rank-R.log` (after), every one
    whole and none twice; the live file is a rank file again, its header carrying both clock slots; and
    `merge` reads the run with nothing skipped."""
    script = scripts.write(ROTATED_JOB)
    job = subprocess.Popen(
        [sys.executable, "-m", "distvlog", "launch", "-n", "2", str(script), str(tmp_path)],
        env=scripts.env({"DISTVLOG_MMAP": "0"}),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = [tmp_path / f"ready-{rank}" for rank in range(2)]
        wait_until(lambda: all(p.exists() for p in ready) or job.poll() is not None, HANG_TIMEOUT_S, "the ranks")
        assert job.poll() is None, job.communicate()
        paths = [Path(p.read_text()) for p in ready]
        rotate(paths, tmp_path)
        (tmp_path / "rotated").touch()
        out, err = job.communicate(timeout=HANG_TIMEOUT_S)
    finally:
        job.kill()
    assert job.returncode == 0, f"{out}\n{err}"
    for rank, path in enumerate(paths):
        copy, live = read_glog(Path(f"{path}.1")), read_glog(path)
        assert _script_records(copy) == [f"before i={i}" for i in range(PER_PHASE)]
        assert _script_records(live) == [f"after i={i}" for i in range(PER_PHASE)] and live.ended
        assert live.meta == {**copy.meta, fmt.CLOCK_END: live.meta[fmt.CLOCK_END]}, "the same process's header"
        assert fmt.clock_of_slot(live.meta[fmt.CLOCK_END]), f"rank {rank}: clock_end not measured"
    merge = subprocess.run(
        [sys.executable, "-m", "distvlog", "merge", str(paths[0].parent), "-o", str(tmp_path / "timeline.log")],
        env=scripts.env(),
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )
    assert merge.returncode == 0 and "; 0 lines skipped" in merge.stderr, merge.stderr
    each = len(read_glog(paths[0]).records) + 2  # (+ the meta and the end records)
    assert f"ranks 0,1: {each} each" in merge.stderr, merge.stderr
