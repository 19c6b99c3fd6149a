"""The distvlog record format, version 2: what a rank file holds, byte for byte, and how to read it back.

This module is the format's one owner: the logger writes only through it and every tool reads only through
it. It needs the standard library and orjson, nothing else. What follows is the specification; a reader
written from it alone reads every file distvlog writes.

1. FILES
   One file per process: `<log_dir>/<run_id>/rank-<R>.log` (glog text, the default) or `rank-<R>.jsonl`
   (JSON lines), UTF-8. A process forked by rank R writes `rank-<R>.<pid>.log`. A file is a header, then
   records in the order they were written (threads stamp a record before they write it, so timestamps can
   go back a little). A file may end in, or hold between records, PADDING: a run of NUL bytes. Padding is
   neither a record nor damage: a reader skips it, and the end of a padding run starts a new line.
   The RESERVE is padding a writer leaves: it writes records into space it reserved ahead of them (NUL bytes
   after the last record, at most 256 KiB, or as much as one larger record needs). It cuts the reserve off
   when it closes the file; `distvlog launch`'s parent cuts a dead rank's off before it appends its records
   (2.8), moving what was appended past the reserve up to the last record. Only a process that died before
   anyone of distvlog's saw it (SIGKILL, a segfault, os._exit, under plain `mpirun` or `python`) leaves its
   reserve in the file, until the next run in the same log root on its host cuts it; a writer never writes NUL bytes into records (2.4, 3.2). A record a death cut while
   it was being copied keeps one NUL byte after it when the reserve is cut off, so it stays cut (5). What
   the crashing process's faulthandler printed (a segfault, an abort: `Fatal Python error: ...`, then every
   thread's Python stack) follows its reserve, at the end of the file: a reader reads that text, from a NUL
   byte followed by `Fatal Python error: ` to the end of the file, as one F record at `distvlog:0` with the
   time, thread and rank of the last whole record before the reserve (the stacks as its continuation lines;
   in JSON lines, its `event`).

2. GLOG TEXT
2.1 The header: C++ glog's three lines, then the meta record (2.6) as the first record.
        Log file created at: YYYY/MM/DD hh:mm:ss
        Running on machine: HOST
        Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg
    A merged timeline (`distvlog merge`) has instead: `Log file created at: ...`, `Running on machine: ...`,
    `Merged by distvlog: <what>` (its records carry their own ranks and clock-corrected times: no rank's
    header applies to it), `Merged processes: <JSON list of {run_id, rank, pid, world_size}>`, `Log line
    format: ...`. A header line is one that starts with one of these labels, before the first record.

2.2 A record is a first line and, for a multi-line message, continuation lines:
        L MMDD " " hh ":" mm ":" ss "." uuuuuu " " TID " " FILE ":" LINE "] [rank " R "] " BODY "\\n"
        then COUNT continuation lines, each ending in "\\n"
    L is the severity: I (info, and every VLOG), W, E or F. The time is the writer's local time (the meta
    record's `utc_offset_s` gives its zone) with microseconds; the meta record's `created` gives the year.
    TID is the native thread id, LINE and R are decimal. FILE is the call site's file name; characters
    that would break the line (controls, ":") are written as "?".
    A line starts a record when it begins with L, the time and a space; any other line continues one.

2.3 BODY = MESSAGE FIELDS [" +lines=" COUNT]
    FIELDS is zero or more `" " NAME "=" VALUE` pairs (2.5); COUNT is the number of continuation lines, in
    ASCII digits (present only when there are some: its absence means none). The count can be found without
    reading the body: a first line whose last bytes are a space, `+lines=` and digits declares that many.
    A reader splits BODY from the right: it takes off the count, then the last `" " NAME "=" VALUE` as long
    as there is one, and what is left is MESSAGE. Taking a pair off the right is never ambiguous (2.5).

2.4 MESSAGE is written as it is when it is PLAIN:
      - it does not start with `"`;
      - every line of it is printable (`str.isprintable()`: no control character, no line or paragraph
        separator, no lone surrogate);
      - no line but the first could be taken for a record start, ours or another program's (none starts
        with one of `IWEF` and a digit, or with `[`, one of `IWEF` and a digit);
      - its first line does not end with `" " NAME "=" VALUE` (it would be read as a field) and is not
        `+lines=` and digits (it would be read as the count).
    A plain multi-line message is written as its first line (then the fields and the count) and its other
    lines as continuation lines, as glog does: tracebacks and tensor dumps stay readable. Any other message
    is written as one JSON string literal (RFC 8259, with every non-printable character escaped as \\uXXXX),
    on the first line: a message that starts with `"` is always such a literal. A message that is not a
    str is written as its str() (None as the empty message).

2.5 NAME is bare when it is a non-empty printable text without space, `=` or `"`, does not end with `]`
    or `}` and is not `+lines`; else it is a JSON string literal (as in 2.4). VALUE, by the value's type:
      - int: decimal (`-12`); float: Python's repr (`0.25`, `1e-05`, `nan`, `inf`, `-inf`);
        bool: `True` / `False`; None: `None`;
      - str: a JSON string literal; bare only when it reads back the same: it is non-empty and printable,
        has no space, `=` or `"`, does not end with `]` or `}`, is not `True`, `False` or `None` and does
        not match `-?[0-9]+(\\.[0-9]+)?(e[+-]?[0-9]+)?|-?inf|nan` (a writer may quote any str);
      - list, tuple, dict, numpy array: JSON (3.2), compact, starting with `[` or `{`;
      - numpy scalars as the Python number they print as; anything else as its str() (a str).
    Reading a VALUE from the right: ending in `"`, it is a JSON string (its opening quote is the nearest
    `"` before it that follows an even number of backslashes); ending in `]` or `}`, JSON (its opening
    bracket is found by matching brackets, skipping strings); else a bare token: everything back to the
    previous space, `=` or `"`. A bare token that matches the pattern above is a number (an int when it has
    no `.`, `e`, `inf` or `nan`), `True`/`False`/`None` are those, anything else is a str. NAME is read the
    same way (bare: back to the previous space, `=` or `"`); the pair must follow a space.

2.6 The meta record is the file's first record:
        I... TID distvlog:0] [rank R] distvlog-meta {JSON object}
    with the keys `distvlog` (the format version, 2), `format` (glog | jsonl), `rank`, `world_size`,
    `host`, `pid`, `tid`, `run_id`, `created` (local ISO time with µs), `created_us` (epoch µs),
    `utc_offset_s`, `clock_start` and `clock_end`. The clock slots are 64-character strings,
    `"<offset µs> <uncertainty µs> <measured at, epoch µs>"` padded with spaces (all spaces: not measured):
    this rank's clock minus rank 0's, measured when the run starts and when it ends; a reader corrects
    timestamps by the offset, linear between the two. They are rewritten in place, so their width is fixed.
    Records the logger writes about itself (the end of a script, signals, failures outside user code) are
    also at `distvlog:0`.

2.7 Records a writer could not write. When writing fails (a full disk, a file-size limit, an I/O error, the
    file deleted or replaced), the writer drops whole records and counts them; what reached the file of a
    record being written is taken back (the file is truncated to where that write began). Once it can write
    again, its first record is a W record at `distvlog:0` whose message starts with DROPPED (`records
    dropped`), with the fields `dropped` (how many, an int) and `reason` (the error, a str). A file that was
    deleted is created again with a new header (a new meta record, same run, rank and pid), and its first
    record after the meta record is that W record. A value the writer could not render (its __str__ raised,
    a container nested too deeply or containing itself) is written as the str `<unrenderable TYPE: ERROR>`.

2.8 How a rank's process ended, when it ended badly: `distvlog launch` runs each rank under a parent that
    waits for it and then appends to its file an F record at `distvlog:0` whose message starts with DIED
    (`the rank's process ended`), with the fields `status` (the exit status, 128+N after signal N), `parent`
    (the parent's pid: the one the MPI launcher knows and names in its own messages) and, after a signal,
    `signal` (its name). A crash's Python stacks (what faulthandler printed: a segfault, an abort)
    are the record's continuation lines. The parent cuts the rank's reserve off first (1). It is the file's
    last record; its time is when the parent saw the death, so the first of several ranks to die is the one
    with the earliest such record.
    When SIGTERM or SIGINT reaches the parent, it has the rank's faulthandler print the stack of every thread
    at once (it needs no interpreter lock, so a rank blocked in a call that holds it answers too) and appends
    a W record at `distvlog:0`: the signal's name, then STACKS, the stacks as continuation lines.

3. JSON LINES
3.1 One JSON object per line: `ts` (epoch µs, int), `severity`, `v` (when the record is a VLOG), `rank`,
    `world_size`, `tid`, `file`, `line`, `event` (the message, a str), then the fields; keys in any order.
    The first line is the meta record: `event` is `distvlog-meta`, `meta` holds the object of 2.6. There
    is no header otherwise. A line is whole when it ends in "\\n" and parses.
3.2 The JSON mapping (JSON lines, and JSON values inside glog fields): JSON has no NaN or infinity, so
    float NaN, +inf and -inf are the strings "NaN", "Infinity" and "-Infinity" at any depth (as protobuf's
    JSON mapping spells them). A str that equals one of those, or starts with NUL, is written with one NUL
    (\\u0000) in front; a reader turns the three strings back into floats and takes one leading NUL off
    any other string. Tuples are arrays, numpy arrays their nested lists, numpy scalars Python numbers,
    keys that are not str their str(), anything else its str(). Lone surrogates are escaped (\\udXXX); a high
    surrogate followed by a low one is, in JSON, the character the pair encodes, and reads back as it (this
    holds for every text written as a JSON string, in glog text too).

4. NAMES
   A record's own fields are `ts`, `severity`, `rank`, `world_size`, `tid`, `file`, `line` and `event`
   (in the glog prefix) and `v`, the VLOG level (set by a VLOG call; a field, `v=N`, in glog). A caller's
   own `ts` (int) and `file` (str) with `line` (int) replace the logger's (the stdlib bridge passes them);
   a caller cannot set the others. The messages the tools look for (the constants below, by these names):
      - META_EVENT (2.6) and END_RECORD, the last record of a process whose script ended (at its normal
        exit, whatever started it), both at `distvlog:0`; a W record `<SIGNAL>` + BLOCKED_IN_C or IN_PYTHON + `, at (most
        recent call last):` and the stack, where a signal found the rank;
      - the node log's (Paddle's texts): `<node>(0x..) ` + BEGIN_RUN; banners `=` * 26 + TITLE + `: ` +
        api + `=` * 26 with the titles RUNNING_AD_API, RUNNING_CPP_API, FINISH_CPP_API, FINISH_AD_API;
        `<node>(0x..) ` + FOUND_PENDING + `: <next>(0x..)`; GRAD_STATS with the fields node, slot, norm,
        nan, inf (and site, step, pass, shape, dtype; min, max, mean, checksum at level 6);
      - STACKS_ANSWER, a rank's answer to a request for its stacks (`distvlog stacks`, `distvlog watch`:
        a file STACKS_REQUEST in the run directory holding the request's id, and on the rank's host
        STACKS_WAKE_SIGNAL): an I record with the fields `request` (the id) and `state` (`blocked in C` or
        `running Python`: where the main thread was), every thread's Python stack as continuation lines,
        each thread's under a line `thread NAME:`, the main thread's first, most recent call last;
      - the engine's BACKWARD_BEGIN and BACKWARD_END (field pass), DataParallel's ALLREDUCE_BEGIN,
        ALLREDUCE_END (step, bucket, checksum) and ALLREDUCE_PARAM (param, checksum).

4.1 DataParallel's records (verbosity 1 of module `parallel`), which `diff`, `report` and `trace` read:
      parameter layout  names=[parameter names, in order]  buckets=[[indices into names], ...]   (once)
      parameters  step=S  digests=[16 hex digits per parameter, XXH3 of its bytes]  [final=True]
                  (as step S starts; every `digest_every` steps without `digests`; `final` after the last)
      allreduce begin  step=S bucket=B bytes=N checksum=C norm=X   (this rank's gradients going in)
      allreduce end  step=S bucket=B checksum=C wait_us=W          (the average; W: time waited in MPI)
      allreduce param  step=S bucket=B param=NAME checksum=C       (verbosity 2)
    and, at E, `DataParallel check failed check=TEXT culprits=[ranks]` with `reason=TEXT` on a culprit,
    `stopped_by=TEXT` on the other ranks.

5. WHOLE AND TORN RECORDS
   A record is whole when its first line and COUNT continuation lines are all there, each ending in "\\n",
   before the next record starts, padding or the end of the file. A line cut by padding or by the end of
   the file (no "\\n") is cut. Hence:
      - a record whose first line is cut, or that is short of its COUNT lines, or one of whose COUNT lines
        is cut, is TORN (a crash cut it): readers count and name it, never read it as whole;
      - a cut line after a record that has all its lines is a torn record of its own (one whose start was
        cut), and whole lines there, beyond the count, are not part of any record;
      - a record without `+lines` written by another program (C++ glog, distvlog 1) keeps every whole line
        up to the next record start, as glog readers always did;
      - in a file of ours (version 2), a line that starts a record but has no `[rank R] ` tag after the
        prefix's `] ` is DAMAGED (other bytes written over records): readers count it, never read it as a
        record; whole lines beyond a record's count there are not part of any record.
   In JSON lines a line that does not parse is torn when it is cut, else damage.

6. VERSIONS
   The meta record's `distvlog` key is the format version: 1 (no `+lines`, messages and names written
   unescaped) or 2 (this). A reader of version 2 reads version 1 files as other programs' glog (5).
"""

from __future__ import annotations

import contextlib
import json
import operator
import re
import signal
import time
from collections.abc import Collection, Iterable
from typing import Any, NamedTuple

import orjson

VERSION = 2

# -- files (1) ------------------------------------------------------------------------------------------------
SUFFIXES = {"glog": ".log", "jsonl": ".jsonl"}
RANK_FILE_PREFIX = "rank-"
RANK_FILE_NAME = re.compile(r"rank-(\d+)(?:\.(\d+))?\.(?:log|jsonl)")  # the rank, a forked child's pid


def rank_file_stem(rank: int) -> str:
    """A rank's file name without its suffix."""
    return f"{RANK_FILE_PREFIX}{rank}"


# -- names: the record's own fields, the events and texts the tools rely on ---------------------------------
TS, SEVERITY, V, RANK, WORLD_SIZE, TID, FILE, LINE, EVENT = (
    "ts",
    "severity",
    "v",
    "rank",
    "world_size",
    "tid",
    "file",
    "line",
    "event",
)
# The fields the glog prefix carries (v is a field of the body, like any other).
PREFIX_FIELDS = frozenset({EVENT, TS, SEVERITY, RANK, WORLD_SIZE, TID, FILE, LINE})
_PREFIX_COUNT = len(PREFIX_FIELDS)
CORE_FIELDS = (TS, SEVERITY, V, RANK, WORLD_SIZE, TID, FILE, LINE, EVENT)
SEVERITIES = "IWEF"
COUNT_NAME = "+lines"
COUNT_TEXT = f" {COUNT_NAME}="  # how a body's count begins (2.3): a bare name, unlike a field of that name

OWN_FILE, OWN_LINE = "distvlog", 0  # the call site of the logger's own records
META_EVENT = "distvlog-meta"
META_FIELD = "meta"
DROPPED = "records dropped"  # the W record a writer adds once it can write again after failing (2.7)
DROPPED_COUNT, DROPPED_REASON = "dropped", "reason"
END_RECORD = "the script ended"  # a rank's last record when its script ended (at a normal exit)
# How a rank's process ended when it did not end well, written after its death by the process that ran it
# (2.8): the message starts with DIED; `status` is its exit status, 128+N after signal N (named in `signal`).
DIED = "the rank's process ended"
DIED_STATUS, DIED_SIGNAL, DIED_PARENT = "status", "signal", "parent"
# Where a signal found a rank's main thread: the first words after the signal's name in its W record.
BLOCKED_IN_C = " arrived while the main thread was blocked in C"
IN_PYTHON = " arrived while the main thread was running Python"
# The stacks of every thread when a signal arrived, taken without the interpreter lock (2.8): a W record.
STACKS = " arrived; the Python stack of every thread (faulthandler, most recent call first, main thread last)"
# Every thread's stack on request (4): the answer's message, the request file, the signal that wakes a rank
# on the requester's host (its default action is none: a process that does not answer is not hurt).
STACKS_ANSWER = "the Python stack of every thread, as asked"
STACKS_REQUEST = "stacks.request"
STACKS_WAKE_SIGNAL = signal.SIGURG
STACKS_STATE, STACKS_ID = "state", "request"
STATE_BLOCKED, STATE_PYTHON = "blocked in C", "running Python"
# The backward engine and its node log (Paddle's texts), DataParallel, the gradient statistics.
BEGIN_RUN = "begin run"  # "<node>(0x..) begin run"
FOUND_PENDING = "Found pending node"  # "<node>(0x..) Found pending node: <next>(0x..)"
RUNNING_AD_API = "Running_AD_API_GRAD"
RUNNING_CPP_API = "Running_C++_API"
FINISH_CPP_API = "Finish_C++_API"
FINISH_AD_API = "Finish_AD_API_GRAD"
BACKWARD_BEGIN, BACKWARD_END = "backward begin", "backward end"
ALLREDUCE_BEGIN, ALLREDUCE_END, ALLREDUCE_PARAM = "allreduce begin", "allreduce end", "allreduce param"
GRAD_STATS = "grad_stats"
NODE = "node"  # the field naming the GradNode a record is about
# DataParallel's records for `diff` (4.1): the parameter layout once, the parameters' digests as each step
# starts, a failed consistency check's own record.
PARAMETER_LAYOUT, PARAMETERS, CHECK_FAILED = "parameter layout", "parameters", "DataParallel check failed"
LOSS = "loss"  # a field `report` plots for any record with a `step`
# The records a Flight Recorder dump becomes (tools/read/_flight): each entry at its enqueue, start and
# completion times, and the dump itself.
FR_ENQUEUED, FR_STARTED, FR_COMPLETED, FR_DUMP = "fr enqueued", "fr started", "fr completed", "fr dump"
FR_EVENTS = (FR_ENQUEUED, FR_STARTED, FR_COMPLETED, FR_DUMP)
BANNER_EDGE = "=" * 26  # either side of a banner's title
_NODE_LABEL = re.compile(r"(\w+)\(0x[0-9a-fA-F]+\)")


def banner(title: str, api: str) -> str:
    """Paddle's `==========...Running_AD_API_GRAD: multiply_grad==========...` line."""
    return f"{BANNER_EDGE}{title}: {api}{BANNER_EDGE}"


def banner_api(message: str, title: str) -> str | None:
    """The API a banner with this title names (`multiply_grad`), None for any other message."""
    head = f"{BANNER_EDGE}{title}: "
    if message.startswith(head) and message.endswith(BANNER_EDGE) and len(message) > len(head) + len(BANNER_EDGE):
        return message[len(head) : -len(BANNER_EDGE)]
    return None


def begin_run_node(message: str) -> str | None:
    """The node of a `<node>(0x..) begin run` message, None for any other."""
    return node_label_in(message) if message.endswith(f") {BEGIN_RUN}") else None


def node_label_in(message: str) -> str | None:
    """The first node name labelled `Name(0x..)` in a message."""
    match = _NODE_LABEL.search(message)
    return match.group(1) if match else None


# -- the JSON mapping (3.2) -----------------------------------------------------------------------------------
_SPELLED = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_NUL = "\0"
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY
_BIG_INT = re.compile(rb"[0-9]{19}")  # orjson reads integers beyond 64 bits as floats


def _text(value: Any) -> str:
    """str(value); when its __str__ raises, a placeholder naming its type (a log call never raises)."""
    try:
        return str(value)
    except Exception as exc:
        return unrenderable(value, exc)


def _json_safe(value: Any) -> Any:
    """`value` as plain JSON data of the mapping: floats spelled, strings escaped, numpy and other types
    converted, keys made str."""
    kind = type(value)
    if kind is str:
        return _NUL + value if value in _SPELLED or value[:1] == _NUL else value
    if kind is float:
        return value if value - value == 0 else "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {(k if type(k) is str else _text(k)): _json_safe(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_json_safe(v) for v in value]
    if isinstance(value, bool):  # (subclasses, in orjson's order)
        return bool(value)
    if isinstance(value, str):
        return _json_safe(str.__str__(value))
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _json_safe(float(value))
    if isinstance(value, dict):
        return _json_safe(dict(value))
    if isinstance(value, (list, tuple)):
        return _json_safe(list(value))
    if _is_numpy(value):
        return _json_safe(_numpy_plain(value))
    return _json_safe(_text(value))


def _is_numpy(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and hasattr(value, "tolist")


def _numpy_plain(value: Any) -> Any:
    """A numpy array as nested lists; a numpy scalar as the Python number (or bool) it prints as."""
    if getattr(value, "ndim", 0):
        return value.tolist()
    kind = value.dtype.kind
    if kind == "f":
        text = str(value)
        return float(text) if _TYPED(text) else float(value)
    if kind in "iu":
        return int(value)
    if kind == "b":
        return bool(value)
    return value.item() if kind in "cmMUS" else _text(value)


def _default(value: Any) -> Any:
    """What orjson cannot write itself."""
    if isinstance(value, (list, tuple, dict)):
        raise TypeError  # (a subclass orjson refused: the slow path writes it)
    return _json_safe(_text(value))


def _unusual(value: Any) -> bool:
    """Whether orjson's text of `value` differs from the mapping's: a NaN or Inf somewhere (orjson writes null),
    or a str the mapping escapes."""
    kind = type(value)
    if kind is float:
        return value - value != 0
    if kind is str:
        return value in _SPELLED or value[:1] == _NUL
    if kind is dict:
        return any(_unusual(v) for v in value.values())
    if kind is list or kind is tuple:
        return any(_unusual(v) for v in value)
    if _is_numpy(value):
        return _unusual(value.tolist())
    return isinstance(value, (float, str, dict, list, tuple))  # subclasses: let the slow path decide


def _ascii_safe(text: str) -> str:
    """`text` with lone surrogates escaped, so that it encodes as UTF-8 (JSON allows \\udXXX)."""
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return "".join(c if not 0xD800 <= ord(c) < 0xE000 else f"\\u{ord(c):04x}" for c in text)


_SUSPECT = re.compile(rb'null|"NaN"|Infinity"|\\u0000').search


def _suspect(data: bytes) -> bool:
    """Whether orjson's text may differ from the mapping's: a null (maybe a NaN or Inf), a spelled-out float or
    a NUL in a string (maybe a string to escape). One regex scan, not four `in` tests (5x faster on a short
    text): this runs for every JSON-lines record, and for every list or dict a glog record holds."""
    return _SUSPECT(data) is not None


def dumps(value: Any, option: int = 0) -> bytes:
    """`value` as JSON bytes of the mapping (3.2); `option`: more orjson options (indent, newline)."""
    try:
        data = orjson.dumps(value, option=_OPTIONS | option, default=_default)
    except TypeError:  # non-str keys, lone surrogates, integers beyond 64 bits, subclasses
        data = None
    if data is not None and (not _suspect(data) or not _unusual(value)):
        return data
    indent = 2 if option & orjson.OPT_INDENT_2 else None  # (the standard library's text, as orjson's would be)
    separators = (",", ": ") if indent else (",", ":")
    text = json.dumps(_json_safe(value), ensure_ascii=False, allow_nan=False, indent=indent, separators=separators)
    data = _ascii_safe(text).encode()
    return data + b"\n" if option & orjson.OPT_APPEND_NEWLINE else data


def _unsafe(value: Any) -> Any:
    """The inverse of _json_safe on decoded JSON: spelled floats back, one leading NUL off a str."""
    kind = type(value)
    if kind is str:
        if value in _SPELLED:
            return _SPELLED[value]
        return value[1:] if value[:1] == _NUL else value
    if kind is dict:
        return {k: _unsafe(v) for k, v in value.items()}
    if kind is list:
        return [_unsafe(v) for v in value]
    return value


_NEEDS_UNSAFE = re.compile(rb'"(?:NaN|-?Infinity)"|\\u0000')


def _json_loads(raw: bytes) -> Any:
    """Plain JSON (no mapping): orjson, or the standard library where orjson refuses or rounds."""
    if _BIG_INT.search(raw):
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)  # escaped lone surrogates, which orjson refuses; else its own ValueError


def loads(data: bytes | str) -> Any:
    """JSON of the mapping (3.2) back into Python values. ValueError when it is not JSON."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    value = _json_loads(raw)
    return _unsafe(value) if _NEEDS_UNSAFE.search(raw) else value


# -- texts of glog bodies (2.4, 2.5) ---------------------------------------------------------------------------
_BARE_ASCII = re.compile(r"[!#-<>-~]*[!#-<>-\\^-|~]").fullmatch  # printable, no space = ", not ending ] }
_INT_TEXT, _FLOAT_TEXT = r"-?[0-9]+", r"-?(?:[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?|inf)|nan"
_TYPED = re.compile(f"{_FLOAT_TEXT}|True|False|None").fullmatch
_INT = re.compile(_INT_TEXT).fullmatch
_CONSTANTS = {"True": True, "False": False, "None": None}
_WORDS = frozenset({*_CONSTANTS, "nan", "inf"})  # identifiers that read back as another type
_TYPED_FIRST = frozenset("-0123456789inTFN")  # how a text that reads back as another type can start


def json_string(text: str) -> str:
    """`text` as a JSON string literal with every non-printable character escaped (2.4)."""
    try:
        out = orjson.dumps(text).decode()
    except TypeError:  # lone surrogates
        out = json.dumps(text, ensure_ascii=False)
    return out if out.isprintable() else "".join(c if c.isprintable() else _escaped(c) for c in out)


def _escaped(c: str) -> str:
    code = ord(c)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _bare_str(value: str) -> bool:
    """Whether a str value is written bare (2.5)."""
    if value.isascii() and value.isalnum():  # shapes, checksums: bare unless a number or a word
        return not (value.isdigit() or value in _WORDS or ("e" in value and value.replace("e", "", 1).isdigit()))
    if _BARE_ASCII(value):
        return value[0] not in _TYPED_FIRST or _TYPED(value) is None
    return (
        value.isprintable()
        and bool(value)
        and " " not in value
        and "=" not in value
        and '"' not in value
        and value[-1] not in "]}"
        and _TYPED(value) is None
    )


def value_text(value: Any) -> str:
    """A field's VALUE in glog text (2.5)."""
    kind = type(value)
    if kind is str:
        return _str_texts[value]
    if kind is int or kind is float or kind is bool or value is None:
        return repr(value)
    if kind is list or kind is tuple or kind is dict:
        return _json_text(value)
    if _is_numpy(value):
        return value_text(_numpy_plain(value))
    if isinstance(value, bool):  # subclasses: as their base type
        return repr(bool(value))
    if isinstance(value, int):
        return repr(int(value))
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, str):
        return value_text(str.__str__(value))
    if isinstance(value, (list, tuple, dict)):
        return _json_text(value)
    return value_text(_text(value))


def _json_text(value: Any) -> str:
    text = dumps(value).decode()
    return text if text.isprintable() else "".join(c if c.isprintable() else _escaped(c) for c in text)


# NAME and str VALUE texts seen before (2.5): a look-up costs less than deciding again. Field names are few
# and stable: a plain dict, whose rare miss raises KeyError in pairs_of (its slow path decides and learns).
# str values are many (a node's name has a counter): their dict computes a miss itself, without an exception.
_TEXTS_KEPT = 4096
_name_texts: dict[str, str] = {}


class _StrTexts(dict):
    def __missing__(self, value: str) -> str:
        text = value if _bare_str(value) else json_string(value)
        _learn(self, value, text)
        return text


_str_texts = _StrTexts()


def name_text(name: Any) -> str:
    """A field's NAME in glog text (2.5)."""
    text = _name_texts.get(name) if type(name) is str else None
    if text is None:
        key = name if type(name) is str else _text(name)
        plain = (
            key
            and key.isprintable()
            and not (" " in key or "=" in key or '"' in key)
            and key[-1] not in "]}"
            and key != COUNT_NAME
        )
        text = key if plain else json_string(key)
        if type(name) is str:
            _learn(_name_texts, name, text)
    return text


def _learn(texts: dict[str, str], key: str, text: str) -> None:
    if len(texts) >= _TEXTS_KEPT:
        texts.clear()
    texts[key] = text


def pairs_of(fields: dict[str, Any], skip: Collection[str] = ()) -> str:
    """`" NAME=VALUE"` for each field not in `skip`, in order: the FIELDS of a body (2.3). This runs for every
    record: numbers, and names and str values seen before, take no call of their own (str first: most
    values are). `Fields` bring their text along."""
    if type(fields) is Fields and not skip:
        return fields.text
    text = ""  # (a loop, not a comprehension: a comprehension is a call of its own, and the dicts are small)
    try:
        for k, v in fields.items():
            if k in skip:
                continue
            kind = type(v)
            if kind is str:
                text += f" {_name_texts[k]}={_str_texts[v]}"
            elif kind is int or kind is float:
                text += f" {_name_texts[k]}={v}"
            else:
                text += f" {_name_texts[k]}={value_text(v)}"
        return text
    except KeyError:  # a name not seen yet (or not a str): name_text decides it, and learns it
        return "".join([f" {name_text(k)}={value_text(v)}" for k, v in fields.items() if k not in skip])


_call = getattr(operator, "call", lambda f, v: f(v))  # (in C from Python 3.11: no Python frame per value)


class Fields(dict):
    """A record's fields and their FIELDS text (2.3), made together by a `FieldsKind`: `pairs_of` returns it."""

    __slots__ = ("text",)


class FieldsKind:
    """The fields of one kind of record (a gradient's statistics): fixed names in a fixed order, each value of a
    declared type (str, int or float). Their text is one `str.format` of the values, the names rendered once:
    what `pairs_of` writes for the same dict, for the cost of a look-up per value. Values of other types
    (a bool, a numpy number) take `pairs_of`'s way."""

    def __init__(self, fields: dict[str, type]) -> None:
        self.names = tuple(fields)
        self.types = tuple(fields.values())
        if not set(self.types) <= {str, int, float}:
            raise TypeError(f"FieldsKind: a field's type must be str, int or float, got {self.types}")
        heads = [field_text(name).replace("{", "{{").replace("}", "}}") for name in self.names]
        self._format = "{}".join([*heads, ""]).format
        self._texts = tuple(_str_texts.__getitem__ if kind is str else repr for kind in self.types)

    def __call__(self, *values: Any) -> Fields:
        fields = Fields(zip(self.names, values))
        if tuple(map(type, values)) == self.types:
            fields.text = self._format(*map(_call, self._texts, values))
        else:
            fields.text = pairs_of(dict(fields))
        return fields


def field_text(name: str) -> str:
    """How a field begins in a body: `" NAME="`."""
    return f" {name_text(name)}="


# A line after the first that could be taken for a record start (ours, glog 0.7's or c10d's).
_START_LIKE = re.compile(r"\n\[?[IWEF][0-9]")
# Long ASCII messages (tensor dumps) are checked with one translate and two byte searches, not a look-up
# per character: a control character (but "\n") becomes NUL, a severity letter or "[" becomes S, "\n"
# stays, everything else is "a". A line that starts with S is then looked at closely (rare in a dump).
_CLASSES = bytes(
    0 if (b < 0x20 and b != 0x0A) or b == 0x7F else b if b == 0x0A else ord("S") if chr(b) in "IWEF[" else ord("a")
    for b in range(256)
)


def _plain_lines(message: str) -> bool:
    """Whether every line of a message is printable and none after the first could start a record (2.4)."""
    if message.isascii():
        classes = message.encode().translate(_CLASSES)
        return b"\0" not in classes and (b"\nS" not in classes or _START_LIKE.search(message) is None)
    return message.replace("\n", "").isprintable() and _START_LIKE.search(message) is None


def _reads_back(first: str) -> bool:
    """Whether a message's first line that contains `=` reads back as itself (2.4's last rule)."""
    if first[-1] == "=":  # (an empty VALUE is no pair, nor `+lines=` and digits: Paddle's banners end so)
        return True
    if _peel(first, len(first)) is not None:
        return False
    digits = first[len(COUNT_NAME) + 1 :] if first.startswith(COUNT_NAME + "=") else ""
    return not (digits.isdigit() and digits.isascii())


# Messages seen to be plain single lines: event names repeat, and a set look-up is cheaper than the checks.
_PLAIN_MESSAGES: set[str] = set()


# One printable ASCII line that neither starts with `"` nor holds `=`: plain at once, by one regex call.
_PLAIN_ASCII_LINE = re.compile(r"[ !#-<>-~][ -<>-~]*").fullmatch


def _single_plain_line(message: str) -> bool:
    """Whether a message is one line written as it is (2.4), remembered when it is."""
    if _PLAIN_ASCII_LINE(message) is None:
        if "\n" in message or message[:1] == '"' or not message.isprintable():
            return False
        if "=" in message and not _reads_back(message):
            return False
    if len(_PLAIN_MESSAGES) >= 4096:
        _PLAIN_MESSAGES.clear()
    _PLAIN_MESSAGES.add(message)
    return True


def message_lines(message: str) -> tuple[str, str, int]:
    """(first line, the continuation lines joined by "\\n", how many) of a message, as written (2.4)."""
    if message in _PLAIN_MESSAGES or _single_plain_line(message):
        return message, "", 0
    return _not_one_plain_line(message)


def _not_one_plain_line(message: str) -> tuple[str, str, int]:
    """message_lines() of a message that is not one plain line: several plain ones, or a JSON string."""
    first, newline, rest = message.partition("\n")
    if newline and first[:1] != '"' and _plain_lines(message) and ("=" not in first or _reads_back(first)):
        return first, rest, rest.count("\n") + 1
    return json_string(message), "", 0


def message_of(event: Any) -> str:
    """A message as the format writes it: a str as it is, None as "", anything else as its str()."""
    return event if type(event) is str else "" if event is None else _text(event)


# -- reading a body from the right (2.3, 2.5) --------------------------------------------------------------------
def _escaped_at(text: str, i: int) -> bool:
    """Whether text[i] follows an odd number of backslashes."""
    k = i
    while k > 0 and text[k - 1] == "\\":
        k -= 1
    return (i - k) % 2 == 1


def _open_quote(text: str, close: int) -> int:
    """The opening quote of the JSON string whose closing quote is text[close]; -1 if there is none."""
    i = close
    while True:
        i = text.rfind('"', 0, i)
        if i < 0 or not _escaped_at(text, i):
            return i


def _open_bracket(text: str, close: int) -> int:
    """The bracket opening the JSON array or object closed at text[close] (strings skipped); -1 if none."""
    depth, i = 1, close
    while i > 0:
        i -= 1
        c = text[i]
        if c == '"':
            if _escaped_at(text, i):
                return -1
            i = _open_quote(text, i)
            if i < 0:
                return -1
        elif c == "]" or c == "}":
            depth += 1
        elif c == "[" or c == "{":
            depth -= 1
            if not depth:
                return i
    return -1


def _token_start(text: str, end: int) -> int:
    """Where the JSON string, JSON value or bare token ending at `end` starts; -1 if none does."""
    c = text[end - 1]
    if c == '"':
        return -1 if _escaped_at(text, end - 1) else _open_quote(text, end - 1)
    if c == "]" or c == "}":
        return _open_bracket(text, end - 1)
    start = max(text.rfind(" ", 0, end), text.rfind("=", 0, end), text.rfind('"', 0, end)) + 1
    return start if start < end else -1


def _peel(text: str, end: int) -> tuple[int, str, Any, bool] | None:
    """The pair `" NAME=VALUE"` ending text[:end]: (where its space is, name, value, whether the name is
    bare); None when text[:end] does not end with one."""
    if end < 4:
        return None
    vstart = _token_start(text, end)
    if vstart < 2 or text[vstart - 1] != "=":
        return None
    nend = vstart - 1
    nstart = _token_start(text, nend)
    if nstart < 1 or text[nstart - 1] != " ":
        return None
    try:
        value = _read_value(text[vstart:end])
        bare = text[nstart] != '"'
        name = text[nstart:nend] if bare else _read_string(text[nstart:nend])
    except ValueError:
        return None
    return nstart - 1, name, value, bare


def _read_string(token: str) -> str:
    """A JSON string literal of a glog body (no mapping: 3.2 is for JSON values)."""
    value = _json_loads(token.encode("utf-8", "surrogatepass"))
    if type(value) is not str:
        raise ValueError("not a string")
    return value


def _read_value(token: str) -> Any:
    """A VALUE token back into its Python value (2.5): what it is, its last character says (a bare token
    may start with `[` or `{`)."""
    last = token[-1]
    if last == '"':
        return _read_string(token)
    if last == "]" or last == "}":
        value = loads(token)
        if type(value) not in (list, dict):
            raise ValueError("not a JSON array or object")
        return value
    if _TYPED(token):
        if token in _CONSTANTS:
            return _CONSTANTS[token]
        return int(token) if _INT(token) else float(token)
    return token


class Body(NamedTuple):
    message: str  # the first line's message, decoded (continuation lines not included)
    fields: dict[str, Any]
    count: int  # the continuation lines it declares (0: none declared)


# A pair whose NAME and VALUE are both bare and hold no `"`, bracket or brace (most pairs): `_peel` reads it as
# the text from the space before it, and so does one match, its VALUE typed by `_bare_value` as `_read_value`
# would.
_BARE_TOKEN = r'[^ ="\[\]{}]+'
_BARE_PAIR = re.compile(f"({_BARE_TOKEN})=({_BARE_TOKEN})").fullmatch
# The run of bare pairs a body ends with: most bodies are a message and such a run, whose pairs `split_body`
# reads by splitting it, several times faster than a regex per pair.
_BARE_TAIL = re.compile(f"(?: {_BARE_TOKEN}={_BARE_TOKEN})+$")
_FLOAT = re.compile(_FLOAT_TEXT).fullmatch


_BARE_VALUES: dict[str, Any] = {}  # token -> its value: most repeat (names, sites, shapes, small ints)
_BARE_VALUES_KEPT = 4096


def _bare_value(token: str) -> Any:
    """A bare VALUE typed: an int, a float, a constant, else the text."""
    value = _BARE_VALUES.get(token, _BARE_VALUES)
    if value is _BARE_VALUES:
        if len(_BARE_VALUES) >= _BARE_VALUES_KEPT:
            _BARE_VALUES.clear()
        value = _BARE_VALUES[token] = _typed_bare(token)
    return value


def _typed_bare(token: str) -> Any:
    if token.isascii() and (token.isdigit() or token[0] == "-" and token[1:].isdigit()):
        return int(token)
    if token[0] in "-0123456789in" and _FLOAT(token):
        return float(token)
    return _CONSTANTS.get(token, token)


def split_body(body: str) -> Body:
    """A record's first line after its `[rank R] ` tag: message, fields and declared line count (2.3)."""
    end = len(body)
    found: list[tuple[str, Any]] = []
    if "=" not in body:
        return Body(_message(body), {}, 0)
    count = declared_count(body.encode("utf-8", "surrogatepass"))
    if count:
        end = max(body.rfind(COUNT_TEXT), 0)  # (the tag's space precedes a body that is only the count)
    tail: list[tuple[str, Any]] = []
    run = _BARE_TAIL.search(body, 0, end)
    if run is not None:
        tail = [(name, _bare_value(value)) for name, _, value in (p.partition("=") for p in run[0][1:].split(" "))]
        end = run.start()
    while True:
        space = body.rfind(" ", 0, end)
        bare = _BARE_PAIR(body, space + 1, end) if space >= 0 else None
        if bare is not None:
            found.append((bare[1], _bare_value(bare[2])))
            end = space
            continue
        peeled = _peel(body, end)
        if peeled is None:
            break
        found.append((peeled[1], peeled[2]))
        end = peeled[0]
    return Body(_message(body[:end]), dict([*reversed(found), *tail]), count)


def _message(message: str) -> str:
    """A body's MESSAGE decoded (2.4)."""
    if message[:1] == '"':
        with contextlib.suppress(ValueError):  # not ours (a foreign message, version 1): the text as it is
            message = _read_string(message)
    return message


# -- glog: writing (2.1 - 2.6) --------------------------------------------------------------------------------
HEADER_CREATED = "Log file created at: "
HEADER_MACHINE = "Running on machine: "
HEADER_FORMAT = "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg"
MERGED_MARK = "Merged by distvlog:"
PROCESSES_MARK = "Merged processes:"
HEADER_LABELS = (HEADER_CREATED, HEADER_MACHINE, "Running duration ", "Log line format: ", MERGED_MARK, PROCESSES_MARK)
STAMP = "mmdd hh:mm:ss.uuuuuu"  # what follows the severity letter (its layout, for vectorised readers)
RANK_TAG_OPEN, RANK_TAG_CLOSE = "[rank ", "] "
_DIGITS3 = [f"{i:03d}" for i in range(1000)]


def _file_text(file: Any) -> str:
    text = file if type(file) is str else _text(file)
    if text.isprintable() and ":" not in text:
        return text
    return "".join("?" if c == ":" or not c.isprintable() else c for c in text)


def rank_tag(rank: int) -> str:
    """`[rank R] `, after the `] ` that ends a prefix."""
    return f"{RANK_TAG_OPEN}{rank}{RANK_TAG_CLOSE}"


class GlogWriter:
    """glog text records: `Lmmdd hh:mm:ss.` is cached per second and severity, ` tid file:line] [rank R] `
    per thread and call site. Threads write concurrently, so the second and its stamps are one tuple.

    Calling it with an event dict (structlog's processor signature: it is the logger's renderer) writes
    that record; `records` writes records made together. Both are the hot path of every log call: each is one
    Python call, with the common cases (plain messages, identifier names, numbers) inline."""

    def __init__(self) -> None:
        self._stamp: tuple[int, dict[str, str]] = (-1, {})
        self._sites: dict[tuple, str] = {}

    def __call__(self, _logger: object, _method: str, ed: dict[str, Any]) -> bytes:
        """The record of an event dict holding the record's own fields (PREFIX_FIELDS) and its other fields."""
        fields = pairs_of(ed, PREFIX_FIELDS) if len(ed) > _PREFIX_COUNT else ""
        return self.records(ed[TS], ed[SEVERITY], ed[TID], ed[FILE], ed[LINE], ed[RANK], ((ed[EVENT], fields),))

    def records(
        self, ts: int, severity: str, tid: int, file: str, line: int, rank: int, records: Iterable[tuple[Any, str]]
    ) -> bytes:
        """Records made at one moment at one call site, each `(message, fields)` (`fields`: `pairs_of()` of its
        fields), as one piece of bytes."""
        second, us = divmod(ts, 1_000_000)
        stamp = self._stamp
        if second != stamp[0]:
            text = time.strftime("%m%d %H:%M:%S", time.localtime(second))
            stamp = self._stamp = (second, {sev: f"{sev}{text}." for sev in SEVERITIES})
        key = (tid, file, line, rank)
        site = self._sites.get(key)
        if site is None:
            site = self._site(key)
        prefix = f"{stamp[1][severity]}{_DIGITS3[us // 1000]}{_DIGITS3[us % 1000]}{site}"
        texts = []
        plain = _PLAIN_MESSAGES
        for event, fields in records:
            message = event if type(event) is str else message_of(event)
            if "\n" not in message and (message in plain or _single_plain_line(message)):
                texts.append(f"{prefix}{message}{fields}\n")  # (record_text's first case, inlined)
            else:
                texts.append(_lines_text(prefix, *_not_one_plain_line(message), fields))
        text = texts[0] if len(texts) == 1 else "".join(texts)
        try:
            return text.encode()
        except UnicodeEncodeError:  # a lone surrogate in a file name: kept visible, escaped
            return text.encode("utf-8", "backslashreplace")

    def _site(self, key: tuple) -> str:
        if len(self._sites) > 100_000:
            self._sites.clear()
        tid, file, line, rank = key
        line = line if type(line) is int and line >= 0 else 0  # (a caller's own, past the processor's check)
        site = self._sites[key] = f" {tid} {_file_text(file)}:{line}] [rank {rank}] "
        return site

    def header(self, meta: dict[str, Any]) -> bytes:
        """glog's header lines and the meta record (2.1, 2.6)."""
        created = time.localtime(meta["created_us"] // 1_000_000)
        head = (
            f"{HEADER_CREATED}{time.strftime('%Y/%m/%d %H:%M:%S', created)}\n"
            f"{HEADER_MACHINE}{_file_text(meta['host'])}\n{HEADER_FORMAT}\n"
        )
        message = f"{META_EVENT} {_json_text(meta)}"
        return head.encode() + self.records(
            meta["created_us"], "I", meta["tid"], OWN_FILE, OWN_LINE, meta["rank"], ((message, ""),)
        )


def unrenderable(value: Any, exc: BaseException) -> str:
    """The text standing for a value that cannot be rendered (2.7)."""
    return f"<unrenderable {type(value).__name__}: {type(exc).__name__}>"


RECORD_START = re.compile(rb"[IWEF][0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} ")  # a line that starts a record (2.2)
_RECORD_STARTS = re.compile(b"^" + RECORD_START.pattern, re.M)
# What a reader calls the lines that are not part of a whole record (5), in its counts of skipped lines.
TORN = "in torn records"
STRAY = "not part of a record"
DAMAGED = "in damaged records"


def count_records(data: bytes, fmt: str) -> int:
    """How many records `data` (whole records as a writer made them) holds: its lines that start a record in
    glog text (2.2: a continuation line never looks like one), its lines in JSON lines."""
    return data.count(b"\n") if fmt == "jsonl" else len(_RECORD_STARTS.findall(data))


def one_line_records(data: bytes) -> list[bytes] | None:
    """The records of `data` (whole lines), each with its newline, when every line starts a record and none
    declares continuation lines (the common case, found in two scans in C); None otherwise."""
    lines = data.count(b"\n")
    if COUNT_TEXT.encode() in data or len(_RECORD_STARTS.findall(data)) != lines:
        return None
    return [line + b"\n" for line in data.split(b"\n", lines)[:lines]]


def continuation_end(data: bytes, stop: int, end: int, count: int) -> tuple[int, bool | None]:
    """Where a glog record's `count` continuation lines, from `stop` (the end of its first line), end in
    data[:end], and whether the record is whole (5): None while a line is still missing, False when a record
    starts before the count is complete (it is torn, and the next record starts at the position returned)."""
    for _ in range(count):
        more = data.find(b"\n", stop, end)
        if more < 0:
            return stop, None
        if RECORD_START.match(data, stop):
            return stop, False
        stop = more + 1
    return stop, True


def record_text(prefix: str, message: str, fields: str) -> str:
    """A whole record: its first line up to the body (`prefix`), the message, the fields (`pairs_of()`)."""
    return _lines_text(prefix, *message_lines(message), fields)


def _lines_text(prefix: str, first: str, rest: str, count: int, fields: str) -> str:
    if count:
        return f"{prefix}{first}{fields} {COUNT_NAME}={count}\n{rest}\n"
    return f"{prefix}{first}{fields}\n"


def prefix_text(severity: str, stamp: str, tid: Any, file: Any, line: Any, rank: int) -> str:
    """A first line up to its body, for a record from elsewhere (`stamp`: `mmdd hh:mm:ss.uuuuuu`)."""
    severity = severity if severity in SEVERITIES and severity else "I"
    tid_text = str(tid) if type(tid) is int else _file_text(tid).replace(" ", "?") or "0"
    return f"{severity}{stamp} {tid_text} {_file_text(file)}:{line if type(line) is int else 0}] [rank {rank}] "


def json_to_glog(record: dict[str, Any], rank: int, stamp: str) -> str:
    """A JSON-lines record as the glog text of the same record (3.1 to 2.2)."""
    prefix = prefix_text(
        str(record.get(SEVERITY) or "I")[:1],
        stamp,
        record.get(TID, 0),
        record.get(FILE, "?"),
        record.get(LINE, 0),
        rank,
    )
    meta = meta_of(record)
    if meta is not None:
        return record_text(prefix, f"{META_EVENT} {_json_text(meta)}", "")
    fields = {k: v for k, v in record.items() if k not in PREFIX_FIELDS and (k != V or v is not None)}
    return record_text(prefix, message_of(record.get(EVENT)), pairs_of(fields))


def merged_header(created: str, hosts: list[str], what: str, metas: list[dict[str, Any]]) -> bytes:
    """The header of a merged timeline (2.1): `created` as YYYY/MM/DD hh:mm:ss, `what` it merged."""
    who = [{k: m.get(k) for k in _WHO} for m in metas]
    return (
        f"{HEADER_CREATED}{created}\n{HEADER_MACHINE}{_file_text(','.join(hosts) or 'unknown')}\n"
        f"{MERGED_MARK} {what}\n{PROCESSES_MARK} {dumps(who).decode()}\n{HEADER_FORMAT}\n"
    ).encode()


# -- JSON lines: writing (3) -----------------------------------------------------------------------------------
def json_record(record: dict[str, Any]) -> bytes:
    """One record as a JSON line (its message a str, 2.4's last rule)."""
    if type(record.get(EVENT)) is not str:
        record[EVENT] = message_of(record.get(EVENT))
    return dumps(record, orjson.OPT_APPEND_NEWLINE)


def json_header(meta: dict[str, Any]) -> bytes:
    return json_record(meta_record(meta))


# -- the meta record (2.6) ------------------------------------------------------------------------------------
CLOCK_SLOT_WIDTH = 64
CLOCK_START, CLOCK_END = "clock_start", "clock_end"  # measured when the run starts, when it ends
CLOCK_SLOTS = (CLOCK_START, CLOCK_END)
_WHO = ("run_id", "rank", "pid", "world_size")  # what a meta record says about the process that wrote it


def clock_slot(offset_us: float, uncertainty_us: float, ts_us: int) -> str:
    text = f"{offset_us:.1f} {uncertainty_us:.1f} {ts_us}"
    return text.ljust(CLOCK_SLOT_WIDTH)[:CLOCK_SLOT_WIDTH]


def clock_of_slot(text: Any) -> tuple[float, int] | None:
    """(offset µs, measured at µs) from a clock slot, None when it is blank or not one."""
    parts = str(text or "").split()
    try:
        return (float(parts[0]), int(parts[2])) if len(parts) >= 3 else None
    except ValueError:
        return None


def clock_slot_offsets(header: bytes) -> dict[str, int]:
    """Where each clock slot's text starts in the header bytes, to rewrite it in place."""
    return {slot: header.index(f'"{slot}":"'.encode()) + len(slot) + 4 for slot in CLOCK_SLOTS}


def make_meta(
    *, rank: int, world_size: int, host: str, pid: int, tid: int, run_id: str, fmt: str, created_us: int
) -> dict[str, Any]:
    local = time.localtime(created_us // 1_000_000)
    return {
        "distvlog": VERSION,
        "format": fmt,
        "rank": rank,
        "world_size": world_size,
        "host": host,
        "pid": pid,
        "tid": tid,
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S", local) + f".{created_us % 1_000_000:06d}",
        "created_us": created_us,
        "utc_offset_s": local.tm_gmtoff,
        "clock_start": clock_slot(0.0, 0.0, created_us),
        "clock_end": " " * CLOCK_SLOT_WIDTH,
    }


def meta_record(meta: dict[str, Any]) -> dict[str, Any]:
    """The meta record as a JSON-lines record (the glog one is written by GlogWriter.header)."""
    return {
        TS: meta["created_us"],
        SEVERITY: "I",
        RANK: meta["rank"],
        WORLD_SIZE: meta["world_size"],
        TID: meta["tid"],
        FILE: OWN_FILE,
        LINE: OWN_LINE,
        EVENT: META_EVENT,
        META_FIELD: meta,
    }


def _valid_meta(meta: Any) -> dict[str, Any] | None:
    return meta if isinstance(meta, dict) and type(meta.get(RANK)) is int and meta[RANK] >= 0 else None


def meta_of(record: GlogRecord | dict[str, Any]) -> dict[str, Any] | None:
    """The metadata of a meta record (a parsed glog record or a JSON-lines object), None for any other."""
    if isinstance(record, GlogRecord):
        if (record.file, record.line) != (OWN_FILE, OWN_LINE) or not record.message.startswith(META_EVENT + " {"):
            return None
        try:
            return _valid_meta(loads(record.message[len(META_EVENT) + 1 :]))
        except ValueError:
            return None
    if record.get(EVENT) != META_EVENT or (record.get(FILE), record.get(LINE)) != (OWN_FILE, OWN_LINE):
        return None
    return _valid_meta(record.get(META_FIELD))


def processes_line_metas(line: bytes) -> list[dict[str, Any]] | None:
    """The processes a merged timeline's `Merged processes:` header line lists; None for another line or
    one cut short."""
    if not line.startswith(PROCESSES_MARK.encode()):
        return None
    try:
        listed = loads(line[len(PROCESSES_MARK) :])
    except ValueError:
        return None
    return listed if isinstance(listed, list) and all(_valid_meta(m) for m in listed) else None


# -- reading: header lines, glog records, JSON lines (2, 3) -------------------------------------------------------
_HEADER_LINE = re.compile(rb"^(?:" + b"|".join(re.escape(label.encode()) for label in HEADER_LABELS) + rb")")
_CREATED = re.compile(rb"^" + re.escape(HEADER_CREATED.encode()) + rb"(\d{4})/(\d\d)/(\d\d) ")
_FIRST_LINE = re.compile(r"([IWEF])(\d{4} \d\d:\d\d:\d\d\.\d{6}) +(\S+) (.*?):(\d+)\] (?:\[rank (\d+)\] )?")


def is_header_line(line: bytes) -> bool:
    """One of glog's (or a merged timeline's) header lines (2.1)."""
    return _HEADER_LINE.match(line) is not None


def created_year(lines: list[bytes]) -> int | None:
    """The year of a `Log file created at:` line among header lines."""
    for line in lines:
        match = _CREATED.match(line)
        if match:
            return int(match.group(1))
    return None


def host_of(lines: list[bytes]) -> str | None:
    """The host of a `Running on machine:` line among header lines."""
    for line in lines:
        if line.startswith(HEADER_MACHINE.encode()):
            return line[len(HEADER_MACHINE) :].decode("utf-8", "replace").strip() or None
    return None


def is_merged(lines: list[bytes]) -> bool:
    return any(line.startswith(MERGED_MARK.encode()) for line in lines)


def meta_of_head(head: bytes) -> dict[str, Any] | None:
    """The metadata of a file from its first bytes (its header and first record), None when its first record
    is not a meta record (another program's file, a merged timeline, one cut short)."""
    for line in head.split(b"\n")[:-1]:  # (the last piece may be cut)
        if is_header_line(line):
            continue
        if line[:1] == b"{":
            record = parse_json(line)
            return None if record is None else meta_of(record)
        parsed = parse_glog(line.decode("utf-8", "replace"))
        return None if parsed is None else meta_of(parsed)
    return None


class GlogRecord(NamedTuple):
    severity: str
    stamp: str  # `mmdd hh:mm:ss.uuuuuu`, local time
    tid: int | str
    file: str
    line: int
    rank: int | None  # from the `[rank R]` tag (None for another program's record without one)
    message: str  # continuation lines included
    fields: dict[str, Any]
    count: int  # the continuation lines the record declares (0: none declared)


def parse_glog(text: str) -> GlogRecord | None:
    """One glog record (its first line and continuation lines, without the last "\\n") into its parts; None
    when the first line does not start a record."""
    first, nl, rest = text.partition("\n")
    match = _FIRST_LINE.match(first)
    if not match:
        return None
    severity, stamp, tid, file, line, rank = match.groups()
    body = split_body(first[match.end() :])
    return GlogRecord(
        severity,
        stamp,
        int(tid) if tid.isdigit() else tid,
        file,
        int(line),
        None if rank is None else int(rank),
        body.message + nl + rest,
        body.fields,
        body.count,
    )


def declared_count(first_line: bytes) -> int:
    """The continuation lines a record's first line (or its body) declares (2.3), 0 when it declares none."""
    name = COUNT_TEXT[1:].encode()
    at = first_line.rfind(name)
    digits = first_line[at + len(name) :] if at >= 0 and (at == 0 or first_line[at - 1 : at] == b" ") else b""
    return int(digits) if digits.isdigit() and digits.isascii() else 0


def parse_json(line: bytes) -> dict[str, Any] | None:
    """One JSON-lines record into its object (3.2 applied); None when it is not a JSON object."""
    try:
        value = loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- what tools look for in glog text, without decoding records ----------------------------------------------------
_TAG = re.escape(RANK_TAG_OPEN.encode()) + rb"(\d+)" + re.escape(RANK_TAG_CLOSE.encode())  # (a regex's text)
RANK_TAG_PATTERN = re.compile(rb"\] " + _TAG)  # a tag where a prefix ends


def texts_pattern(*texts: str) -> re.Pattern[bytes]:
    """A regex finding any of `texts` in glog text (to pick the records worth decoding)."""
    return re.compile(b"|".join(re.escape(t.encode()) for t in texts))


def field_pattern(name: str) -> re.Pattern[bytes]:
    """A regex finding a field `name=` (bare name) in glog text."""
    return re.compile(rb" " + re.escape(name_text(name).encode()) + rb"=")


def messages_pattern(*events: str) -> re.Pattern[bytes]:
    """A regex finding the glog records whose message is, or starts with, one of `events` followed by a space
    or the end of the line."""
    alternatives = b"|".join(re.escape(e.encode()) for e in events)
    return re.compile(rb"\] " + _TAG + rb"(?:" + alternatives + rb")(?=[ \n]|$)", re.M)


def own_record_pattern(message: str) -> re.Pattern[bytes]:
    """A regex finding the logger's own record (at distvlog:0) with exactly this plain message."""
    site = re.escape(f" {OWN_FILE}:{OWN_LINE}] ".encode())
    return re.compile(site + _TAG + re.escape(message.encode()) + rb"\n")
