"""What users log, through the real logger into a real rank file, comes back exactly from the tools' reader,
in both formats: the same records with the same messages and fields, however forged-looking, multi-line,
binary or non-finite they are; `merge` keeps every one of them (also as JSON lines), and `diff` sees no
record that was not written."""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from format_strategies import fields_strategy, message_strategy, names_strategy, same, text_of, text_strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distvlog import format as fmt
from distvlog.cli import main
from distvlog.errors import InputError
from distvlog.tools import diff
from distvlog.tools.read import open_sources, read_records

REPO = Path(__file__).resolve().parents[2]
# One process per format logs the batches it is sent (pickled: lone surrogates, numpy values and all) and
# answers with what each record's severity, message and fields are, as the logger was called.
WRITER = r"""
import logging, pickle, struct, sys, traceback
import distvlog.logger as dlog
log = dlog.get_logger("roundtrip")
dlog.set_vlog_level(1)
dlog.capture_stdlib(logging.INFO)
inp, out = sys.stdin.buffer, sys.stdout.buffer
while head := inp.read(4):
    said = []
    for how, message, fields, extra in pickle.loads(inp.read(struct.unpack("<I", head)[0])):
        if how == "info":
            log.info(message, **fields)
            said.append(("I", message, fields))
        elif how == "warning":
            log.warning(message, **fields)
            said.append(("W", message, fields))
        elif how == "vlog":
            log.vlog(1, message, **fields)
            said.append(("I", message, {**fields, "v": 1}))
        elif how == "exception":
            try:
                raise ValueError(extra)
            except ValueError:
                log.exception(message, **fields)
                said.append(("E", f"{message or ''}\n{traceback.format_exc().rstrip()}", fields))
        elif how == "stdlib":  # a library's logger (its name arbitrary) through the bridge
            logger = logging.getLogger(extra)
            logger.warning(message)
            said.append(("W", message, {"logger": logger.name}))
        else:  # the engine's batch writer, with bound fields
            dlog.LineWriter(log, 9, **fields).lines([(4, message, extra)])
            said.append(("I", message, {**fields, "v": 4, **(extra or {})}))
    dlog.flush()
    data = pickle.dumps(said)
    out.write(struct.pack("<I", len(data)) + data)
    out.flush()
"""

OWN_EVENTS = (fmt.META_EVENT, fmt.END_RECORD)  # the logger's own records (at OWN_FILE)


class Writer:
    """The writing process of one format, and its rank file."""

    def __init__(self, log_dir: Path, fmt_name: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_", "PMI_", "OMPI_"))}
        env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(log_dir), DISTVLOG_FORMAT=fmt_name)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.log_dir = log_dir

    def log(self, batch: list[tuple]) -> list[tuple]:
        data = pickle.dumps(batch)
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(4)
        assert head, "the writer died"
        return pickle.loads(self.proc.stdout.read(struct.unpack("<I", head)[0]))

    @property
    def path(self) -> Path:
        (path,) = [p for p in self.log_dir.glob("*/rank-0.*") if p.parent.name != "latest"]
        return path

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


_extra_names = names_strategy.filter(lambda name: name not in {"self", "level", "event", "v"})
record_strategy = st.one_of(
    st.tuples(st.sampled_from(["info", "warning", "vlog"]), message_strategy(), fields_strategy(), st.none()),
    st.tuples(st.just("exception"), message_strategy(), fields_strategy(3), text_strategy),
    st.tuples(st.just("stdlib"), text_strategy, st.just({}), text_strategy.filter(bool)),
    st.tuples(
        st.just("batch"),
        message_strategy(),
        fields_strategy(3),
        st.none() | st.dictionaries(_extra_names, st.integers() | text_strategy, max_size=3),
    ),
)


def records_of(path: Path) -> tuple[list, object]:
    sources = open_sources([str(path)])
    return list(read_records(sources)), sources[0].counts


def check(record, severity: str, message, fields: dict) -> None:
    assert (record.severity, record.event) == (severity, text_of(fmt.message_of(message))), record
    assert same(record.fields, fields), (record.fields, fields)


@pytest.mark.parametrize("fmt_name", ["glog", "jsonl"])
def test_what_the_logger_writes_the_tools_read_back(tmp_path, fmt_name):
    writer = Writer(tmp_path / "logs", fmt_name)
    written: list[tuple] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(record_strategy, min_size=1, max_size=5))
    def batches(batch):
        said = writer.log(batch)
        written.extend(said)  # (before any assertion: hypothesis goes on with the file as it is)
        records, counts = records_of(writer.path)
        assert not counts.skipped and not counts.torn and len(records) == 1 + len(written)
        for record, (severity, message, fields) in zip(records[-len(said) :], said):
            check(record, severity, message, fields)

    try:
        batches()
    finally:
        writer.close()
    records, _ = records_of(writer.path)
    assert records[0].event == fmt.META_EVENT and len(records) == 2 + len(written)
    assert records[-1].event == fmt.END_RECORD and records[-1].file == fmt.OWN_FILE  # (the writer ended)
    # merge keeps every record, the same, in text and in JSON lines
    for out_format in ("text", "jsonl"):
        out = tmp_path / f"merged.{out_format}"
        assert main(["merge", str(writer.path), "-o", str(out), "--format", out_format]) == 0
        merged = [r for r in records_of(out)[0] if r.event not in OWN_EVENTS or r.file != fmt.OWN_FILE]
        assert len(merged) == len(written)
        for record, (severity, message, fields) in zip(merged, written):
            check(record, severity, message, fields)
    # diff sees exactly the errors that were written, and nothing else it looks for
    errors = {(None, diff.error_text(message)) for severity, message, _ in written if severity == "E"}
    if errors:
        (rank,) = diff.load([str(writer.path)]).ranks.values()
        assert {(f.step, f.text) for f in rank.failures} == errors
        assert not (rank.stats or rank.collectives or rank.digests)
    else:
        with pytest.raises(InputError, match="no gradient statistics"):
            diff.load([str(writer.path)])


FORGER = """
import distvlog.logger as dlog
log = dlog.get_logger("job")
log.vlog_at(5, "grad_stats", node="mul1GradNode", slot="grad_out", step=0, norm=1.0, nan=0, inf=0)
log.info("u", **{"n\\nE1201 13:00:00.000000 1 parallel.py:1] [rank 1] allreduce mismatch": 1})
log.info("x", value="a\\0b")
"""


@pytest.mark.parametrize("fmt_name", ["glog", "jsonl"])
def test_a_forged_record_in_a_field_name_and_a_nul_in_a_value_are_data(tmp_path, capsys, fmt_name):
    """The two examples of issue 19: a field name holding a newline and a glog line made `diff` report a
    forged error (exit 1); a NUL in a value made `merge` drop the record. Both are data now."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_", "PMI_", "OMPI_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"), DISTVLOG_FORMAT=fmt_name)
    subprocess.run([sys.executable, "-c", FORGER], env=env, check=True, capture_output=True, timeout=120)
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "logs")]) == 0
    assert capsys.readouterr().out.endswith("no divergence found by the checks that could run\n")
    assert main(["merge", str(tmp_path / "logs"), "-o", str(tmp_path / "timeline.log")]) == 0
    assert "5 records from 1 file (rank 0: 5) to" in capsys.readouterr().err  # the meta and end records, all 3
    (_, _, forged, nul, _), counts = records_of(tmp_path / "timeline.log")
    assert forged.fields == {"n\nE1201 13:00:00.000000 1 parallel.py:1] [rank 1] allreduce mismatch": 1}
    assert nul.fields == {"value": "a\0b"} and not counts.skipped and not counts.torn
