"""`distvlog launch --follow`: the live merged timeline of a real MPI job on the launcher's stdout."""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
from launch_testkit import TRAIN, losses, run_dir_of

from distvlog.tools.read import open_sources, read_records

pytestmark = pytest.mark.timeout(300)


def _records(path) -> list[tuple]:
    return [
        (r.rank, r.event.partition("\n")[0][:60], r.fields.get("step"), r.fields.get("bucket"), r.ts)
        for r in read_records(open_sources([str(path)]))
    ]


def test_the_live_timeline_is_the_runs_timeline(run_cli, tmp_path):
    """`launch -n 4 --follow train.py`: stdout holds every record of the run's timeline.log, each once, in
    time order (none late); the ranks' own output (the losses) is in the file stderr names instead."""
    proc = run_cli("launch", "-n", "4", "--follow", TRAIN, "--steps", "4")
    assert proc.returncode == 0, proc.stderr
    run_dir = run_dir_of(proc)
    output = run_dir / "output.txt"
    assert f"distvlog launch: the ranks' stdout and stderr go to {output}\n" in proc.stderr
    assert re.search(r"^distvlog merge: (the job exited|every rank ended); ", proc.stderr, re.M)
    assert len(losses(output.read_text())) == 4 and not losses(proc.stdout)
    live = tmp_path / "live.log"
    live.write_text(proc.stdout)
    got, want = _records(live), _records(run_dir / "timeline.log")
    assert Counter(r[:4] for r in got) == Counter(r[:4] for r in want)
    assert "late_us" not in proc.stdout
    stamps = [r[4] for r in got]
    assert stamps == sorted(stamps)
    assert len({r[0] for r in got}) == 4


def test_ctrl_c_stops_the_job_and_the_view_ends_with_it(start_cli, tmp_path):
    """SIGINT to `launch --follow` (not from its terminal): passed to the ranks, the view shows their last
    records and ends with the job; no traceback."""
    script = tmp_path / "loop.py"
    script.write_text(
        "import time\nimport distvlog as dv\ndv.init()\nlog = dv.get_logger('loop')\n"
        "for i in range(100000):\n    log.info('tick', i=i)\n    time.sleep(0.02)\n"
    )
    proc = start_cli("launch", "-n", "2", "--follow", str(script))
    for line in proc.stdout:
        if re.search(r"\] tick i=20\b", line):
            break
    time.sleep(0.5)
    proc.send_signal(2)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert re.search(r"^distvlog merge: (the job exited|every rank ended)", err, re.M)
    assert "distvlog launch: rank" in err  # where SIGINT found the ranks (the report, after the view)


KILLED = """
import os, signal, time
import distvlog as dv
dv.init()
log = dv.get_logger("job")
for i in range(10):
    log.info("tick", i=i)
    time.sleep(0.05)
if dv.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(1)
"""


def test_a_killed_ranks_death_record_is_in_the_live_view(run_cli, tmp_path):
    """Rank 1 SIGKILLs itself: the view shows every tick on disk and the F record its parent appends about its
    death."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    proc = run_cli("launch", "-n", "2", "--follow", str(script))
    assert proc.returncode == 128 + 9, proc.stderr
    for rank in (0, 1):  # (SIGKILL loses what rank 1 had not written yet: the view shows what its file holds)
        on_disk = re.findall(r"tick i=\d+", (run_dir_of(proc) / f"rank-{rank}.log").read_text())
        assert re.findall(rf"\[rank {rank}\] (tick i=\d+)", proc.stdout) == on_disk
    assert re.search(
        r"^F\S+ \S+ \d+ distvlog:0\] \[rank 1\] the rank's process ended: .*signal=SIGKILL$", proc.stdout, re.M
    )
