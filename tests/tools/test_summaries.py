"""What the tools say about 256 ranks fits on a line: rank ranges and the exceptions, never one entry per rank."""

from __future__ import annotations

import pytest
from tools_logfiles import T0, ours, stamp

from distvlog.wording import per_rank

RANKS = 256


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """256 rank files of 20 records; rank 17 was killed mid-record (its last record torn)."""
    run = tmp_path_factory.mktemp("big") / "run"
    run.mkdir()
    for rank in range(RANKS):
        text = ours(rank, [(T0 + 10 * i + rank, f"E error {i} of rank {rank}") for i in range(20)], world=RANKS)
        if rank == 17:
            text = text[: text.rindex("E") + 30]  # inside its last record's line
        (run / f"rank-{rank}.log").write_text(text)
    return run


def test_merge_names_rank_ranges_and_the_exception(big_run, cli):
    code, _, err = cli("merge", big_run, "-o", big_run.parent / "m.log")
    (summary,) = [line for line in err.splitlines() if "records from" in line]
    assert code == 0 and len(summary) < 300
    assert "(ranks 0-16,18-255: 21 each; rank 17: 20 (1 line skipped: in torn records))" in summary


def test_torn_records_of_many_ranks_are_one_warning(tmp_path, cli):
    """A job killed as a whole: every rank's last record torn; one warning line with the ranks as a range."""
    for rank in range(8):
        text = ours(rank, [(T0 + i, f"I record {i}") for i in range(3)], world=8)
        (tmp_path / f"rank-{rank}.log").write_text(text + f"I{stamp(T0 + 9)} 100 t.py:1] [rank {rank}] cut")
    code, _, err = cli("merge", tmp_path, "-o", tmp_path / "m.log")
    warnings = [line for line in err.splitlines() if "torn" in line and "warning" in line]
    assert code == 0 and warnings == [
        "distvlog merge: warning: torn records (cut short by a crash or a kill), not read: ranks 0-7: 1 each"
    ]


def test_trace_and_diff_read_256_ranks_with_short_messages(big_run, cli):
    code, _, err = cli("trace", big_run, "-o", big_run.parent / "t.json")
    assert code == 0 and max(map(len, err.splitlines())) < 300 and "on 256 ranks" in err
    code, out, err = cli("diff", big_run)
    assert code == 1 and max(map(len, (out + err).splitlines())) < 400


@pytest.mark.parametrize(
    "counts, notes, text",
    [
        ({0: 1}, None, "rank 0: 1"),
        ({0: 5, 1: 5}, None, "ranks 0,1: 5 each"),
        (dict.fromkeys(range(1024), 9) | {5: 8}, {5: "torn"}, "ranks 0-4,6-1023: 9 each; rank 5: 8 (torn)"),
        ({r: 100 + r for r in range(1024)}, None, "ranks 0-1023: 100 to 1,123 (626,176 in all)"),
        (
            dict.fromkeys(range(64), 9),
            dict.fromkeys(range(0, 12, 2), "x"),
            "ranks 0-63: 9 each; rank 0: x; rank 2: x; rank 4: x; rank 6: x; and 2 more ranks like these",
        ),
    ],
)
def test_counts_per_rank_in_words(counts, notes, text):
    assert per_rank(counts, notes) == text


def test_launch_names_a_few_ranks_killed_without_their_end_record_then_the_rest_as_ranges(tmp_path, capfd):
    """A failed job of 12 ranks whose logs all lack their end record: the report names four with their
    last record and the other eight as a range, on one line."""
    from distvlog.launch.report import after_run

    run = tmp_path / "run"
    run.mkdir()
    for rank in range(12):
        (run / f"rank-{rank}.log").write_text(ours(rank, [(T0 + rank, f"I step {rank}")], world=12))
    code = after_run(run, 12, 137, started=0.0)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "its log ends at" in line]
    assert code == 137 and [line.split(" (pid")[0] for line in lines] == [
        f"distvlog launch: rank {r}" for r in range(4)
    ]
    assert "distvlog launch: and 8 more ranks (ranks 4-11)\n" in err
