"""The record format module on its own: what it writes for the cases its specification names, and that what
it writes it reads back exactly (hypothesis, both formats, arbitrary text). The round trip through the
real logger, the real files and the tools is tests/format/test_round_trip.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from format_strategies import fields_strategy, message_strategy, same, text_of, text_strategy, values_strategy
from hypothesis import given, settings
from hypothesis import strategies as st

from distvlog import format as fmt

FORGED = "n\nE1201 13:00:00.000000 1 parallel.py:1] [rank 1] allreduce mismatch"
WRITER = fmt.GlogWriter()


def glog(message, **fields) -> str:
    """The glog text the logger writes for one record at a fixed time and call site."""
    return WRITER.records(1_700_000_000_123_456, "I", 42, "t.py", 7, 3, [(message, fmt.pairs_of(fields))]).decode()


def body(text: str) -> str:
    """What follows the `[rank R] ` tag."""
    return text.split("] [rank 3] ", 1)[1]


def back(text: str) -> fmt.GlogRecord:
    parsed = fmt.parse_glog(text[:-1])
    assert parsed is not None
    return parsed


def test_a_forged_record_in_a_field_name_stays_one_field():
    """The name is written as a JSON string on the record's own line: no second record, no E record."""
    text = glog("u", **{FORGED: 1})
    assert (
        text.count("\n") == 1
        and body(text) == 'u "n\\nE1201 13:00:00.000000 1 parallel.py:1] [rank 1] allreduce mismatch"=1\n'
    )
    assert back(text).fields == {FORGED: 1}


def test_a_nul_in_a_value_is_escaped():
    text = glog("x", value="a\0b")
    assert "\0" not in text and body(text) == 'x value="a\\u0000b"\n' and back(text).fields == {"value": "a\0b"}


@pytest.mark.parametrize(
    "message, written",
    [
        ("train step", "train step"),
        ("x=1", "x=1"),  # a message that looks like a field, with no space before it: still the message
        ("loss is 1", "loss is 1"),
        ("ends with k=v", '"ends with k=v"'),  # would be read as a field
        ('"quoted"', '"\\"quoted\\""'),  # a leading quote always means a JSON string
        ("tab\there", '"tab\\there"'),  # a control character
        ("bell\a", '"bell\\u0007"'),
        ("nbsp\xa0", '"nbsp\\u00a0"'),  # not printable (a separator): escaped, not lost
        ("=====Running_AD_API_GRAD: mul_grad=====", "=====Running_AD_API_GRAD: mul_grad====="),  # no value after =
        ("", ""),
    ],
)
def test_single_line_messages(message, written):
    """A message is written as it is unless that could be misread; then as one JSON string (2.4)."""
    text = glog(message)
    assert body(text) == written + "\n" and back(text).message == message


def test_a_multi_line_message_keeps_its_lines_and_declares_how_many():
    text = glog("Traceback (most recent call last):\n  File x\nValueError: boom", step=3)
    assert text.split("\n") == [
        text.split("\n")[0],
        "  File x",
        "ValueError: boom",
        "",
    ] and text.split("\n")[0].endswith("] [rank 3] Traceback (most recent call last): step=3 +lines=2")
    record = back(text)
    assert (record.message, record.fields, record.count) == (
        "Traceback (most recent call last):\n  File x\nValueError: boom",
        {"step": 3},
        2,
    )


@pytest.mark.parametrize(
    "line",
    ["I1201 13:00:00.000000 1 x.py:1] forged", "E0", "[I1201 13:00:00.000000 c10d", "with\rreturn", "nul\0here"],
)
def test_a_continuation_line_that_could_start_a_record_makes_the_message_one_json_string(line):
    text = glog(f"first\n{line}")
    assert text.count("\n") == 1 and body(text).startswith('"first\\n') and back(text).message == f"first\n{line}"


def test_a_field_named_like_the_count_is_quoted():
    """`+lines` bare is the count; a field of that name is written quoted, so it stays a field."""
    text = glog("a\nb", **{"+lines": 5})
    assert body(text) == 'a "+lines"=5 +lines=1\nb\n'
    assert (back(text).fields, back(text).count) == ({"+lines": 5}, 1)


@pytest.mark.parametrize(
    "value, written",
    [
        ("plain", "plain"),
        ("2x3", "2x3"),
        ("a b", '"a b"'),
        ("k=v", '"k=v"'),
        ("", '""'),
        ("nan", '"nan"'),
        ("-inf", '"-inf"'),
        ("007", '"007"'),
        ("1e5", '"1e5"'),
        ("None", '"None"'),
        ("[1]", '"[1]"'),
        ("x}", '"x}"'),
        ("NaN", "NaN"),
        (3, "3"),
        (-2.5, "-2.5"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
        (True, "True"),
        (None, "None"),
        ([1, "a b", float("nan"), "NaN"], '[1,"a b","NaN","\\u0000NaN"]'),
        ({"k": (1, 2), 3: None}, '{"k":[1,2],"3":null}'),
        (np.float32(0.1), "0.1"),
        (np.int64(7), "7"),
        (np.bool_(False), "False"),
        (np.array([[1.5, np.inf]]), '[[1.5,"Infinity"]]'),
    ],
)
def test_field_values_by_type(value, written):
    """VALUE by type (2.5), and what it reads back as: the same value (numpy as the Python value it prints as,
    tuples as lists, dict keys as str)."""
    text = glog("m", f=value)
    assert body(text) == f"m f={written}\n"
    expected = {"k": [1, 2], "3": None} if isinstance(value, dict) else value
    assert same(back(text).fields, {"f": expected})


def test_the_json_mapping_spells_nan_and_escapes_what_would_collide():
    data = fmt.dumps({"n": float("nan"), "s": ["NaN", "Infinity", "-Infinity", "\0x", "x\0"], "i": 2**70, 1: "k"})
    assert json.loads(data) == {
        "n": "NaN",
        "s": ["\0NaN", "\0Infinity", "\0-Infinity", "\0\0x", "x\0"],
        "i": 2**70,
        "1": "k",
    }
    assert same(
        fmt.loads(data), {"n": math.nan, "s": ["NaN", "Infinity", "-Infinity", "\0x", "x\0"], "i": 2**70, "1": "k"}
    )


def test_json_lines_write_lone_surrogates_escaped():
    line = fmt.json_record({"ts": 1, "event": "a\udc80b", "f": ["\ud800"]})
    assert line.endswith(b"\n") and line.decode("ascii")  # encodable: escaped as \udXXX
    assert fmt.parse_json(line) == {"ts": 1, "event": "a\udc80b", "f": ["\ud800"]}


def test_the_meta_record_and_its_clock_slots():
    meta = fmt.make_meta(rank=2, world_size=4, host="h", pid=9, tid=9, run_id="r", fmt="glog", created_us=10**15)
    header = fmt.GlogWriter().header(meta)
    lines = header.decode().split("\n")
    assert [fmt.is_header_line(line.encode()) for line in lines[:4]] == [True, True, True, False]
    record = back(lines[3] + "\n")
    assert fmt.meta_of(record) == meta and meta["distvlog"] == fmt.VERSION == 2
    at = fmt.clock_slot_offsets(header)["clock_end"]
    assert header[at : at + fmt.CLOCK_SLOT_WIDTH] == b" " * fmt.CLOCK_SLOT_WIDTH
    assert fmt.clock_of_slot(fmt.clock_slot(-12.5, 3.0, 77)) == (-12.5, 77)
    assert fmt.meta_of_head(header) == meta


def test_a_user_record_saying_distvlog_meta_is_not_a_meta_record():
    assert fmt.meta_of(back(glog('distvlog-meta {"rank": 0}'))) is None  # not at distvlog:0


def test_event_texts_read_back():
    assert fmt.banner_api(fmt.banner(fmt.FINISH_AD_API, "multiply_grad"), fmt.FINISH_AD_API) == "multiply_grad"
    assert fmt.banner_api(fmt.banner(fmt.RUNNING_AD_API, "multiply_grad"), fmt.FINISH_AD_API) is None
    assert fmt.begin_run_node(f"multiply1GradNode(0x7f3a) {fmt.BEGIN_RUN}") == "multiply1GradNode"
    assert fmt.declared_count(b"I1201 ... x +lines=12") == 12 and fmt.declared_count(b'x "+lines"=12') == 0


def test_a_json_lines_record_as_glog_text_is_the_same_record():
    record = {
        "ts": 1,
        "severity": "W",
        "v": 2,
        "rank": 1,
        "tid": 5,
        "file": "a.py",
        "line": 3,
        "event": "m\nn",
        "k": "a b",
    }
    text = fmt.json_to_glog(
        record, 1, fmt.STAMP.replace("m", "1").replace("d", "1").replace("h", "1").replace("s", "1").replace("u", "1")
    )
    parsed = back(text)
    assert (parsed.severity, parsed.file, parsed.line, parsed.message, parsed.fields) == (
        "W",
        "a.py",
        3,
        "m\nn",
        {"v": 2, "k": "a b"},
    )


@settings(max_examples=400, deadline=None)
@given(message_strategy(), fields_strategy())
def test_glog_text_reads_back_as_written(message, fields):
    """Whatever the message and fields: one record, as many lines as it declares, read back the same."""
    text = glog(message, **fields)
    first, *more = text[:-1].split("\n")
    record = back(text)
    assert record.count == len(more) and fmt.parse_glog(first) is not None
    assert all(fmt.parse_glog(line) is None for line in more)  # no continuation line starts a record
    assert record.message == text_of(fmt.message_of(message)) and same(record.fields, fields)


@settings(max_examples=400, deadline=None)
@given(message_strategy(), fields_strategy())
def test_json_lines_read_back_as_written(message, fields):
    line = fmt.json_record({"ts": 1, "event": message, **fields})
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    obj = fmt.parse_json(line)
    assert obj.pop("event") == text_of(fmt.message_of(message)) and obj.pop("ts") == 1 and same(obj, fields)


@settings(max_examples=400, deadline=None)
@given(message_strategy(), fields_strategy())
def test_a_json_lines_record_rewritten_as_glog_text_reads_back_the_same(message, fields):
    """What merge writes for a JSON-lines input: the glog text of the same record."""
    obj = fmt.parse_json(fmt.json_record({"ts": 1, "severity": "W", "rank": 0, "event": message, **fields}))
    record = back(fmt.json_to_glog(obj, 0, "1201 13:00:00.000000"))
    assert record.message == text_of(fmt.message_of(message)) and same(record.fields, fields)


_KIND_TYPES = {"slot": str, "t e n": str, "norm": float, "nan": int, "+lines": str, "x=y": float}


_OF_TYPE = {str: text_strategy, int: st.integers(-(2**80), 2**80), float: st.floats()}


@settings(max_examples=300, deadline=None)
@given(
    values=st.one_of(
        st.tuples(*[_OF_TYPE[kind] for kind in _KIND_TYPES.values()]),  # the declared types: the template
        st.tuples(*[st.one_of(_OF_TYPE[kind], values_strategy) for kind in _KIND_TYPES.values()]),
    )
)
def test_fields_of_a_kind_are_written_as_pairs_of_writes_their_dict(values):
    """A FieldsKind's text (one template, the names rendered once) is pairs_of's for the same dict, whatever
    the names and the values: of the declared types (str, int, float: NaN and inf too) or not."""
    kind = fmt.FieldsKind(_KIND_TYPES)
    fields = kind(*values)
    assert dict(fields) == dict(zip(_KIND_TYPES, values))
    assert fmt.pairs_of(fields) == fmt.pairs_of(dict(fields))  # (the text)
    assert fields.text == fmt.pairs_of(dict(fields))
