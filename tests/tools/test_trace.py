"""`distvlog trace`: valid Chrome trace-event JSON, one process per rank, no partial overlaps on a track."""

from __future__ import annotations

import json
from collections import defaultdict

from tools_logfiles import T0, ours

from distvlog.format import FINISH_AD_API, banner

PHASES = {"X", "i", "M", "C"}


def engine_log(rank: int, crash: bool = False, world: int = 1) -> str:
    """A backward pass as the engine logs it: nodes nested in the pass, an allreduce spanning its end."""
    node = "multiply1GradNode"
    recs = [
        (T0 + 0, "I backward begin pass=1 step=7 v=3"),
        (T0 + 10, f"I {node}(0x7f3a01) begin run node={node} pass=1 v=4"),
        (T0 + 15, "I allreduce begin step=7 bucket=0 bytes=4096 v=1"),
        (
            T0 + 20,
            f"I grad_stats node={node} slot=x tensor=x@Grad shape=2x3 dtype=float32 norm=1.5 min=-1 max=inf "
            "mean=nan nan=0 inf=1 checksum=0a0b0c0d step=7 v=5",
        ),
        (T0 + 30, f"I {banner(FINISH_AD_API, 'multiply_grad')} node={node} pass=1 v=3"),
        (T0 + 40, "W grad norm is large step=7 norm=nan"),
        (T0 + 50, "I backward end pass=1 v=3"),
        (T0 + 60, "I allreduce end step=7 bucket=0 v=1"),
    ]
    if crash:
        recs += [(T0 + 70, f"I {node}(0x7f3a02) begin run node={node} pass=2 v=4"), (T0 + 80, "E oom")]
    return ours(rank, recs, host=f"host{rank}", world=world)


def check_trace(doc: dict) -> list[dict]:
    """The trace event format's rules, and no partially overlapping slices on one (pid, tid)."""
    events = doc["traceEvents"]
    tracks = defaultdict(list)
    for e in events:
        assert e["ph"] in PHASES and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            continue
        assert isinstance(e["name"], str) and isinstance(e["ts"], int) and isinstance(e["args"], dict)
        if e["ph"] == "X":
            assert e["dur"] >= 0
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        else:
            assert e["s"] == "t"
    for spans in tracks.values():
        open_ends: list[int] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"slices overlap on a track: {spans}"
            open_ends.append(end)
    return [e for e in events if e["ph"] != "M"]


def test_slices_for_nodes_passes_and_buckets_with_args(tmp_path, cli):
    for rank in range(2):
        (tmp_path / f"rank-{rank}.log").write_text(engine_log(rank, world=2))
    code, _, err = cli("trace", tmp_path, "-o", tmp_path / "t.json")
    assert code == 0 and err.count("\n") == 1 and "on 2 ranks" in err
    doc = json.loads((tmp_path / "t.json").read_text())
    events = check_trace(doc)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {"rank 0 (host0)", "rank 1 (host1)"}
    rank0 = {e["cat"]: e for e in events if e["pid"] == 0}
    node, backward, bucket, warn = rank0["node"], rank0["backward"], rank0["allreduce"], rank0["warning"]
    assert (node["name"], node["ts"], node["dur"]) == ("multiply1GradNode", T0 + 10, 20)
    assert node["args"]["grad_stats"][0]["norm"] == 1.5 and node["args"]["api"] == "multiply_grad"
    assert (node["args"]["grad_stats"][0]["max"], node["args"]["grad_stats"][0]["mean"]) == ("Infinity", "NaN")
    assert (backward["ts"], backward["dur"], backward["args"]["step"]) == (T0, 50, 7)
    assert (bucket["ts"], bucket["dur"], bucket["args"]["bucket"]) == (T0 + 15, 45, 0)
    assert bucket["tid"] != backward["tid"]  # it overlaps the pass's end: its own track of that thread
    assert warn["ph"] == "i" and warn["ts"] == T0 + 40 and warn["args"]["step"] == 7
    assert warn["args"]["norm"] == "NaN"  # JSON has no NaN: spelled out, not null


def test_a_run_left_open_by_a_crash_ends_at_the_ranks_last_record(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(engine_log(0, crash=True))
    cli("trace", tmp_path, "-o", tmp_path / "t.json")
    events = check_trace(json.loads((tmp_path / "t.json").read_text()))
    open_run = next(e for e in events if e["cat"] == "node" and e["args"].get("unfinished"))
    assert (open_run["ts"], open_run["dur"]) == (T0 + 70, 10)
    assert any(e["cat"] == "error" and e["name"] == "oom" for e in events)


def test_max_events_keeps_errors_and_passes_first_and_says_what_it_dropped(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(engine_log(0, crash=True))
    code, _, err = cli("trace", tmp_path, "-o", tmp_path / "t.json", "--max-events", "2")
    doc = json.loads((tmp_path / "t.json").read_text())
    kept = sorted(e["cat"] for e in check_trace(doc))
    assert code == 0 and kept == ["backward", "error"]
    assert doc["otherData"]["dropped"] == {"allreduce": 1, "warning": 1, "node": 2}
    assert "dropped 4 over --max-events 2" in err


def test_trace_of_real_rank_files_and_bad_input(tmp_path, cli, glog_run):
    code, _, _ = cli("trace", glog_run, "-o", tmp_path / "t.json")
    events = check_trace(json.loads((tmp_path / "t.json").read_text()))
    assert code == 0 and {e["pid"] for e in events} == {0, 1, 2, 3} and all(e["cat"] == "warning" for e in events)
    code, out, err = cli("trace", tmp_path / "missing", "-o", tmp_path / "x.json")
    assert code == 2 and err.count("\n") == 1 and "no such file" in err and not (tmp_path / "x.json").exists()


def test_counter_tracks_show_step_time_allreduce_wait_and_gradient_norm_per_rank(tmp_path, cli):
    """DataParallel's records become counter tracks per rank: each step's time from its start, each
    allreduce's wait and each bucket's local gradient norm."""
    for rank in range(2):
        recs = []
        for step in range(3):
            start = T0 + step * 10_000 + rank
            recs += [
                (start, f"I parameters step={step} v=1"),
                (start + 100, f"I allreduce begin step={step} bucket=0 bytes=16 checksum=00 norm={step + 0.5} v=1"),
                (start + 600, f"I allreduce end step={step} bucket=0 checksum=01 wait_us={250 * (rank + 1)} v=1"),
            ]
        (tmp_path / f"rank-{rank}.log").write_text(ours(rank, recs, world=2))
    code, _, _ = cli("trace", str(tmp_path), "-o", str(tmp_path / "trace.json"))
    assert code == 0
    counters = [e for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if e["ph"] == "C"]
    by = defaultdict(list)
    for e in counters:
        by[(e["pid"], e["name"])].append((e["ts"] - T0, e["args"]))
    assert by[(1, "step time (ms)")] == [(1, {"step": 10.0}), (10_001, {"step": 10.0})]
    assert by[(1, "allreduce wait (ms)")] == [
        (601, {"bucket 0": 0.5}),
        (10_601, {"bucket 0": 0.5}),
        (20_601, {"bucket 0": 0.5}),
    ]
    assert [v for _, v in by[(0, "local gradient norm")]] == [{"bucket 0": 0.5}, {"bucket 0": 1.5}, {"bucket 0": 2.5}]


def stepped_log(rank: int, world: int) -> str:
    """Three steps of an allreduce and a warning each, and a stepless node run inside step 1."""
    recs = []
    for step in range(3):
        t = T0 + 1000 * step
        recs += [
            (t, f"I allreduce begin step={step} bucket=0 bytes=8 v=1"),
            (t + 10, f"W slow step={step}"),
            (t + 50, f"I allreduce end step={step} bucket=0 v=1"),
        ]
    recs += [(T0 + 1020, "I mul1GradNode(0x1) begin run node=mul1GradNode pass=1 v=4")]
    recs += [(T0 + 1030, f"I {banner(FINISH_AD_API, 'mul_grad')} node=mul1GradNode pass=1 v=3")]
    return ours(rank, sorted(recs), world=world)


def test_ranks_and_steps_windows_cut_a_big_run(tmp_path, cli):
    """--ranks keeps those ranks' processes only; --steps the slices of those steps and the stepless ones
    in their time span; the summary says the size of what was written."""
    for rank in range(16):
        (tmp_path / f"rank-{rank}.log").write_text(stepped_log(rank, 16))
    code, _, err = cli("trace", tmp_path, "-o", tmp_path / "t.json", "--ranks", "2-3,9", "--steps", "1")
    doc = json.loads((tmp_path / "t.json").read_text())
    events = [e for e in check_trace(doc) if e["ph"] != "M"]
    assert code == 0 and {e["pid"] for e in doc["traceEvents"]} == {2, 3, 9}
    assert sorted((e["pid"], e["cat"], e["args"].get("step")) for e in events) == sorted(
        (rank, kind, step) for rank in (2, 3, 9) for kind, step in (("allreduce", 1), ("warning", 1), ("node", None))
    )
    size = (tmp_path / "t.json").stat().st_size
    assert (
        f"9 events (3 allreduce, 3 warning, 3 node) on 3 ranks to {tmp_path / 't.json'} ({size / 1e6:,.1f} MB)" in err
    )


def test_a_bad_window_is_one_line_before_any_reading(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(stepped_log(0, 1))
    code, _, err = cli("trace", tmp_path, "-o", tmp_path / "t.json", "--steps", "3-1")
    assert code == 2 and err.count("\n") == 1 and "--steps '3-1': expected a list like 0,2-3" in err
    assert not (tmp_path / "t.json").exists()
