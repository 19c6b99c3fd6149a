"""Reading records: the one reader behind `merge`, `trace`, `diff` and the launcher's report.

    sources = open_sources(["distvlog_logs"])          # a log root, run directory, files (.gz too)
    for record in read_records(sources, where=format.messages_pattern(format.GRAD_STATS)):
        record.rank, record.ts, record.fields["norm"]

A `Source` is one input file: our per-rank files (glog text or JSON lines, with a header giving rank, host,
year and clock offset to rank 0) or foreign glog files (C++ glog, absl-py, Paddle, c10d/NCCL), whose rank
comes from `[rank R]` tags, `--rank-of FILE=R` or `[Rank N]` in the message, and other programs' evidence
(Flight Recorder dumps, profiler traces, NCCL's debug files, torchrun's and Paddle's per-worker files:
_evidence), whose rank comes from what the file says, the launcher's layout or the file's name. It yields `Block`s of whole
records in file order, as columns over a buffer of glog text; `ts` is epoch µs, on rank 0's clock unless
clock correction is off. Every input line ends up in a record, the header, or `counts.skipped` with a
reason. What the tools say about their input (warnings, counts) is here too.
"""

from __future__ import annotations

from ._arena import Arena, Slot
from ._block import Block, Counts, matching
from ._bytes import restamp, take
from ._evidence import STATIC as STATIC_EVIDENCE
from ._evidence import growing as growing_evidence
from ._evidence import line_reader
from ._evidence import objects as evidence_objects
from ._files import parse_int_list, resolve_inputs, trim_left_by_the_dead
from ._header import Clock
from ._notes import Warn, after_reading, ignore, say_runs_read, skipped_text, total, warner
from ._open import add_input_arguments, open_inputs, open_sources, read_records
from ._record import Record, from_glog, from_json
from ._scan import PAD
from ._source import Source

__all__ = [
    "Arena",
    "Block",
    "PAD",
    "STATIC_EVIDENCE",
    "Clock",
    "Counts",
    "matching",
    "Record",
    "Slot",
    "Source",
    "Warn",
    "add_input_arguments",
    "after_reading",
    "evidence_objects",
    "from_glog",
    "from_json",
    "growing_evidence",
    "ignore",
    "line_reader",
    "open_inputs",
    "open_sources",
    "parse_int_list",
    "read_records",
    "resolve_inputs",
    "restamp",
    "say_runs_read",
    "skipped_text",
    "take",
    "total",
    "trim_left_by_the_dead",
    "warner",
]
