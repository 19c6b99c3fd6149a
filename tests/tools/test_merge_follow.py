"""`distvlog merge --follow`: the timeline of a running job, from real rank processes writing while it runs.

Ranks are real processes (RANK/WORLD_SIZE, as torchrun starts them) running follow_writer.py under
`distvlog.launch.supervise`; follow runs as the `distvlog` command. Order and completeness are asserted exactly,
against `distvlog merge` of the same files afterwards; times only loosely (a loaded 2-core machine), and
timeouts only guard against hangs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from distvlog import format as fmt
from distvlog.tools.read import open_sources, read_records

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("follow_writer.py")
HANG_S = 180
WORLD = 4


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    launched = ("DISTVLOG_", "GLOG_", "PMI_", "PMIX_", "OMPI_", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launched)}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp / "logs"), DISTVLOG_RUN_ID="live", **extra)
    return env


def start_rank(tmp: Path, rank: int, *args: object, launched: bool = True, **env: str) -> subprocess.Popen:
    """One rank of a WORLD-rank job writing into run `live`: follow_writer.py ARGS, run as `distvlog launch`
    runs a rank (its end record at the end; a parent that records how it died) or as a plain script."""
    runner = ["-m", "distvlog.launch.supervise"] if launched else []
    return subprocess.Popen(
        [sys.executable, *runner, str(WRITER), *map(str, args)],
        env=_env(tmp, RANK=str(rank), WORLD_SIZE=str(WORLD), **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_follow(tmp: Path, *args: object) -> subprocess.Popen:
    """`distvlog merge --follow ARGS` (the run directory is made first, as `distvlog launch` makes it)."""
    (tmp / "logs" / "live").mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "distvlog", "merge", "--follow", *map(str, args)],
        env=_env(tmp),
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def written(tmp: Path, ranks: int) -> None:
    """Wait until `ranks` rank files of run `live` hold their first tick (the timeout guards against hangs)."""
    deadline = time.monotonic() + HANG_S
    while sum(b"] tick 0" in p.read_bytes() for p in (tmp / "logs" / "live").glob("rank-*.log")) < ranks:
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Wait for follow to end by itself: its exit code and stderr."""
    _, err = proc.communicate(timeout=HANG_S)
    return proc.returncode, err.decode()


def records(path: Path) -> list[tuple]:
    """(rank, first line of the message, i, late_us) of every record of PATH, in its order, read back by
    distvlog's reader."""
    out = []
    for record in read_records(open_sources([str(path)])):
        fields = record.fields
        out.append((record.rank, record.event.partition("\n")[0][:40], fields.get("i"), fields.get("late_us")))
    return out


def merged(tmp: Path) -> list[tuple]:
    """The run's records as `distvlog merge` orders them, after the job."""
    out = tmp / "merged.log"
    subprocess.run(
        [sys.executable, "-m", "distvlog", "merge", str(tmp / "logs" / "live"), "-o", str(out)],
        env=_env(tmp),
        check=True,
        capture_output=True,
        timeout=HANG_S,
    )
    return records(out)


def test_every_record_is_printed_once_in_time_order(tmp_path):
    """Four ranks writing over ~2 s: follow prints exactly the records `merge` prints afterwards, in the same
    order, none marked late, and ends by itself when every rank has ended."""
    follow = start_follow(tmp_path, "logs/live", "-o", "out.log", "--delay", "30")
    ranks = [start_rank(tmp_path, r, 30, 0.07) for r in range(WORLD)]
    for rank in ranks:
        assert rank.wait(timeout=HANG_S) == 0
    code, err = finish(follow)
    assert code == 0, err
    assert "distvlog merge: every rank ended; 128 records from 4 files (ranks 0-3: 32 each)" in err  # meta, 30, end
    got = records(tmp_path / "out.log")
    assert got == merged(tmp_path)
    assert [late for *_, late in got] == [None] * len(got)


def test_records_appear_while_the_job_runs(tmp_path):
    """With --delay 0.5, records reach the output while the ranks are still writing: the first tick is out
    long before the last is written, and every record within a loose bound of its time."""
    follow = start_follow(tmp_path, "logs/live", "--delay", "0.5")
    seen: list[tuple[float, bytes]] = []
    reader = threading.Thread(target=lambda: seen.extend((time.time(), line) for line in follow.stdout))
    reader.start()
    ranks = [start_rank(tmp_path, r, 40, 0.1) for r in range(2)] + [start_rank(tmp_path, r, 1, 0) for r in (2, 3)]
    for rank in ranks:
        rank.wait(timeout=HANG_S)
    code, err = finish(follow)
    reader.join(timeout=HANG_S)
    assert code == 0, err
    ticks = [(when, line) for when, line in seen if b"] tick " in line]
    assert len(ticks) == 2 * 40 + 2
    last_tick_ts = max(_epoch(line) for _, line in ticks)
    assert ticks[0][0] < last_tick_ts / 1e6 - 1.0  # (the writers take ~4 s)
    lags = sorted(when - _epoch(line) / 1e6 for when, line in ticks)
    assert lags[len(lags) // 2] < 0.5 + 10  # the delay, plus the flush interval, plus a loaded machine


def _epoch(line: bytes) -> int:
    """A record line's time (epoch µs), read as the format reads it: local time of this machine."""
    stamp = line[1:21].decode()
    year = time.localtime().tm_year
    parsed = time.strptime(f"{year}{stamp[:-7]}", "%Y%m%d %H:%M:%S")
    return int(time.mktime(parsed)) * 1_000_000 + int(stamp[-6:])


def test_a_rank_that_starts_late_is_picked_up(tmp_path):
    """Rank 3 starts 2.5 s after the others (its file appears late, past the delay): all its records are
    printed, in order with the others'."""
    follow = start_follow(tmp_path, "logs/live", "-o", "out.log", "--delay", "1")
    ranks = [start_rank(tmp_path, r, 30, 0.1) for r in range(3)]
    time.sleep(2.5)
    ranks.append(start_rank(tmp_path, 3, 10, 0.05))
    for rank in ranks:
        assert rank.wait(timeout=HANG_S) == 0
    code, err = finish(follow)
    assert code == 0, err
    got = records(tmp_path / "out.log")
    assert sorted(map(str, got)) == sorted(map(str, merged(tmp_path)))
    assert [r for r in got if r[0] == 3 and r[2] is not None] == [(3, f"tick {i}", i, None) for i in range(10)]


def test_a_killed_rank_is_named_and_the_others_followed_to_their_end(tmp_path):
    """Rank 1, a plain script (no end record, no parent to say how it died), SIGKILLs itself before its 12th
    record: follow finds its pid gone and says so once, prints what it wrote, and goes on until the other
    ranks end."""
    ranks = [start_rank(tmp_path, r, 30, 0.07, 0, 11 if r == 1 else -1, launched=r != 1) for r in range(WORLD)]
    written(tmp_path, WORLD)  # (on a loaded machine follow could see rank 1 die before the others started)
    follow = start_follow(tmp_path, "logs/live", "-o", "out.log")
    codes = [rank.wait(timeout=HANG_S) for rank in ranks]
    assert codes == [0, -signal.SIGKILL, 0, 0]
    code, err = finish(follow)
    assert code == 0, err
    assert err.count(f"rank 1 (pid {ranks[1].pid}) is gone without its end record (killed?)") == 1, err
    assert "every rank ended (rank 1 without its end record)" in err
    got = records(tmp_path / "out.log")
    assert sorted(map(str, got)) == sorted(map(str, merged(tmp_path)))
    assert len([r for r in got if r[0] != 1 and r[2] is not None]) == 3 * 30


def test_no_rank_writing_for_the_idle_time_ends_it(tmp_path):
    """Rank 0 hangs after its first record while the others end: follow ends after --idle seconds, having
    printed everything."""
    ranks = [start_rank(tmp_path, r, 2, 0.05 if r else 600) for r in range(WORLD)]
    written(tmp_path, WORLD)  # (else a rank still starting on a loaded machine could be idle for 3 s)
    follow = start_follow(tmp_path, "logs/live", "-o", "out.log", "--idle", "3")
    try:
        code, err = finish(follow)
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
    assert code == 0, err
    assert "distvlog merge: no rank wrote for 3 s;" in err
    ticks = sorted((r[0], r[2]) for r in records(tmp_path / "out.log") if r[2] is not None)
    assert ticks == [(0, 0)] + [(r, i) for r in range(1, WORLD) for i in range(2)]


def test_ctrl_c_ends_it_with_130_and_no_traceback(tmp_path):
    """SIGINT while following: exit 130, a summary, no traceback."""
    follow = start_follow(tmp_path, "logs/live")
    rank = start_rank(tmp_path, 0, 1000, 0.05)
    try:
        for line in follow.stdout:
            if b"] tick 3" in line:
                break
        follow.send_signal(signal.SIGINT)
        code, err = finish(follow)
    finally:
        rank.kill()
        rank.wait()
    assert code == 130
    assert "Traceback" not in err
    assert "distvlog merge: interrupted; " in err


def test_a_truncated_file_is_read_again_from_its_start(tmp_path):
    """A rank file truncated under a running rank: follow says so once, reads it from its start again
    (the rank's later writes land past a hole of NULs, which is padding) and prints what is there."""
    follow = start_follow(tmp_path, "logs/live", "-o", "out.log")
    # (a file mapped by its writer and truncated under it kills the writer with SIGBUS: these write with write())
    ranks = [start_rank(tmp_path, r, 40, 0.05, DISTVLOG_MMAP="0") for r in range(2)]
    ranks += [start_rank(tmp_path, r, 1, 0) for r in (2, 3)]
    path = tmp_path / "logs" / "live" / "rank-0.log"
    deadline = time.monotonic() + HANG_S
    while b"tick 10 " not in (path.read_bytes() if path.exists() else b"") and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # (follow reads the first ticks)
    os.truncate(path, 0)
    for rank in ranks:
        assert rank.wait(timeout=HANG_S) == 0
    code, err = finish(follow)
    assert code == 0, err
    assert err.count("rank-0.log was truncated: reading it again from its start") == 1, err
    out = {r for r in records(tmp_path / "out.log") if r[0] == 0 and r[2] is not None}
    after = {r for r in records(path) if r[2] is not None}  # what rank 0 wrote after the truncation
    assert after and after <= out
    assert max(r[2] for r in out) == 39


# -- a sink that reserves space: records written into NUL padding, a record completed later --------------------
def _meta(rank: int, pid: int) -> dict:
    return fmt.make_meta(
        rank=rank, world_size=2, host=os.uname().nodename, pid=pid, tid=1, run_id="live", fmt="glog", created_us=T0
    )


T0 = int(time.time()) * 1_000_000


def _record(rank: int, ts: int, message: str, **fields: object) -> bytes:
    return fmt.GlogWriter().records(ts, "I", 1, "hand.py", 1, rank, [(message, fmt.pairs_of(fields))])


def _wait_for(path: Path, text: bytes) -> None:
    deadline = time.monotonic() + HANG_S
    while text not in (path.read_bytes() if path.exists() else b""):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


def test_reserved_space_is_read_as_it_fills_and_a_cut_record_waited_for(tmp_path):
    """Rank files preallocated with NULs, records written into them: follow prints each record once it is
    whole (a three-line record whose last lines come later is waited for, never printed torn)."""
    run = tmp_path / "logs" / "live"
    run.mkdir(parents=True)
    files = []
    for rank in range(2):
        fd = os.open(run / f"rank-{rank}.log", os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, 1 << 20)  # space reserved: all NULs
        head = fmt.GlogWriter().header(_meta(rank, os.getpid()))
        os.pwrite(fd, head, 0)
        files.append([fd, len(head)])

    def put(rank: int, data: bytes) -> None:
        fd, at = files[rank]
        os.pwrite(fd, data, at)
        files[rank][1] += len(data)

    follow = start_follow(tmp_path, "logs/live", "-o", "out.log", "--delay", "0.2", "--idle", "3")
    put(0, _record(0, T0 + 1000, "first", i=1))
    three = _record(1, T0 + 2000, "three\n  lines\n  here", i=2)
    put(1, three[: three.index(b"\n") + 1])  # the first line and its count, not yet its other lines
    _wait_for(tmp_path / "out.log", b"] first i=1")
    time.sleep(1.0)  # follow has polled the cut record several times
    assert b"three" not in (tmp_path / "out.log").read_bytes()
    put(1, three[three.index(b"\n") + 1 :])
    put(0, _record(0, T0 + 3000, "last", i=3))
    code, err = finish(follow)
    assert code == 0, err
    got = [r[1:3] for r in records(tmp_path / "out.log") if r[2] is not None]
    assert got == [("first", 1), ("three", 2), ("last", 3)]
    assert "torn" not in err
    assert b"three i=2 +lines=2\n  lines\n  here\n" in (tmp_path / "out.log").read_bytes()


def test_a_record_later_than_one_printed_is_printed_marked(tmp_path):
    """A record older than one already printed (its rank's file lagged past the delay) is printed with
    late_us=N, which distvlog's reader reads back as a field; the summary counts it."""
    run = tmp_path / "logs" / "live"
    run.mkdir(parents=True)
    paths = [run / f"rank-{r}.log" for r in range(2)]
    for rank, path in enumerate(paths):
        path.write_bytes(fmt.GlogWriter().header(_meta(rank, os.getpid())))
    follow = start_follow(tmp_path, "logs/live", "-o", "out.log", "--delay", "0.2", "--idle", "2")
    with open(paths[0], "ab") as f:
        f.write(_record(0, T0 + 2_000_000, "on time", i=1))
    _wait_for(tmp_path / "out.log", b"] on time i=1")
    with open(paths[1], "ab") as f:
        f.write(_record(1, T0 + 1_500_000, "behind\n  by half a second", i=2))
    code, err = finish(follow)
    assert code == 0, err
    got = [r for r in records(tmp_path / "out.log") if r[2] is not None]
    assert got == [(0, "on time", 1, None), (1, "behind", 2, 500_000)]
    assert "1 record printed late (marked late_us=N)" in err


# -- filters and formats, on a finished run (its processes are gone: follow ends after one pass) ------------------
@pytest.mark.parametrize(
    "filters",
    [
        ("--ranks", "1,3"),
        ("--min-severity", "W"),
        ("--grep", "second line of r2"),
        ("--node", "add1*"),
        ("--min-v", "4", "--ranks", "0"),
    ],
)
def test_filters_pick_what_they_pick_in_merge(glog_run, cli, tmp_path, filters):
    """Each filter keeps, in follow mode, exactly the records it keeps in a plain merge."""
    code, follow_out, err = cli("merge", "--follow", glog_run, *filters, "-o", tmp_path / "f.log")
    assert code == 0, err
    code, _, err = cli("merge", glog_run, *filters, "-o", tmp_path / "m.log")
    assert code == 0, err
    got = records(tmp_path / "f.log")
    assert got and got == records(tmp_path / "m.log")


@pytest.mark.parametrize("output", ["text", "jsonl"])
def test_json_lines_rank_files_are_followed(jsonl_run, cli, tmp_path, output):
    """Rank files in JSON lines, followed into text or JSON lines: the records `merge` gives, in its order."""
    code, _, err = cli("merge", "--follow", jsonl_run, "--format", output, "-o", tmp_path / "f.out")
    assert code == 0, err
    code, _, err = cli("merge", jsonl_run, "--format", output, "-o", tmp_path / "m.out")
    assert code == 0, err
    assert records(tmp_path / "f.out") == records(tmp_path / "m.out")


def test_a_log_root_means_its_latest_run(glog_run, cli, tmp_path):
    """PATH a log root: follow reads the run its `latest` link names, and says which."""
    assert (glog_run.parent / "latest").resolve() == glog_run.resolve()
    code, _, err = cli("merge", "--follow", glog_run.parent, "-o", tmp_path / "f.log")
    assert code == 0, err
    assert f"distvlog merge: following {glog_run.resolve()}\n" in err
    assert records(tmp_path / "f.log")


def test_a_path_that_is_not_a_directory_is_refused(cli, tmp_path):
    """One line naming the path, exit 2."""
    code, _, err = cli("merge", "--follow", tmp_path / "nowhere")
    assert code == 2
    assert (
        err.strip()
        == f"distvlog merge: error: {tmp_path / 'nowhere'}: no such directory (--follow reads a run directory)"
    )


def test_padding_longer_than_a_read_with_records_after_it_is_skipped(tmp_path):
    """A writer that reserved 1 MB and died mid-record, then records after the padding (a file written on
    after a crash): the records on both sides are printed, the cut one counted as torn, none printed torn."""
    run = tmp_path / "logs" / "live"
    run.mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    meta = fmt.make_meta(
        rank=0, world_size=1, host=os.uname().nodename, pid=gone.pid, tid=1, run_id="live", fmt="glog", created_us=T0
    )
    cut = _record(0, T0 + 2000, "cut\n  short\n  of its lines", i=2)
    data = (
        fmt.GlogWriter().header(meta)
        + _record(0, T0 + 1000, "before", i=1)
        + cut[: cut.index(b"\n") + 3]
        + b"\0" * (1 << 20)
        + _record(0, T0 + 3000, "after", i=3)
    )
    (run / "rank-0.log").write_bytes(data)
    code, err = finish(start_follow(tmp_path, "logs/live", "-o", "out.log"))
    assert code == 0, err
    assert [r[1:3] for r in records(tmp_path / "out.log") if r[2] is not None] == [("before", 1), ("after", 3)]
    assert "1 torn record skipped" in err
