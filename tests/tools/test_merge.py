"""`distvlog merge`: one timeline from many ranks, every record once and whole, in corrected time order."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tools_logfiles import T0, expected_tags, ours, stamp

from distvlog import format as fmt
from distvlog.tools import merge
from distvlog.tools.merge import _kway
from distvlog.tools.read import _source as reader
from distvlog.tools.read import open_sources, read_records

RECORD_START = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} ", re.M)
TAG = re.compile(r"r(\d+)t\d+i\d+")


def split_records(text: str) -> list[str]:
    starts = [m.start() for m in RECORD_START.finditer(text)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def read_back(path) -> list:
    return list(read_records(open_sources([str(path)])))


def test_round_trip_every_record_once_whole_and_in_order(tmp_path, cli, glog_run):
    code, _, err = cli("merge", glog_run, "-o", tmp_path / "m.log")
    assert code == 0
    text = (tmp_path / "m.log").read_text()
    assert text.startswith("Log file created at: ") and "Merged by distvlog: 4 files" in text
    records = split_records(text)
    tags = [TAG.search(r).group(0) for r in records if " distvlog:0] " not in r]  # (not the meta and end records)
    assert sorted(tags) == sorted(expected_tags(4, 40))  # each exactly once
    for r in records:
        rank = re.search(r"\] \[rank (\d+)\] ", r).group(1)
        if (m := TAG.search(r)) is not None:
            assert m.group(1) == rank
        if " multi " in r:
            tag = TAG.search(r).group(0)
            assert r.endswith(f"  second line of {tag}\n  third line of {tag}\n")
    back = read_back(tmp_path / "m.log")
    keys = [(rec.ts, rec.rank) for rec in back]
    assert keys == sorted(keys) and len(back) == len(records)  # time order, ties by rank
    assert "488 records from 4 files (ranks 0-3: 122 each)" in err  # 120 written, the meta and end records
    assert err.count("\n") == 1 and "0 lines skipped" in err


def test_skewed_clocks_are_corrected_and_the_output_shows_corrected_times(tmp_path, cli):
    ahead = 5_000_000  # rank 1's clock runs 5 s ahead of rank 0's
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0 + 1000 * i, f"I r0 {i}") for i in range(0, 10, 2)]))
    (tmp_path / "rank-1.log").write_text(
        ours(
            1,
            [(T0 + ahead + 1000 * i, f"I r1 {i}") for i in range(1, 10, 2)],
            clock=(f"{-ahead}.0 20.0 {T0 + ahead}", ""),
        )
    )
    cli("merge", tmp_path, "-o", tmp_path / "m.log")
    order = re.findall(r"\] (r\d \d)$", (tmp_path / "m.log").read_text(), re.M)
    assert order == [f"r{i % 2} {i}" for i in range(10)]
    assert [rec.ts for rec in read_back(tmp_path / "m.log") if rec.event.startswith("r")] == [
        T0 + 1000 * i for i in range(10)
    ]
    cli("merge", tmp_path, "-o", tmp_path / "raw.log", "--no-clock-correction")
    order = re.findall(r"\] (r\d \d)$", (tmp_path / "raw.log").read_text(), re.M)
    assert order == [f"r0 {i}" for i in range(0, 10, 2)] + [f"r1 {i}" for i in range(1, 10, 2)]


def test_foreign_glog_mixed_with_ours_and_gz(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0 + 10, "I ours first"), (T0 + 30, "W ours second")]))
    with gzip.open(tmp_path / "rank-1.log.gz", "wt") as f:
        f.write(ours(1, [(T0 + 20, "I gz rank one")]))
    (tmp_path / "nccl.log").write_text("[I1130 02:11:14.000025 77 ProcessGroupNCCL.cpp:9] [PG 0 Rank 2] pg ready\n")
    (tmp_path / "worker.log").write_text("E1130 02:11:14.000040 88 op.cc:3] paddle error\n  detail\n")
    code, out, err = cli(
        "merge",
        tmp_path / "rank-0.log",
        tmp_path / "rank-1.log.gz",
        tmp_path / "nccl.log",
        tmp_path / "worker.log",
        "--rank-of",
        "worker.log=3",
    )
    assert code == 0
    lines = [line for line in out.splitlines() if RECORD_START.match(line) and "distvlog-meta" not in line]
    assert [line[22:] for line in lines] == [
        "100 t.py:1] [rank 0] ours first",
        "101 t.py:1] [rank 1] gz rank one",
        "77 ProcessGroupNCCL.cpp:9] [rank 2] [PG 0 Rank 2] pg ready",
        "100 t.py:1] [rank 0] ours second",
        "88 op.cc:3] [rank 3] paddle error",
    ]
    assert out.endswith("paddle error\n  detail\n") and "(ranks 2,3: 1 each; rank 0: 3; rank 1: 2)" in err


def test_json_lines_output(tmp_path, cli, jsonl_run):
    code, out, _ = cli("merge", jsonl_run, "--format", "jsonl")
    objs = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [o["ts"] for o in objs] == sorted(o["ts"] for o in objs)
    assert sorted(TAG.search(o["event"]).group(0) for o in objs if o["file"] != "distvlog") == sorted(
        expected_tags(2, 20)
    )
    plain = next(o for o in objs if o["event"].startswith("plain"))
    assert plain["v"] == 4 and plain["world_size"] == 2 and isinstance(plain["step"], int)
    assert {o["norm"] for o in objs if o["event"].startswith("warn")} == {"-Infinity"}  # not null


@pytest.mark.parametrize(
    "args, keep",
    [
        (["--ranks", "0,2-3"], lambda rank, kind, i: rank in (0, 2, 3)),
        (["--min-severity", "W"], lambda rank, kind, i: kind == "warn"),
        (["--min-v", "4"], lambda rank, kind, i: kind == "plain"),
        (["--max-v", "3"], lambda rank, kind, i: kind != "plain"),
        (["--grep", r"second line of r1t0"], lambda rank, kind, i: kind == "multi" and rank == 1 and i[0] == "0"),
        (["--node", "mul*"], lambda rank, kind, i: kind == "warn"),
    ],
)
def test_filters(cli, glog_run, args, keep):
    code, out, err = cli("merge", glog_run, *args)
    got = sorted(f"{m.group(1)} {m.group(2)}" for m in re.finditer(r"\] \[rank \d+\] (\w+) (r\d+t\d+i\d+)", out))
    want = sorted(
        f"{kind} {tag}"
        for tag in expected_tags(4, 40)
        for kind in [_kind(int(tag.split("i")[1]))]
        if keep(int(tag[1]), kind, tag.split("t")[1])
    )
    assert code == 0 and got == want and "filtered out" in err


def _kind(i: int) -> str:
    return "multi" if i % 5 == 0 else "warn" if i % 13 == 0 else "plain"


def test_since_and_until_take_time_of_day_or_a_full_time(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0 + 10**6 * s, f"I second {s}") for s in range(6)]))
    _, out, _ = cli("merge", tmp_path, "--since", "02:11:15", "--until", "2026-11-30 02:11:17")
    assert re.findall(r"second (\d)", out) == ["1", "2", "3"]
    _, out, _ = cli("merge", tmp_path, "--since", "1130 02:11:18.5")
    assert re.findall(r"second (\d)", out) == ["5"]


@pytest.mark.parametrize(
    "start, args, kept",
    [
        (T0 + 860_000, ["--since", "02:11"], [0, 1, 2]),  # the log starts at 02:11:14.86: that day's 02:11
        (T0 + 860_000, ["--since", "02:11:14"], [0, 1, 2]),
        (T0 + 860_000, ["--until", "02:11:14.5"], []),  # before the first record: nothing, not everything
        (T0 + 860_000, ["--since", "02:11:15.86"], [1, 2]),
        (
            T0 - 2 * 3600 * 10**6 - 11 * 60 * 10**6 - 15 * 10**6,
            ["--since", "00:00"],
            [1, 2],
        ),  # from 23:59:59: the next day's
        (T0 - 2 * 3600 * 10**6 - 11 * 60 * 10**6 - 15 * 10**6, ["--until", "23:59:59.5"], [0]),
    ],
)
def test_a_time_of_day_near_the_first_record_is_on_its_day(tmp_path, cli, start, args, kept):
    (tmp_path / "rank-0.log").write_text(ours(0, [(start + 10**6 * s, f"I second {s}") for s in range(3)], world=1))
    code, out, _ = cli("merge", tmp_path, *args)
    assert code == 0 and re.findall(r"second (\d)", out) == [str(s) for s in kept]


def test_merged_output_reads_back_as_the_same_records(tmp_path, cli, glog_run, monkeypatch):
    cli("merge", glog_run, "-o", tmp_path / "m.log")
    original = sorted((r.ts, r.rank, r.event) for r in read_records(open_sources([str(glog_run)])))
    monkeypatch.setattr(reader, "CHUNK", 300)  # and through many small blocks
    assert sorted((r.ts, r.rank, r.event) for r in read_back(tmp_path / "m.log")) == original
    code, _, _ = cli("merge", tmp_path / "m.log", "-o", tmp_path / "again.log")
    body = [(tmp_path / name).read_text().split("msg\n", 1)[1] for name in ("again.log", "m.log")]
    assert code == 0 and body[0] == body[1]


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.log"], "missing.log: no such file"),
        (["empty.log"], "empty.log: empty file"),
        (["nologs"], "no distvlog logs"),
        (["binary.log"], "not a glog or JSON-lines log"),
        (["foreign.log"], "pass --rank-of"),
        (["rank-0.log", "--rank-of", "x"], "--rank-of 'x'"),
        (["rank-0.log", "--ranks", "2-1"], "--ranks '2-1'"),
        (["rank-0.log", "--grep", "("], "--grep '('"),
        (["rank-0.log", "--since", "yesterday"], "--since 'yesterday'"),
        (["rank-0.log", "-o", "rank-0.log"], "one of the input files"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, cli, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "nologs").mkdir()
    (tmp_path / "binary.log").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "foreign.log").write_text("I1130 02:11:14.940652 1 a.cc:1] no rank here\n")
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0, "I fine")], world=1))
    code, out, err = cli("merge", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "binary.log",
        "empty.log",
        "foreign.log",
        "nologs",
        "rank-0.log",
    ]  # no partial output left behind


# What an older writer's clock-slot rewrite left over records after a copytruncate: a slot's 64 bytes.
SLOT = fmt.clock_slot(0.5, 7.5, T0).encode()


@pytest.mark.parametrize("reason", [fmt.DAMAGED, fmt.STRAY], ids=["over-the-rank-tag", "over-the-prefix"])
def test_a_line_written_over_is_counted_as_skipped_not_merged_as_a_record(tmp_path, cli, glog_run, reason):
    """A real rank file with a clock slot's bytes written over a record's first line: from inside its rank
    tag (the line left still starts like a record, damaged, maybe joined to the next record's end) or from
    its start (the line left is no record's, stray). Only the records hit are lost; merge counts the line
    left as skipped, for that reason."""
    data = (glog_run / "rank-1.log").read_bytes()
    starts = [m.start() for m in re.finditer(rb"^[IWEF]\d{4} ", data, re.M)] + [len(data)]
    before = [r.event for r in read_back(glog_run / "rank-1.log")]
    assert len(starts) == len(before) + 1
    # one-line records without a count around it: no continuation line is left behind the damage, and a
    # line left that starts no record has no count before it to end it
    k = next(k for k in range(2, len(before) - 1) if all(e.startswith("plain") for e in before[k - 1 : k + 2]))
    at = data.index(b"[rank 1]", starts[k]) + len("[ran") if reason == fmt.DAMAGED else starts[k]
    hit = {j for j in (k, k + 1) if starts[j] < at + len(SLOT) and at < starts[j + 1]}
    damaged = tmp_path / "rank-1.log"
    damaged.write_bytes(data[:at] + SLOT + data[at + len(SLOT) :])
    sources = open_sources([str(damaged)])
    assert [r.event for r in read_records(sources)] == [e for j, e in enumerate(before) if j not in hit]
    assert sources[0].counts.skipped == {reason: 1}
    code, _, err = cli("merge", damaged, "-o", tmp_path / "m.log")
    assert code == 0 and f"{len(before) - len(hit)} records from 1 file" in err, err
    assert f"; 1 line skipped (1 {reason})" in err, err


def test_a_killed_ranks_last_whole_record_is_merged(tmp_path, cli):
    text = ours(1, [(T0 + i, f"I record {c}") for i, c in enumerate("abc")])
    (tmp_path / "rank-1.log").write_text(text + f"I{stamp(T0 + 3)} 101 t.py:1] [rank 1] record d, cut sh")
    code, out, err = cli("merge", tmp_path)
    assert code == 0 and re.findall(r"\] (record .*)", out) == ["record a", "record b", "record c"]
    assert "(1 in torn records)" in err and "rank-1.log: 1 torn record (cut short by a crash or a kill)" in err


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=40), min_size=1, max_size=4),
    st.integers(120, 600),
    st.booleans(),
)
def test_any_interleaving_through_tiny_blocks_is_a_stable_sort(tmp_path_factory, streams, chunk, threads):
    """Monotonic per-rank streams, random gaps and ties, multi-line records, blocks of a few records, read
    ahead on threads or on the merge's own thread."""
    tmp = tmp_path_factory.mktemp("prop")
    expected = []
    for rank, gaps in enumerate(streams):
        ts, recs = T0, []
        for i, (gap, multi) in enumerate(gaps):
            ts += gap
            recs.append((ts, f"I r{rank} n{i}" + (f"\nmore of r{rank} n{i}" if multi else "")))
            expected.append((ts, rank, i))
        (tmp / f"rank-{rank}.log").write_text(ours(rank, recs, host="h"))
    old = reader.CHUNK, merge.READ_AHEAD_MIN_BYTES
    reader.CHUNK = chunk
    merge.READ_AHEAD_MIN_BYTES = 0 if threads else old[1]
    try:
        from distvlog.cli import main

        assert main(["merge", str(tmp), "-o", str(tmp / "out.log")]) == 0
    finally:
        reader.CHUNK, merge.READ_AHEAD_MIN_BYTES = old
    text = (tmp / "out.log").read_text()
    got = [(int(r), int(i)) for r, i in re.findall(r"\] r(\d+) n(\d+)", text)]
    assert got == [(rank, i) for _, rank, i in sorted(expected)]
    assert text.count("\nmore of ") == sum(m for gaps in streams for _, m in gaps)


def test_reading_ahead_on_threads_or_on_the_merges_thread_writes_the_same(tmp_path, cli, glog_run, monkeypatch):
    """A big input's next blocks are read on threads, a small input's on the merge's thread: same bytes out,
    same summary."""
    monkeypatch.setattr(reader, "CHUNK", 300)  # many blocks per input: reading ahead has work to do
    inline = cli("merge", glog_run, "-o", tmp_path / "out.log")
    inline_bytes = (tmp_path / "out.log").read_bytes()
    monkeypatch.setattr(merge, "READ_AHEAD_MIN_BYTES", 0)
    threads = cli("merge", glog_run, "-o", tmp_path / "out.log")
    assert threads == inline and inline[0] == 0 and "488 records from 4 files" in inline[2]
    assert (tmp_path / "out.log").read_bytes() == inline_bytes


def test_lines_out_of_order_beyond_the_slack_are_written_late_and_counted(tmp_path, cli, monkeypatch):
    recs = [(T0 + 100 * i, f"I a{i}") for i in range(200)] + [(T0 + 50, "I late")]
    (tmp_path / "rank-0.log").write_text(ours(0, recs))
    monkeypatch.setattr(reader, "CHUNK", 500)
    monkeypatch.setattr(_kway, "MAX_SLACK_US", 0)
    code, out, err = cli("merge", tmp_path)
    assert code == 0 and "late" in out and "1 record written late" in err and out.count("] a") == 200


@pytest.mark.skipif(shutil.which("lnav") is None, reason="lnav is not installed")
def test_lnav_reads_every_merged_record_with_its_level(tmp_path, cli, glog_run):
    cli("merge", glog_run, "-o", tmp_path / "m.log")
    text = (tmp_path / "m.log").read_text()
    proc = subprocess.run(
        [
            "lnav",
            "-n",
            "-c",
            ";SELECT log_level, log_body FROM all_logs",
            "-c",
            ":write-csv-to -",
            str(tmp_path / "m.log"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    header, records = rows[:5], rows[5:]
    assert all(r["log_level"] == "unknown" for r in header)  # glog's header lines and the processes line
    levels = {"I": "info", "W": "warning", "E": "error", "F": "fatal"}
    expected = split_records(text)
    assert len(records) == len(expected)
    for row, rec in zip(records, expected):
        assert row["log_level"] == levels[rec[0]]
        assert row["log_body"].startswith("[rank ") and row["log_body"] == rec.split("] ", 1)[1].rstrip("\n")


def test_json_lines_input_becomes_glog_text_with_whole_timestamps(cli, jsonl_run):
    code, out, _ = cli("merge", jsonl_run)
    assert code == 0
    records = split_records(out)
    assert sorted(TAG.search(r).group(0) for r in records if " distvlog:0] " not in r) == sorted(expected_tags(2, 20))
    assert all(re.match(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [^:]+:\d+\] \[rank \d\] ", r) for r in records)


def test_dash_is_standard_output_and_paths_may_follow_options(tmp_path, cli, glog_run):
    files = sorted(glog_run.glob("rank-*.log"))
    code, out, err = cli("merge", files[0], "--ranks", "0-1", files[1], "-o", "-")
    assert code == 0 and not (tmp_path / "-").exists()
    assert "to stdout" in err and "(ranks 0,1: 122 each)" in err
    assert {int(r) for r in re.findall(r"\] \[rank (\d+)\] ", out)} == {0, 1}


def test_asking_for_ranks_no_input_has_is_an_error(cli, glog_run):
    code, _, err = cli("merge", glog_run, "--ranks", "7")
    assert (
        code == 2 and err.strip() == "distvlog merge: error: --ranks 7: no input is from those ranks (present: 0,1,2,3)"
    )


def test_no_progress_bar_without_tqdm(monkeypatch, glog_run):
    from distvlog.tools import merge

    monkeypatch.setitem(sys.modules, "tqdm", None)  # not installed
    monkeypatch.setattr(merge, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert merge._progress(open_sources([str(glog_run)])) is None
