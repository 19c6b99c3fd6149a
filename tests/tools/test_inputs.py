"""What merge, trace and diff say about their input: counts in words, damaged, mixed or missing files."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest
from tools_logfiles import T0, ours, stamp

ONE_RANK = [
    (T0 + 10, "I grad_stats node=mul1GradNode slot=grad_out step=0 norm=1.0 nan=0 inf=0 v=5"),
    (T0 + 20, "I grad_stats node=mul1GradNode slot=grad_x step=0 norm=1.0 nan=0 inf=0 v=5"),
    (T0 + 30, "I allreduce begin step=0 bucket=0 v=1"),
    (T0 + 40, "I allreduce end step=0 bucket=0 checksum=aa v=1"),
]


def test_counts_of_one_are_singular(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(ours(0, [], world=1) + "cut sh")
    code, _, err = cli("merge", tmp_path)
    assert (
        code == 0
        and (
            "1 record from 1 file (rank 0: 1 (1 line skipped: in torn records)) to stdout; 3 header lines; "
            "1 line skipped (1 in torn records)\n"
        )
        in err
    )
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0, "E one error")], world=1))
    code, _, err = cli("trace", tmp_path, "-o", tmp_path / "t.json")
    assert code == 0 and "1 event (1 error) on 1 rank to" in err
    (tmp_path / "rank-0.log").write_text(ours(0, ONE_RANK, world=1))
    code, out, _ = cli("diff", tmp_path)
    assert code == 0 and out.startswith("1 rank, 1 step: 2 gradient statistics, 1 allreduce (aligned by step)\n")


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
        "no log read from ranks 2,3 of 4",
        f"no records in {run}/rank-1.jsonl: 1 line skipped (1 in torn records)",
        f"{run}/rank-0.log: 1 torn record (cut short by a crash or a kill), not read",
    ] + ([] if tool == "merge" else ["1 line skipped (1 in torn records)"])  # merge's summary says it
    if tool == "merge":
        assert (
            "5 records from 2 files (rank 0: 5 (1 line skipped: in torn records))" in err
            and "2 lines skipped (2 in torn records)" in err
        )
        assert (tmp_path / "out").read_text().count("allreduce") == 2


@pytest.mark.parametrize("tool", ["merge", "trace", "diff", "diff --json"])
@pytest.mark.parametrize(
    "files, message",
    [
        (
            {"rank-1.log": "header"},
            "no records in {run}/rank-1.log: 3 header lines, 1 line skipped (1 in torn records)",
        ),
        (
            {"rank-0.jsonl": b'{"event": "no ts", "rank": 0}\n{"ts": "1"}\n'},
            "no records in {run}/rank-0.jsonl: 2 lines skipped (2 JSON without an integer ts)",
        ),
        (
            {"rank-0.log": bytes(range(256)) * 8, "rank-1.log": b""},
            "no usable input file: {run}/rank-0.log: not a glog or JSON-lines log (no line starts a record); "
            "{run}/rank-1.log: empty file",
        ),
    ],
)
def test_no_records_at_all_is_unusable_input_for_every_tool(tmp_path, cli, glog_run, tool, files, message):
    run = tmp_path / "run"
    run.mkdir()
    for name, data in files.items():
        (run / name).write_bytes((glog_run / name).read_bytes()[:300] if data == "header" else data)
    code, out, err = cli(*tool.split(), run, *(["-o", tmp_path / "out"] if tool == "trace" else []))
    assert (code, out, err) == (2, "", f"distvlog {tool.split()[0]}: error: {message.format(run=run)}\n")
    assert not (tmp_path / "out").exists()


def test_one_processes_records_in_two_files_are_refused(tmp_path, cli, glog_run):
    cli("merge", glog_run, "-o", tmp_path / "timeline.log")
    code, out, err = cli("merge", glog_run / "rank-0.log", glog_run / "rank-1.log", tmp_path / "timeline.log")
    rank = int(re.search(r"rank-(\d)\.log and ", err).group(1))  # the first of the two ranks in the timeline's head
    assert (code, out) == (2, "") and err == (
        f"distvlog merge: error: {glog_run}/rank-{rank}.log and {tmp_path}/timeline.log both hold the records of rank "
        f"{rank} (pid {_pid(glog_run / f'rank-{rank}.log')}) of run glogrun: they would be read twice; give only one "
        "of the two\n"
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank-0.log").write_text(ours(0, [(T0, "I x")], world=1))
    with gzip.open(run / "rank-0.log.gz", "wt") as f:  # a compressed copy left next to it
        f.write(ours(0, [(T0, "I x")], world=1))
    code, _, err = cli("diff", run)
    assert code == 2 and "rank-0.log and " in err and "rank-0.log.gz both hold the records of rank 0" in err


def test_the_same_file_twice_is_read_once(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0, "I x")], world=1))
    os.link(tmp_path / "rank-0.log", tmp_path / "hard.log")
    (tmp_path / "soft.log").symlink_to(tmp_path / "rank-0.log")
    code, out, err = cli("merge", tmp_path / "rank-0.log", tmp_path / "hard.log", tmp_path / "soft.log", tmp_path)
    assert code == 0 and out.count("] x\n") == 1 and "2 records from 1 file (rank 0: 2)" in err


def test_files_from_different_runs_are_read_with_a_warning(tmp_path, cli):
    mixed = tmp_path / "mixed"  # (its siblings are this test's alone: none holds a missing rank)
    mixed.mkdir()
    (mixed / "rank-0.log").write_text(ours(0, [(T0, "I from run a")], world=2, run_id="a"))
    (mixed / "rank-1.log").write_text(ours(1, [(T0 + 1, "I from run b")], world=2, run_id="b"))
    code, out, err = cli("merge", mixed)
    assert code == 0 and "from run a" in out and "from run b" in out
    assert err.splitlines()[:3] == [
        f"distvlog merge: warning: the input files are from 2 different runs: a ({mixed}/rank-0.log); "
        f"b ({mixed}/rank-1.log)",
        "distvlog merge: warning: no log read from rank 1 of 2 (run a)",
        "distvlog merge: warning: no log read from rank 0 of 2 (run b)",
    ]


@pytest.mark.parametrize("tool", ["merge", "trace", "diff"])
def test_ranks_without_a_file_are_named(tmp_path, cli, tool):
    for rank in (0, 2):
        (tmp_path / f"rank-{rank}.log").write_text(ours(rank, ONE_RANK, world=6))
    (tmp_path / "rank-2.41.log").write_text(ours(2, [(T0, "I a forked child")], world=6, pid=41))
    code, _, err = cli(tool, tmp_path, *(["-o", tmp_path / "t.json"] if tool == "trace" else []))
    assert code != 2 and [line for line in err.splitlines() if "warning" in line] == [
        f"distvlog {tool}: warning: no log read from ranks 1,3-5 of 6"
    ]


def test_groups_of_ranks_read_the_same_everywhere():
    from distvlog.wording import ranks_text

    assert ranks_text([3]) == "rank 3"
    assert ranks_text([3, 0, 2]) == "ranks 0,2,3"  # sorted; runs of two stay a list
    assert ranks_text(range(1000)) == "ranks 0-999"
    assert ranks_text([9, 1, 3, 4, 5, 7, 8, 3]) == "ranks 1,3-5,7-9"  # the form --ranks takes


def _pid(path: Path) -> int:
    return json.loads(path.read_text().split("distvlog-meta ", 1)[1].split("\n", 1)[0])["pid"]


def test_a_timeline_names_every_process_it_merged_even_one_that_started_late(tmp_path, cli):
    run = tmp_path / "run"
    run.mkdir()
    early = [
        (T0 + i, f"I record {i} of the rank that started first, padded to fill the head {'.' * 60}")
        for i in range(2000)
    ]  # ~260 KB: rank 1's meta record, at its start, comes long after the head
    (run / "rank-0.log").write_text(ours(0, early, world=2))
    (run / "rank-1.log").write_text(ours(1, [(T0 + 5000, "I late")], world=2))
    assert cli("merge", run, "-o", tmp_path / "timeline.log")[0] == 0
    code, _, err = cli("merge", tmp_path / "timeline.log", "-o", tmp_path / "again.log")
    assert code == 0 and "warning" not in err  # (before: "no log read from rank 1 of 2")
    code, _, err = cli("merge", tmp_path / "timeline.log", run / "rank-1.log")
    assert code == 2 and f"{run}/rank-1.log both hold the records of rank 1 (pid 101)" in err


@pytest.mark.parametrize("command", ["merge", "trace", "diff"])
def test_a_log_root_is_read_as_its_latest_run_and_the_tool_says_which(tmp_path, cli, command):
    """`latest` moves with every job: a tool given a log root names the run directory it read; given the run
    directory itself, it has nothing to add."""
    root = tmp_path / "logs"
    for run, when in (("20261201-100000-old", T0), ("20261201-110000-new", T0 + 10**9)):
        (root / run).mkdir(parents=True)
        (root / run / "rank-0.log").write_text(ours(0, [(when + t - T0, text) for t, text in ONE_RANK], world=1))
    (root / "latest").symlink_to("20261201-100000-old")  # the link wins over the newer directory
    out_args = ["-o", str(tmp_path / "t.json")] if command == "trace" else []
    code, _, err = cli(command, root, *out_args)
    assert code == 0 and f"distvlog {command}: {root}: its latest run, {root / '20261201-100000-old'}\n" in err
    code, _, err = cli(command, root / "20261201-110000-new", *out_args)
    assert "its latest run" not in err
