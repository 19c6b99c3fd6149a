"""What a record looks like: the glog line, the caller's file:line, fields as logfmt, multi-line messages,
JSON lines with the same fields, the header and its metadata record, clock slots patched in place."""

from __future__ import annotations

import json
import math
import socket
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from logger_testkit import GLOG_PREFIX, line_of, read_jsonl

from distvlog.format import CLOCK_SLOT_WIDTH, VERSION, clock_slot, parse_json, value_text
from distvlog.logger._render import GlogRenderer
from distvlog.tools.read._record import from_json

CALLSITES = """
import threading, time
import distvlog.logger as dlog
print("start", time.time())
log = dlog.get_logger()
log.info("info record")  # @info
log.warning("warning record")  # @warning
log.error("error record")  # @error
log.critical("critical record")  # @critical
log.vlog(2, "vlog record")  # @vlog
log.vlog(3, "too verbose")
log.debug("debug record")  # @debug
log.vlog_at(7, "vlog_at record")  # @vlog_at
log.bind(step=3).info("bound record")  # @bound
try:
    1 / 0  # @raise
except ZeroDivisionError:
    log.exception("exception record")  # @exception
def in_thread():
    log.info("thread record")  # @thread
    print("thread", threading.get_native_id())
t = threading.Thread(target=in_thread)
t.start()
t.join()
print("main", threading.get_native_id())
print("end", time.time())
"""
# marker -> (severity, first line of the message)
EXPECTED = {
    "info": ("I", "info record"),
    "warning": ("W", "warning record"),
    "error": ("E", "error record"),
    "critical": ("F", "critical record"),
    "vlog": ("I", "vlog record v=2"),
    "debug": ("I", "debug record v=1"),
    "vlog_at": ("I", "vlog_at record v=7"),
    "bound": ("I", "bound record step=3"),
    "exception": ("E", "exception record"),
    "thread": ("I", "thread record"),
}


def _stdout_values(stdout: str, kind=float) -> dict[str, float]:
    """The script's `print(name, value)` lines as {name: value}."""
    return {key: kind(value) for key, value in (line.split() for line in stdout.splitlines())}


def _stamp(epoch_s: float) -> str:
    return time.strftime("%m%d %H:%M:%S", time.localtime(epoch_s))


def test_glog_line_severity_thread_and_callsite_of_every_method(scripts):
    run = scripts.run(CALLSITES, env={"DISTVLOG_V": "2"})
    out = _stdout_values(run.proc.stdout)
    records = run.records()
    assert [r.first for r in records] == [first for _, first in EXPECTED.values()]
    for (marker, (severity, _)), rec in zip(EXPECTED.items(), records):
        assert (rec.severity, rec.file, rec.line, rec.rank) == (severity, "script.py", line_of(CALLSITES, marker), 0), (
            marker
        )
        assert rec.tid == int(out["thread" if marker == "thread" else "main"])
        assert _stamp(int(out["start"])) <= f"{rec.mmdd} {rec.hms}" <= _stamp(out["end"])
    exception = records[list(EXPECTED).index("exception")]
    assert exception.more[0] == "Traceback (most recent call last):"
    assert f"line {line_of(CALLSITES, 'raise')}" in exception.more[1]
    assert exception.more[-1] == "ZeroDivisionError: division by zero"


@pytest.mark.parametrize(
    "value, text",
    [
        ("plain", "plain"),
        ("a b", '"a b"'),
        ('say "hi"', r'"say \"hi\""'),
        ("k=v", '"k=v"'),
        ("", '""'),
        ("two\nlines", r'"two\nlines"'),
        ("tab\there", r'"tab\there"'),
        ("ünïcode", "ünïcode"),
        (3, "3"),
        (-2.5, "-2.5"),
        (True, "True"),
        (None, "None"),
        (float("nan"), "nan"),
        (np.float32(0.5), "0.5"),
        (np.int64(7), "7"),
        (np.float64(1e-3), "0.001"),
        (np.bool_(True), "True"),
        ([1, 2, 3], "[1,2,3]"),
        ((1, 2), "[1,2]"),
        (["a b", 1], '["a b",1]'),
        (np.array([1.5, 2.0]), "[1.5,2.0]"),
        ({"k": 1}, '{"k":1}'),
        ("nan", '"nan"'),  # strings that would read back as another type are quoted
        ("007", '"007"'),
        ("True", '"True"'),
        ("[1]", '"[1]"'),
        ("NaN", "NaN"),  # (a number only in Python's own spelling)
    ],
)
def test_field_values(value, text):
    """A field's VALUE in glog text, by type (distvlog.format, 2.5)."""
    assert value_text(value) == text


@given(st.text())
def test_a_string_value_is_one_printable_token_or_a_json_string(text):
    """Whatever the string, its value is one bare token on one line, or a JSON string that decodes to it."""
    rendered = value_text(text)
    assert rendered.isprintable()
    if rendered != text:
        assert json.loads(rendered) == text
    else:
        assert text and not any(c.isspace() or c in '"=' for c in text)


def _render(event, **fields) -> str:
    ed = {
        "event": event,
        "ts": 1_700_000_000_123_456,
        "severity": "W",
        "rank": 3,
        "world_size": 4,
        "tid": 42,
        "file": "train.py",
        "line": 17,
        **fields,
    }
    return GlogRenderer()(None, "warning", ed).decode()


def test_fields_follow_the_message_in_call_order():
    stamp = _stamp(1_700_000_000)
    assert _render("step done", step=12, loss=np.float32(0.25), note="a b") == (
        f'W{stamp}.123456 42 train.py:17] [rank 3] step done step=12 loss=0.25 note="a b"\n'
    )


def test_multiline_message_keeps_continuation_lines_and_fields_on_the_first():
    text = _render("grad summary\n  layer1: ok\n\n  layer2 = bad", step=1, v=4)
    first, *more = text.split("\n")
    assert GLOG_PREFIX.match(first) and first.endswith("] [rank 3] grad summary step=1 v=4 +lines=3")
    assert more == ["  layer1: ok", "", "  layer2 = bad", ""]


def test_non_string_messages_are_rendered():
    assert _render(None).endswith("[rank 3] \n")
    assert _render({"a": 1}).endswith("[rank 3] {'a': 1}\n")


FIELDS = """
import numpy as np
import distvlog.logger as dlog
log = dlog.get_logger()
log.info("fields", step=12, loss=np.float32(0.5), note="a b", shape=[3, 4], ok=True)  # @fields
log.warning("two\\nlines", node="mul1GradNode")  # @multi
log.vlog(1, "verbose", step=2)  # @vlog
print("path", dlog.log_file_path())
"""


@pytest.mark.parametrize("how", ["env", "configure"])
def test_json_lines_carry_the_same_fields(scripts, how):
    code = FIELDS.replace("log = ", 'dlog.configure(format="jsonl")\nlog = ') if how == "configure" else FIELDS
    env = {"DISTVLOG_V": "1", "PMI_RANK": "1", "PMI_SIZE": "2"} | ({"DISTVLOG_FORMAT": "jsonl"} if how == "env" else {})
    run = scripts.run(code, env=env)
    path = run.only_file()
    assert path.name == "rank-1.jsonl" and run.proc.stdout.split()[-1] == str(path)
    meta, records = read_jsonl(path)
    assert meta["format"] == "jsonl" and meta["rank"] == 1 and meta["world_size"] == 2
    common = {"rank": 1, "world_size": 2, "file": "script.py"}
    expected = [
        {
            "event": "fields",
            "severity": "I",
            "line": line_of(code, "fields"),
            "step": 12,
            "loss": 0.5,
            "note": "a b",
            "shape": [3, 4],
            "ok": True,
        },
        {"event": "two\nlines", "severity": "W", "line": line_of(code, "multi"), "node": "mul1GradNode"},
        {"event": "verbose", "severity": "I", "line": line_of(code, "vlog"), "step": 2, "v": 1},
    ]
    for rec, want in zip(records, expected, strict=True):
        assert set(rec) == set(want) | set(common) | {"ts", "tid"}
        assert {k: rec[k] for k in want} == want and {k: rec[k] for k in common} == common
        assert abs(rec["ts"] - meta["created_us"]) < 60e6


def test_json_lines_spell_nan_and_inf(scripts):
    """JSON has no NaN or Inf: spelled as strings (orjson's null would hide them), read back as floats."""
    code = (
        "import numpy as np\nimport distvlog.logger as dlog\n"
        "dlog.get_logger().info('stats', norm=float('nan'), max=np.float32('inf'), min=-np.inf, mean=0.5, none=None,\n"
        "                       losses=[0.5, float('nan')], hist=np.array([[1, -np.inf]]), per={'a': (np.inf,)})\n"
    )
    path = scripts.run(code, env={"DISTVLOG_FORMAT": "jsonl"}).only_file()
    _, records = read_jsonl(path)
    fields = {k: records[0][k] for k in ("norm", "max", "min", "mean", "none", "losses", "hist", "per")}
    assert fields == {
        "norm": "NaN",
        "max": "Infinity",
        "min": "-Infinity",
        "mean": 0.5,
        "none": None,
        "losses": [0.5, "NaN"],
        "hist": [[1.0, "-Infinity"]],
        "per": {"a": ["Infinity"]},
    }  # at any depth
    back = from_json(parse_json(path.read_bytes().split(b"\n")[1]), 0, 0).fields
    assert math.isnan(back["norm"]) and (back["max"], back["min"], back["none"]) == (math.inf, -math.inf, None)


def test_glog_text_of_the_same_records(scripts):
    run = scripts.run(FIELDS, env={"DISTVLOG_V": "1"})
    assert [(r.severity, r.line, r.text) for r in run.records()] == [
        ("I", line_of(FIELDS, "fields"), 'fields step=12 loss=0.5 note="a b" shape=[3,4] ok=True'),
        ("W", line_of(FIELDS, "multi"), "two node=mul1GradNode\nlines"),
        ("I", line_of(FIELDS, "vlog"), "verbose v=1 step=2"),
    ]


def test_glog_fields_with_lists_and_dicts(scripts):
    """Containers are JSON in the text too, as they are (they read back as lists and dicts): NaN spelled out
    inside them, and a dict with int keys is fine."""
    code = "import distvlog.logger as dlog\ndlog.get_logger().info('losses', losses=[0.5, float('nan')], by={1: 2.0})\n"
    assert scripts.run(code).records()[0].text == 'losses losses=[0.5,"NaN"] by={"1":2.0}'


HEADER = """
import os, time
import distvlog.logger as dlog
print("before", time.time_ns() // 1000)
dlog.get_logger().info("hello")
print("after", time.time_ns() // 1000)
print("pid", os.getpid())
"""


def test_header_lines_and_meta_record(scripts):
    run = scripts.run(HEADER, env={"PMI_RANK": "1", "PMI_SIZE": "4", "DISTVLOG_RUN_ID": "hdr"})
    out = _stdout_values(run.proc.stdout, int)
    glog = run.glog()
    created = glog.meta["created_us"]
    local = time.localtime(created // 10**6)
    assert out["before"] <= created <= out["after"]
    assert glog.header[0] == "Log file created at: " + time.strftime("%Y/%m/%d %H:%M:%S", local)
    assert glog.header[1] == f"Running on machine: {socket.gethostname()}"
    assert glog.meta["created"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", local))
    assert {k: glog.meta[k] for k in ("distvlog", "format", "rank", "world_size", "host", "pid", "run_id")} == {
        "distvlog": VERSION,
        "format": "glog",
        "rank": 1,
        "world_size": 4,
        "host": socket.gethostname(),
        "pid": out["pid"],
        "run_id": "hdr",
    }
    assert glog.meta["clock_start"] == clock_slot(0.0, 0.0, created)
    assert len(glog.meta["clock_start"]) == CLOCK_SLOT_WIDTH
    assert glog.meta["clock_end"] == " " * CLOCK_SLOT_WIDTH
    assert [(r.rank, r.first) for r in glog.records] == [(1, "hello")]


SET_CLOCK = """
import distvlog.logger as dlog
from distvlog.logger._sink import SINK
log = dlog.get_logger()
SINK.set_clock("clock_start", -1234.5, 56.5, 111)  # before the file exists: goes into the header
log.info("first")
dlog.flush()
before = open(dlog.log_file_path(), "rb").read().rstrip(b"\\0")  # (the records, not the reserve after them)
SINK.set_clock("clock_end", 99.0, 1.5, 222)  # after: patched in place
log.info("second")
dlog.flush()
after = open(dlog.log_file_path(), "rb").read()
empty, filled = (f'"clock_end":"{text:64}"'.encode() for text in ("", "99.0 1.5 222"))
assert after.startswith(before.replace(empty, filled))  # the same bytes but for the slot
"""


@pytest.mark.parametrize("fmt", ["glog", "jsonl"])
def test_set_clock_fills_the_fixed_width_slots(scripts, fmt):
    run = scripts.run(SET_CLOCK, env={"DISTVLOG_FORMAT": fmt})
    if fmt == "glog":
        meta, events = run.glog().meta, [r.first for r in run.records()]
    else:
        meta, records = read_jsonl(run.only_file())
        events = [r["event"] for r in records]
    assert meta["clock_start"] == "-1234.5 56.5 111".ljust(CLOCK_SLOT_WIDTH)
    assert meta["clock_end"] == "99.0 1.5 222".ljust(CLOCK_SLOT_WIDTH)
    assert events == ["first", "second"]


def test_simulated_clock_skew_shifts_records_and_header(scripts):
    """DISTVLOG_SIMULATE_CLOCK_SKEW_US shifts rank r's clock by r x N µs: records and header alike."""
    run = scripts.run(
        HEADER,
        env={
            "PMI_RANK": "2",
            "PMI_SIZE": "3",
            "DISTVLOG_FORMAT": "jsonl",
            "DISTVLOG_SIMULATE_CLOCK_SKEW_US": "50000000",
        },
    )
    out = _stdout_values(run.proc.stdout, int)
    meta, records = read_jsonl(run.only_file())
    skew = 2 * 50_000_000
    assert out["before"] + skew <= records[0]["ts"] <= out["after"] + skew
    assert out["before"] + skew <= meta["created_us"] <= out["after"] + skew


LINE_WRITER = """
import threading
import distvlog.logger as dlog
from distvlog.logger._logger import PROCESSORS, LineWriter
from distvlog.logger._logger import Logger
from distvlog.logger._processors import skip_frames_of
log = dlog.get_logger("distvlog.autograd.engine")
generic = []  # events that took the generic path
generic_vlog_at = Logger.vlog_at
Logger.vlog_at = lambda self, v, event, **f: (generic.append(event), generic_vlog_at(self, v, event, **f))
skip_frames_of(Logger.vlog_at)

def both(v, event, fields, **extra):  # the fast writer, then the generic call, from this same line
    for fast in (True, False):
        LineWriter(log, 9, **fields).lines([(v, event, extra)]) if fast else log.bind(**fields).vlog_at(v, event, **extra)  # @write

both(4, "relu1GradNode(0x1) begin run", {"node": "relu1GradNode", "pass": 1})
both(3, "{ Input: [\\n( grad_out , [{ Name: x }]) ]}", {"node": "n", "pass": 2})
both(5, "grad_stats", {"node": "n"}, slot="grad_x", norm=0.5, shape="2x3", tensor="a b", nan=0)
dlog.bind_context(step=7, node="shadowed by the bound field")
both(4, "Found pending node: m", {"node": "n"}, in_degree=0)
both(4, "extra shadows context", {"pass": 3}, node="extra")
both(4, "extra shadows bound", {"node": "bound"}, node="extra")
both(4, "bound core field", {"rank": 9})
dlog.bind_context(line=5)  # a core field in the context: the generic path decides
both(4, "core field", {"node": "n"})
dlog.unbind_context("line")
thread = threading.Thread(target=both, args=(4, "another thread", {"node": "n"}))
thread.start()
thread.join()
dlog.add_processor(lambda logger, method, ed: {**ed, "seen": True})
both(4, "an added processor sees the record", {"node": "n"})
print(sorted(set(e for e in generic if generic.count(e) == 2)))
PROCESSORS.pop(-2)  # the added processor again
writer = LineWriter(log, 4, node="b")
writer.lines([(4, "batch 1", None), (5, "above the writer's level", None), (4, "batch\\n2", {"k": 1})])  # @batch
writer.lines([(4, "a batch with a record for the generic path", None),  # @generic
              (4, "shadows a bound field", {"node": "x"}), (4, "last", None)])
try:
    writer.lines([(4, "before a record that cannot be written", None), (4, "shadows v", {"node": "x", "v": 9})])
except TypeError as exc:
    print(exc)
"""


def _as_written(record) -> tuple:
    """What a record shows but its time: two ways of writing the same call must agree on all of it."""
    return record.severity, record.tid, record.file, record.line, record.rank, record.text


def test_line_writer_writes_what_the_generic_path_writes(scripts):
    run = scripts.run(LINE_WRITER)
    assert run.proc.stdout.splitlines()[0] == str(
        sorted(  # the cases the fast writer hands to the generic path
            [
                "extra shadows bound",
                "extra shadows context",
                "bound core field",
                "core field",
                "an added processor sees the record",
            ]
        )
    )
    assert run.proc.stdout.splitlines()[1] == "LineWriter.lines: a record's fields cannot be named ['v']"
    records, batches = run.records()[:20], run.records()[20:]  # (nothing of the refused batch)
    assert len(records) == 2 * 10
    for fast, generic in zip(records[::2], records[1::2]):
        assert _as_written(fast) == _as_written(generic)
        assert fast.file == "script.py" and fast.line == line_of(LINE_WRITER, "write")
    texts = [r.text for r in records[::2]]
    assert texts[2] == 'grad_stats node=n v=5 slot=grad_x norm=0.5 shape=2x3 tensor="a b" nan=0'
    assert texts[3] == "Found pending node: m node=n v=4 in_degree=0 step=7"
    assert texts[6] == 'bound core field v=4 step=7 node="shadowed by the bound field"'  # the rank is the process's
    assert records[16].tid != records[0].tid and texts[9].endswith("seen=True")
    # a batch: the records at the writer's level, in order, from the batch's call site, made at one moment;
    # one that needs the generic path takes the whole batch there, its order kept
    assert [r.text for r in batches] == [
        "batch 1 node=b v=4 step=7",
        "batch node=b v=4 k=1 step=7\n2",
        "a batch with a record for the generic path node=b v=4 step=7",
        "shadows a bound field node=x v=4 step=7",
        "last node=b v=4 step=7",
    ]
    assert [r.line for r in batches] == [line_of(LINE_WRITER, "batch")] * 2 + [line_of(LINE_WRITER, "generic")] * 3
    assert (batches[0].hms, batches[0].us) == (batches[1].hms, batches[1].us)


EMIT = """
import distvlog.logger as dlog
from distvlog.logger._logger import PROCESSORS
log = dlog.get_logger("emit")

def both(method, event, *args, **fields):  # the direct rendering, then the processor chain, from this line
    for chain in (False, True):
        if chain:
            dlog.add_processor(lambda logger, name, ed: ed)  # a chain that is not distvlog's own: no shortcut
        (getattr(log, method)(*args, event, **fields) if method != "bound" else log.bind(b=1, n=2).info(event, n=3, **fields))  # @write
        if chain:
            PROCESSORS.pop(-2)

dlog.set_vlog_level(2)
both("info", "train step", step=1, loss=0.25)
both("warning", "a\\nmulti-line message", path="/tmp/x y", values=[1.5, float("nan")])
both("vlog", "verbose", 2, shape="2x3")
both("error", None, ok=True, none=None)
both("info", 12.5)
both("bound", "bound fields first, shadowed in place", k="v")
dlog.bind_context(step=7, k="context")
both("info", "the context's fields after the call's, shadowed by them", k="call")
both("info", "a caller's own site", file="elsewhere.py", line=3)
both("info", "a core field of the wrong type is replaced", ts="not an int")
dlog.bind_context(severity="X")
both("info", "a core field in the context")
"""


def test_direct_rendering_writes_what_the_processor_chain_writes(scripts):
    """A log call rendered without the processor chain (distvlog's own chain, glog text) writes the record the
    chain writes: severity, thread, call site, rank and the same fields in the same order."""
    run = scripts.run(EMIT)
    records = run.records()
    assert len(records) == 2 * 10
    for direct, chain in zip(records[::2], records[1::2]):
        assert _as_written(direct) == _as_written(chain)
    texts = [r.text for r in records[::2]]
    assert texts[0] == "train step step=1 loss=0.25"
    assert texts[5] == "bound fields first, shadowed in place b=1 n=3 k=v"
    assert texts[6] == "the context's fields after the call's, shadowed by them k=call step=7"
    assert [(r.file, r.line) for r in records[14:16]] == [("elsewhere.py", 3)] * 2
    assert {(r.file, r.line) for r in records[::2][:7]} == {("script.py", line_of(EMIT, "write"))}
