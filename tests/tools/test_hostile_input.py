"""Inputs that once hung the tools, traced back or took unbounded memory: paths checked before they are
opened, dates the calendar cannot place, damaged .gz files, padding and over-long lines. Each runs the real
`distvlog` executable in a subprocess with a timeout: a hang fails the test instead of the suite."""

from __future__ import annotations

import gzip
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import pytest
from tools_logfiles import ROOT, T0, ours, stamp

from distvlog.tools.read import open_sources, read_records
from distvlog.tools.read._stream import LINE_CAP

RECORDS = [(T0 + i, f"I record {i}") for i in range(50)]
TIMEOUT_S = 120  # generous for a loaded 2-core machine; a hang is what it catches


def distvlog(*args) -> tuple[int, str, str]:
    """`distvlog ARGS` in a subprocess: (exit code, stdout, stderr)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "distvlog", *map(str, args)],
            capture_output=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"distvlog {' '.join(map(str, args))} hung (killed after {TIMEOUT_S} s)")
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def peak_rss_kb(*args) -> int:
    """Peak RSS of one `distvlog ARGS` run, measured by wait4 on that child alone."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "distvlog", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            assert proc.returncode == 0, args
            return usage.ru_maxrss
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"distvlog {' '.join(map(str, args))} hung")
        time.sleep(0.02)


def one_error_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distvlog merge: error: "), err
    assert all(w in lines[0] for w in words), err


def test_a_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO given as a PATH: exit 2 and one line; opening it would block forever."""
    os.mkfifo(tmp_path / "rank-0.log")
    code, _, err = distvlog("merge", tmp_path / "rank-0.log")
    assert code == 2
    one_error_line(err, "rank-0.log", "a FIFO")


def test_a_fifo_among_a_run_directorys_files_is_skipped_with_a_warning(tmp_path):
    """A FIFO named like a rank file inside a run directory does not block the others: it is named, skipped."""
    (tmp_path / "rank-0.log").write_text(ours(0, RECORDS, world=2))
    os.mkfifo(tmp_path / "rank-1.log")
    code, out, err = distvlog("merge", tmp_path)
    assert code == 0 and out.count("] [rank 0] record ") == len(RECORDS)
    assert "rank-1.log: a FIFO, not a log file; skipping it" in err


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: (os.symlink(p / "b.log", p / "a.log"), os.symlink(p / "a.log", p / "b.log")), ["a loop"]),
        (lambda p: os.symlink(p / "gone.log", p / "a.log"), ["a dangling symbolic link", "gone.log"]),
        (lambda p: None, ["no such file"]),
    ],
    ids=["loop", "dangling", "missing"],
)
def test_links_that_lead_nowhere_are_one_line_each(tmp_path, make, words):
    """A symlink loop and a dangling link say which they are (not "no such file"); exit 2."""
    make(tmp_path)
    code, _, err = distvlog("merge", tmp_path / "a.log")
    assert code == 2
    one_error_line(err, "a.log", *words)


AS_NOBODY = """
import locale, os, shutil, sys  # (argparse imports these two when it builds a parser)
import distvlog.tools.merge  # what the command imports, loaded before root is dropped (the interpreter
from distvlog.cli import main  # and its packages may be in a directory only root can read)
os.setgroups([]); os.setgid(65534); os.setuid(65534)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the tool as another user")
def test_a_directory_without_search_permission_is_one_line():
    """A path inside a directory the user cannot search: exit 2, one line, no PermissionError traceback.
    (Root searches any directory: the tool drops to `nobody` before it looks at its arguments.)"""
    top = Path(tempfile.mkdtemp(prefix="distvlog-perm-"))
    try:
        locked = top / "locked"
        locked.mkdir()
        (locked / "rank-0.log").write_text(ours(0, RECORDS, world=1))
        top.chmod(0o755)
        locked.chmod(0o000)
        proc = subprocess.run(
            [sys.executable, "-c", AS_NOBODY, "merge", str(locked / "rank-0.log")],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            cwd="/",
            timeout=TIMEOUT_S,
        )
    finally:
        locked.chmod(0o755)
        shutil.rmtree(top)
    assert proc.returncode == 2
    one_error_line(proc.stderr, "rank-0.log", "permission denied", "cannot be searched")


def _with_line(path: Path, replace: str, by: str, created: str | None = None) -> None:
    text = ours(0, RECORDS, world=1)
    assert replace in text
    text = text.replace(replace, by, 1)
    if created:
        text = text.replace('"created":"2026', f'"created":"{created}', 1)
    path.write_text(text)


@pytest.mark.parametrize(
    "first, created, reason, skipped",
    [
        ("0230", None, "no such date (like Feb 30)", 1),
        ("0431", None, "no such date (like Feb 30)", 1),
        ("1130", "0000", "year outside 1-9999", None),
        ("1130", "9999", None, 0),
    ],
)
def test_a_date_the_calendar_cannot_place_is_a_skipped_line_with_its_reason(tmp_path, first, created, reason, skipped):
    """Feb 30, Apr 31, year 0 (every line of the file): skipped with the reason, never a loop; year 9999 is fine."""
    _with_line(tmp_path / "rank-0.log", f"I{stamp(T0 + 10)}", f"I{first}{stamp(T0 + 10)[4:]}", created)
    code, out, err = distvlog("merge", tmp_path / "rank-0.log")
    if skipped is None:  # nothing placed: no records at all is unusable input
        assert code == 2 and f"({len(RECORDS) + 1} {reason})" in err
    else:
        assert code == 0 and out.count(" record ") == len(RECORDS) - skipped
        assert (f"1 line skipped (1 {reason})" if skipped else "0 lines skipped") in err


def test_a_year_rolling_past_9999_is_skipped_not_a_loop(tmp_path):
    """November then January in a file created in 9999: the January records would be in year 10000."""
    text = ours(0, [(T0, "I november"), (T0 + 1, "I january")], world=1)
    text = text.replace('"created":"2026', '"created":"9999').replace(f"I{stamp(T0 + 1)}", "I0101 00:00:00.000001")
    (tmp_path / "rank-0.log").write_text(text)
    code, out, err = distvlog("merge", tmp_path)
    assert code == 0 and "november" in out and "january" not in out
    assert "1 line skipped (1 year outside 1-9999)" in err


@pytest.mark.parametrize("ts", [-(2**62), 2**62, 253_402_300_800_000_000])  # the last: 10000-01-01
def test_a_json_timestamp_out_of_every_calendar_is_skipped(tmp_path, ts):
    """JSON lines with a `ts` no date can show (negative, far future): skipped with the reason."""
    src = tmp_path / "src"
    lines = [b'{"ts":%d,"severity":"I","rank":0,"tid":1,"file":"a.py","line":1,"event":"bad"}' % ts]
    lines += [b'{"ts":%d,"severity":"I","rank":0,"tid":1,"file":"a.py","line":1,"event":"ok"}' % T0]
    src.mkdir()
    (src / "rank-0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    code, out, err = distvlog("merge", src)
    assert code == 0 and out.count("] [rank 0] ok") == 1 and " bad" not in out
    assert "(1 time out of range (years 1-9999))" in err


def test_a_truncated_gz_keeps_every_record_before_the_damage_and_says_where(tmp_path):
    """A .gz cut in the middle: every record the readable part holds is read (not a block's worth less), the
    one it cuts is torn, and a warning says at which byte the damage starts."""
    many = [(T0 + i, f"I record {i} " + "x" * (i % 50)) for i in range(40_000)]
    data = ours(0, many, world=1).encode()
    packed = gzip.compress(data)
    (tmp_path / "rank-0.log.gz").write_bytes(packed[: len(packed) // 2])
    readable = zlib.decompressobj(31).decompress(packed[: len(packed) // 2])
    whole = readable[: readable.rindex(b"\n") + 1].count(b"] [rank 0] record ")
    code, out, err = distvlog("merge", tmp_path)
    assert code == 0 and out.count("] [rank 0] record ") == whole > 10_000
    assert f"unreadable from uncompressed byte {len(readable):,}" in err and "before its end marker" in err
    assert "1 torn record" in err


def test_gz_members_one_after_another_read_as_one_file(tmp_path):
    """A .gz of several members (`gzip -c a >> f.gz`) is the members' text, as zcat reads it."""
    text = ours(0, RECORDS, world=1).encode()
    half = text.index(b"I", len(text) // 2)
    (tmp_path / "rank-0.log.gz").write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    sources = open_sources([str(tmp_path / "rank-0.log.gz")])
    assert [r.event for r in read_records(sources)][1:] == [f"record {i}" for i in range(len(RECORDS))]
    assert not sources[0].counts.damage


def test_a_2gb_sparse_file_takes_no_more_memory_than_a_small_one(tmp_path):
    """A rank file followed by 2 GB of holes (a crashed writer's reserve): read at once, in the memory of
    a small file (holes are skipped, NUL runs are one byte)."""
    small = tmp_path / "small" / "rank-0.log"
    small.parent.mkdir()
    small.write_text(ours(0, RECORDS, world=1))
    sparse = tmp_path / "sparse" / "rank-0.log"
    sparse.parent.mkdir()
    shutil.copy(small, sparse)
    os.truncate(sparse, 2 << 30)
    base = peak_rss_kb("merge", small, "-o", os.devnull)
    assert peak_rss_kb("merge", sparse, "-o", os.devnull) < base + 32 * 1024


def test_written_nul_bytes_take_no_more_memory_than_a_small_file(tmp_path):
    """200 MB of NUL bytes actually written between two stretches of records: one NUL run, no memory."""
    head = ours(0, RECORDS, world=1).encode()
    (tmp_path / "rank-0.log").write_bytes(head)
    base = peak_rss_kb("merge", tmp_path / "rank-0.log", "-o", os.devnull)
    with open(tmp_path / "rank-0.log", "ab") as f:
        for _ in range(50):
            f.write(bytes(4 << 20))
        f.write(f"I{stamp(T0 + 100)} 100 t.py:1] [rank 0] after the padding\n".encode())
    assert peak_rss_kb("merge", tmp_path / "rank-0.log", "-o", os.devnull) < base + 32 * 1024
    code, out, _ = distvlog("merge", tmp_path / "rank-0.log")
    assert code == 0 and out.rstrip().endswith("after the padding")


def test_a_line_longer_than_the_cap_is_cut_and_counted_in_bounded_memory(tmp_path):
    """A record line of 3x the cap: kept up to the cap, counted as cut; the records after it are read; peak
    memory grows by a few caps, not by the line."""
    head = ours(0, RECORDS[:10], world=1).encode()
    (tmp_path / "rank-0.log").write_bytes(head)
    base = peak_rss_kb("merge", tmp_path / "rank-0.log", "-o", os.devnull)
    with open(tmp_path / "rank-0.log", "ab") as f:
        f.write(f"I{stamp(T0 + 100)} 100 t.py:1] [rank 0] long ".encode())
        for _ in range(3 * LINE_CAP >> 20):
            f.write(b"y" * (1 << 20))
        f.write(f"\nI{stamp(T0 + 101)} 100 t.py:1] [rank 0] after the long line\n".encode())
    code, out, err = distvlog("merge", tmp_path / "rank-0.log")
    lines = out.splitlines()
    assert code == 0 and lines[-1].endswith("after the long line") and "1 line cut to the line cap" in err
    assert len(lines[-2]) == LINE_CAP and lines[-2].endswith("y")
    assert peak_rss_kb("merge", tmp_path / "rank-0.log", "-o", os.devnull) < base + 8 * LINE_CAP // 1024


def test_more_files_than_the_open_file_limit_merge_the_same(tmp_path):
    """200 rank files under an open-file limit of 48 (hard: it cannot be raised): descriptors are closed and
    opened again as the merge goes, never EMFILE; the output is the one an unlimited merge writes."""
    for rank in range(200):
        recs = [(T0 + 1000 * i + rank, f"I record {i} of rank {rank}") for i in range(40)]
        (tmp_path / f"rank-{rank}.log").write_text(ours(rank, recs, world=200))
    code, unlimited, _ = distvlog("merge", tmp_path)

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    proc = subprocess.run(
        [sys.executable, "-m", "distvlog", "merge", str(tmp_path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        preexec_fn=limit,
        timeout=TIMEOUT_S,
    )
    assert code == 0 and proc.returncode == 0, proc.stderr
    assert proc.stdout == unlimited and unlimited.count(" record ") == 200 * 40


def test_a_record_that_goes_on_and_on_is_skipped_and_its_lines_counted(tmp_path):
    """A record start followed by 300,000 short lines (more than a record may have): the record and all
    its lines are skipped and counted by reason, the records after it read, every line accounted for."""
    text = ours(0, RECORDS[:5], world=1) + "  more\n" * 300_000
    text += f"I{stamp(T0 + 100)} 100 t.py:1] [rank 0] after it\n"
    (tmp_path / "rank-0.log").write_text(text)
    sources = open_sources([str(tmp_path / "rank-0.log")])
    got = [r.event for r in read_records(sources)]
    counts = sources[0].counts
    assert got[1:] == [f"record {i}" for i in range(4)] + ["after it"]
    assert counts.skipped == {"in records longer than 64 MiB or 262,144 lines": 300_001}
    assert counts.lines + counts.header + sum(counts.skipped.values()) == text.count("\n")
