"""The shared record reader: our files (glog, JSON lines), foreign glog, years, clocks, damage, bad input."""

from __future__ import annotations

import datetime as dt
import gzip
import re
import shutil

import pytest
from tools_logfiles import DATA, T0, expected_tags, ours

from distvlog.errors import InputError
from distvlog.tools.read import _source as reader
from distvlog.tools.read import open_sources, read_records

TAG = re.compile(r"r(\d+)t\d+i\d+")


def records(paths, **kw):
    return list(read_records(open_sources([str(p) for p in paths], **kw)))


def utc(*args) -> int:
    return int(dt.datetime(*args, tzinfo=dt.timezone.utc).timestamp() * 10**6)


@pytest.mark.parametrize("run", ["glog_run", "jsonl_run"])
def test_our_files_every_record_whole_with_fields(run, request):
    run_dir = request.getfixturevalue(run)
    ranks, n = (4, 40) if run == "glog_run" else (2, 20)
    recs = [r for r in records([run_dir]) if r.file != "distvlog"]  # (not the meta and end records)
    tags = [TAG.search(r.event).group(0) for r in recs]
    assert sorted(tags) == sorted(expected_tags(ranks, n))
    for r in recs:
        assert int(TAG.search(r.event).group(1)) == r.rank
        if r.event.startswith("multi"):
            tag = TAG.search(r.event).group(0)
            assert r.event == f"multi {tag}\n  second line of {tag}\n  third line of {tag}"
            assert isinstance(r.fields["step"], int) and r.v is None and r.severity == "I"
        elif r.event.startswith("plain"):
            assert r.v == 4 and r.fields["node"].endswith("GradNode")
        else:
            assert r.severity == "W"
    sources = open_sources([str(run_dir)])
    assert [s.rank for s in sources] == list(range(ranks)) and all(s.meta and s.host for s in sources)


def test_glog_and_jsonl_agree(tmp_path):
    from tools_logfiles import write_run

    for fmt in ("glog", "jsonl"):
        write_run(tmp_path / fmt, "r", ranks=1, n=12, fmt=fmt)
    got = {
        fmt: {
            TAG.search(r.event).group(0): (r.event, r.fields, r.severity)
            for r in records([tmp_path / fmt])
            if r.file != "distvlog"
        }
        for fmt in ("glog", "jsonl")
    }
    assert got["glog"] == got["jsonl"]


FOREIGN = {
    # C++ glog 0.7: the year in the prefix, a padded thread id, a header saying so.
    "cpp_year.log": (
        "Log file created at: 2025/12/31 23:59:58\nRunning on machine: gpu7\n"
        "Running duration (h:mm:ss): 0:00:00\n"
        "Log line format: [IWEF]yyyymmdd hh:mm:ss.uuuuuu threadid file:line] msg\n"
        "I20251231 23:59:59.500000  2701 main.cc:10] last of the year\n"
        "E20260101 00:00:00.250000  2701 main.cc:11] first of the new year\n  with a second line\n"
    ),
    # c10d: the prefix in brackets, the rank in the message.
    "c10d.log": "[I1130 02:11:15.000001 2701 ProcessGroupNCCL.cpp:123] [PG 0 Rank 3] ProcessGroupNCCL initialized\n"
    "[W1130 02:11:15.000002 2701 ProcessGroupNCCL.cpp:124] [PG 0 Rank 3] watchdog slow\n",
}


def test_foreign_glog_year_tag_and_nccl_rank(tmp_path):
    for name, text in FOREIGN.items():
        (tmp_path / name).write_text(text)
    recs = records(
        [tmp_path / "cpp_year.log", tmp_path / "c10d.log"], rank_of={"cpp_year.log": 5}, clock_correction=False
    )
    by_event = {r.event.split("\n")[0]: r for r in recs}
    assert by_event["last of the year"].ts == utc(2025, 12, 31, 23, 59, 59, 500000) - _local_offset_us()
    new_year = by_event["first of the new year"]
    assert (new_year.severity, new_year.rank, new_year.tid, new_year.file, new_year.line) == (
        "E",
        5,
        2701,
        "main.cc",
        11,
    )
    assert new_year.event == "first of the new year\n  with a second line"
    nccl = by_event["[PG 0 Rank 3] ProcessGroupNCCL initialized"]
    assert nccl.rank == 3 and nccl.file == "ProcessGroupNCCL.cpp"


def _local_offset_us() -> int:
    import time

    return time.localtime().tm_gmtoff * 10**6


def test_year_rolls_over_when_the_month_goes_back_not_at_a_month_end(tmp_path):
    (tmp_path / "a.log").write_text(
        "Log file created at: 2025/10/31 23:59:58\n"
        "I1101 00:00:00.001000 1 a.cc:1] [rank 0] november, thread one\n"
        "I1031 23:59:59.999000 2 a.cc:1] [rank 0] october, thread two was late\n"
        "I1231 23:59:59.000000 1 a.cc:1] [rank 0] new year's eve\n"
        "I0101 00:00:01.000000 1 a.cc:1] [rank 0] new year\n"
        "I1231 23:59:59.500000 2 a.cc:1] [rank 0] old year, late\n"
    )
    years = [
        dt.datetime.fromtimestamp((r.ts + _local_offset_us()) / 1e6, dt.timezone.utc).year
        for r in records([tmp_path / "a.log"])
    ]
    assert years == [2025, 2025, 2025, 2026, 2025]


def test_paddle_output_and_absl_py(tmp_path):
    shutil.copy(DATA / "paddle_seed.txt", tmp_path / "workerlog.0")
    (tmp_path / "absl.log").write_text("I1130 02:11:14.940652 140234567890 train.py:12] absl says hi\n")
    recs = records([tmp_path / "workerlog.0", tmp_path / "absl.log"], rank_of={"workerlog.0": 0, "absl.log": 1})
    paddle = [r for r in recs if r.rank == 0]
    assert len(paddle) == 11  # one per glog line; the printed "4" and the dumps stay in their records
    assert any(r.event.endswith("this may cause data type been changed.\n4") for r in paddle)
    begin = next(r for r in paddle if "begin run" in r.event)
    assert begin.event.startswith("multiply1GradNode(0x15d65c70) begin run")
    absl = next(r for r in recs if r.rank == 1)
    assert (absl.tid, absl.file, absl.line, absl.event) == (140234567890, "train.py", 12, "absl says hi")
    today = dt.date.today()
    assert dt.datetime.fromtimestamp((absl.ts + _local_offset_us()) / 1e6, dt.timezone.utc).year == (
        today.year if today.month >= 11 else today.year - 1
    )


def test_clock_offset_interpolated_between_start_and_end_and_clamped(tmp_path):
    span = 10 * 10**6
    recs_in = [
        (T0 - 10**6, "I before"),
        (T0, "I start"),
        (T0 + span // 2, "I middle"),
        (T0 + span, "I end"),
        (T0 + 2 * span, "I after"),
    ]
    (tmp_path / "rank-1.log").write_text(ours(1, recs_in, clock=(f"1000.0 2.0 {T0}", f"3000.0 2.0 {T0 + span}")))
    corrected = [r.ts for r in records([tmp_path / "rank-1.log"]) if r.event != "distvlog-meta"]
    assert corrected == [T0 - 10**6 + 1000, T0 + 1000, T0 + span // 2 + 2000, T0 + span + 3000, T0 + 2 * span + 3000]
    raw = [r.ts for r in records([tmp_path / "rank-1.log"], clock_correction=False) if r.event != "distvlog-meta"]
    assert raw == [ts for ts, _ in recs_in]


def test_a_forked_child_file_takes_its_parents_clock(tmp_path):
    (tmp_path / "rank-2.log").write_text(ours(2, [(T0, "I parent")], clock=(f"500.0 1.0 {T0}", "")))
    (tmp_path / "rank-2.777.log").write_text(ours(2, [(T0, "I child")], pid=777))
    got = {r.event: r.ts for r in records([tmp_path]) if r.event != "distvlog-meta"}
    assert got == {"parent": T0 + 500, "child": T0 + 500}


def test_padding_stray_lines_and_a_line_cut_short_are_counted_not_lost(tmp_path):
    """Padding (NUL bytes) is no line; whole lines after it that start no record are stray; a last line
    without its newline is a torn record (format, section 5). Every line is counted once."""
    text = ours(0, [(T0, "I first\ncontinued"), (T0 + 1, "I second"), (T0 + 2, "I cut short")])
    text = text.replace("continued\n", "continued\n\0\0\0garbage\nstray\n") + "partial line without newline"
    (tmp_path / "rank-0.log").write_text(text)
    sources = open_sources([str(tmp_path / "rank-0.log")])
    got = [r.event for r in read_records(sources)][1:]
    assert got == ["first\ncontinued", "second", "cut short"]
    counts = sources[0].counts
    assert counts.skipped == {"not part of a record": 2, "in torn records": 1} and counts.header == 3
    assert counts.torn == 1
    assert counts.lines + counts.header + sum(counts.skipped.values()) == text.count("\n") + 1


@pytest.mark.parametrize("padding", [0, 3000])
def test_a_file_cut_anywhere_keeps_exactly_its_whole_records(tmp_path, glog_run, padding):
    """A killed rank's file, cut at any byte (also at a line's end inside a multi-line record), and then
    maybe padded with NUL bytes as a crashed writer's reserved space would be: the records before the cut
    are read, the one it cuts is counted as torn, never read as whole."""
    data = (glog_run / "rank-1.log").read_bytes()
    full = records([glog_run / "rank-1.log"])
    ends = [m.start() for m in re.finditer(rb"^[IWEF]\d{4} ", data, re.M)][1:] + [len(data)]
    assert len(ends) == len(full)
    for cut in range(len(data) - 700, len(data) + 1, 3):
        (tmp_path / "rank-1.log").write_bytes(data[:cut] + b"\0" * padding)
        sources = open_sources([str(tmp_path / "rank-1.log")])
        got = list(read_records(sources))
        kept = [r for r, end in zip(full, ends) if end <= cut]
        assert [(r.ts, r.event, r.fields) for r in got] == [(r.ts, r.event, r.fields) for r in kept]
        assert sources[0].counts.torn == (cut not in ends)


def test_padding_in_the_middle_cuts_the_record_before_it_and_no_other(tmp_path):
    """A memory-mapped writer killed mid-copy: one record's bytes end early and NULs fill its reserved space,
    while records after it were copied whole. Only the cut one is torn: a single-line record cut mid-line,
    and a multi-line one short of its declared lines."""
    records = [(T0 + i, f"I r{i}" + ("\n  more\n  and more" if i % 2 else "")) for i in range(6)]
    text = ours(0, records).encode()

    def unwritten(data: bytes, start: int, end: int) -> bytes:  # a record's reserved bytes from `start` on
        return data[:start] + b"\0" * (end - start) + data[end:]

    r2 = text.index(b"] r2") + 3  # inside the single-line record r2: its "2" and newline never written
    text = unwritten(text, r2, text.index(b"\n", r2) + 1)
    r3 = text.index(b"  and more", text.index(b"] r3"))  # r3 has its first two lines of three
    damaged = unwritten(text, r3, text.index(b"\n", r3) + 1)
    (tmp_path / "rank-0.log").write_bytes(damaged)
    sources = open_sources([str(tmp_path / "rank-0.log")])
    got = [r.event for r in read_records(sources)][1:]
    assert got == ["r0", "r1\n  more\n  and more", "r4", "r5\n  more\n  and more"]
    assert sources[0].counts.torn == 2 and sources[0].counts.skipped == {"in torn records": 1 + 2}


@pytest.mark.parametrize("padding", [0, 100])
def test_json_lines_cut_anywhere_keep_exactly_their_whole_records(tmp_path, jsonl_run, padding):
    data = (jsonl_run / "rank-1.jsonl").read_bytes()
    full = records([jsonl_run / "rank-1.jsonl"])
    ends = [i + 1 for i, byte in enumerate(data) if byte == 10]
    for cut in range(len(data) - 400, len(data) + 1, 7):
        (tmp_path / "rank-1.jsonl").write_bytes(data[:cut] + b"\0" * padding)
        sources = open_sources([str(tmp_path / "rank-1.jsonl")])
        got = list(read_records(sources))
        assert [(r.ts, r.event, r.fields) for r in got] == [(r.ts, r.event, r.fields) for r in full[: len(got)]]
        assert len(got) == sum(end <= cut for end in ends) and sources[0].counts.torn == (cut not in ends)


@pytest.mark.parametrize("cut", [20, 100, 300, 400])  # in glog's header lines, then in the distvlog-meta line
def test_a_file_cut_short_inside_its_header_has_no_records_and_no_crash(tmp_path, glog_run, cut):
    data = (glog_run / "rank-1.log").read_bytes()[:cut]
    (tmp_path / "rank-1.log").write_bytes(data)
    sources = open_sources([str(tmp_path)])
    assert list(read_records(sources)) == []
    counts = sources[0].counts  # the header's whole lines, and the one cut: a header line's or the meta record's
    assert counts.header == data.count(b"\n") and sum(counts.skipped.values()) == 1
    assert counts.torn == (counts.skipped == {"in torn records": 1})


def test_foreign_files_without_a_record_in_a_block_or_a_newline_at_the_end(tmp_path, monkeypatch):
    (tmp_path / "torn.log").write_text("I1130 09:25:49.000001 1 x.py:1] [rank 1] hi")
    (tmp_path / "prelude.log").write_text(
        "".join(f"printed line {i}, no bracket\n" for i in range(20))
        + "I1130 02:11:14.940652 1 a.cc:1] [rank 0] after the prelude\n"
    )
    monkeypatch.setattr(reader, "CHUNK", 200)  # the prelude fills whole blocks
    sources = open_sources([str(tmp_path / "torn.log"), str(tmp_path / "prelude.log")])
    assert [(r.rank, r.event) for r in read_records(sources)] == [(0, "after the prelude")]
    assert [dict(s.counts.skipped) for s in sources] == [
        {"not part of a record (before the first one)": 20},
        {"in torn records": 1},
    ]


def test_gz_files_and_a_log_root_means_its_latest_run(tmp_path, glog_run):
    plain = records([glog_run / "rank-1.log"])
    with open(glog_run / "rank-1.log", "rb") as f, gzip.open(tmp_path / "rank-1.log.gz", "wb") as g:
        g.write(f.read())
    assert [(r.ts, r.event) for r in records([tmp_path / "rank-1.log.gz"])] == [(r.ts, r.event) for r in plain]
    assert len(records([glog_run.parent])) == len(records([glog_run]))


def test_small_chunks_give_the_same_records(monkeypatch, glog_run):
    whole = [(r.ts, r.rank, r.event) for r in records([glog_run])]
    monkeypatch.setattr(reader, "CHUNK", 200)  # records longer than a chunk: the buffer grows
    assert [(r.ts, r.rank, r.event) for r in records([glog_run])] == whole


@pytest.mark.parametrize(
    "setup, args, kw, message",
    [
        (None, ["missing.log"], {}, "no such file"),
        ({"empty.log": b""}, ["empty.log"], {}, "empty file"),
        ({"sub/notes.txt": b"x"}, ["sub"], {}, "no distvlog logs"),
        ({"bin.log": bytes(range(256)) * 4}, ["bin.log"], {}, "not a glog or JSON-lines log"),
        ({"f.log": b"I1130 02:11:14.940652 1 a.cc:1] no rank anywhere\n"}, ["f.log"], {}, "--rank-of"),
        (
            {"f.log": b"I1130 02:11:14.940652 1 a.cc:1] x\n"},
            ["f.log"],
            {"rank_of": {"g.log": 1}},
            "not one of the input",
        ),
    ],
)
def test_unusable_input_is_one_clear_error(tmp_path, monkeypatch, setup, args, kw, message):
    monkeypatch.chdir(tmp_path)
    for name, data in (setup or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError, match=re.escape(message)) as err:
        records(args, **kw)
    assert "\n" not in str(err.value)


def test_rank_of_cannot_contradict_our_header(tmp_path):
    (tmp_path / "rank-1.log").write_text(ours(1, [(T0, "I x")]))
    with pytest.raises(InputError, match="header says rank 1"):
        records([tmp_path / "rank-1.log"], rank_of={"rank-1.log": 2})
