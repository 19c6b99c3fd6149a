"""What merge, trace and diff say about their input: counts in words, damaged, mixed or missing files."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools_logfiles import T0, ours, stamp

ONE_RANK = [(T0 + 10, "I grad_stats node=mul1GradNode slot=grad_out step=0 norm=1.0 nan=0 inf=0 v=5"),
            (T0 + 20, "I grad_stats node=mul1GradNode slot=grad_x step=0 norm=1.0 nan=0 inf=0 v=5"),
            (T0 + 30, "I allreduce begin step=0 bucket=0 v=1"),
            (T0 + 40, "I allreduce end step=0 bucket=0 checksum=aa v=1")]


def test_counts_of_one_are_singular(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(ours(0, [], world=1) + "cut sh")
    code, _, err = cli("merge", tmp_path)
    assert code == 0 and ("1 record from 1 file (rank 0: 1) to stdout; 3 header lines; 1 line skipped "
                          "(1 truncated last line)\n") in err
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0, "E one error")], world=1))
    code, _, err = cli("trace", tmp_path, "-o", tmp_path / "t.json")
    assert code == 0 and "1 event (1 error) on 1 rank to" in err
    (tmp_path / "rank-0.log").write_text(ours(0, ONE_RANK, world=1))
    code, out, _ = cli("diff", tmp_path)
    assert code == 0 and out.startswith("1 rank, 2 gradient statistics, 1 allreduce (aligned by step)\n")


def damaged_run(tmp_path: Path, jsonl_run: Path) -> Path:
    """A 4-rank run as a crash leaves it: rank 0 whole but for its cut last line, rank 1 (JSON lines) cut
    inside its meta line, rank 2 overwritten with garbage, rank 3 empty."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank-0.log").write_text(ours(0, ONE_RANK) + f"I{stamp(T0 + 60)} 100 t.py:1] [rank 0] cut sh")
    (run / "rank-1.jsonl").write_bytes((jsonl_run / "rank-1.jsonl").read_bytes()[:200])
    (run / "rank-2.log").write_bytes(bytes(range(256)) * 8)
    (run / "rank-3.log").write_bytes(b"")
    return run


@pytest.mark.parametrize("tool", ["merge", "trace", "diff"])
def test_damaged_rank_files_are_skipped_with_a_warning_naming_each(tmp_path, cli, jsonl_run, tool):
    run = damaged_run(tmp_path, jsonl_run)
    code, out, err = cli(tool, run, *(["-o", tmp_path / "out"] if tool != "diff" else []))
    warnings = [line.split(": warning: ", 1)[1] for line in err.splitlines() if ": warning: " in line]
    assert code != 2 and warnings == [
        f"{run}/rank-2.log: not a glog or JSON-lines log (no line starts a record); skipping it",
        f"{run}/rank-3.log: empty file; skipping it",
        f"no records in {run}/rank-1.jsonl: 1 line skipped (1 truncated last line)",
    ] + ([] if tool == "merge" else ["1 line skipped (1 truncated last line)"])  # merge's summary says it
    if tool == "merge":
        assert "5 records from 2 files (rank 0: 5)" in err and "2 lines skipped (2 truncated last line)" in err
        assert (tmp_path / "out").read_text().count("allreduce") == 2


@pytest.mark.parametrize("tool", ["merge", "trace", "diff", "diff --json"])
@pytest.mark.parametrize("files, message", [
    ({"rank-1.log": "header"}, "no records in {run}/rank-1.log: 3 header lines, 1 line skipped (1 truncated last line)"),
    ({"rank-0.jsonl": b'{"event": "no ts", "rank": 0}\n{"ts": "1"}\n'},
     "no records in {run}/rank-0.jsonl: 2 lines skipped (2 JSON without an integer ts)"),
    ({"rank-0.log": bytes(range(256)) * 8, "rank-1.log": b""},
     "no usable input file: {run}/rank-0.log: not a glog or JSON-lines log (no line starts a record); "
     "{run}/rank-1.log: empty file"),
])
def test_no_records_at_all_is_unusable_input_for_every_tool(tmp_path, cli, glog_run, tool, files, message):
    run = tmp_path / "run"
    run.mkdir()
    for name, data in files.items():
        (run / name).write_bytes((glog_run / name).read_bytes()[:300] if data == "header" else data)
    code, out, err = cli(*tool.split(), run, *(["-o", tmp_path / "out"] if tool == "trace" else []))
    assert (code, out, err) == (2, "", f"distvlog {tool.split()[0]}: error: {message.format(run=run)}\n")
    assert not (tmp_path / "out").exists()
