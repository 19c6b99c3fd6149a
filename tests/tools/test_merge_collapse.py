"""`distvlog merge --collapse`: records ranks wrote in common folded into one line, the ranks that stand apart
kept whole and marked. On a real 16-rank run of launch/train.py (made once: 16 ranks on 2 cores take ~30 s),
on synthetic rank files in our format, on other programs' glog, and live (`--follow`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from tools_logfiles import T0, ours

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed"))
from launch_testkit import launch_train  # noqa: E402

from distvlog.tools.merge._collapse import Collapser  # noqa: E402

RANKS = 16
NAN_RANK, NAN_STEP = 2, 5
FOLDED = re.compile(r"^[IWEF]\d{4} [\d:.]{15} \S+ \S+\] \[(ranks? [^\]]*)\] ", re.M)


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory) -> Path:
    """16 ranks of launch/train.py, 6 steps, rank 2's gradients NaN from step 5: healthy before, and every rank
    NaN alike after its allreduce."""
    args = ["--steps", "6", "--inject-nan-rank", str(NAN_RANK), "--inject-nan-step", str(NAN_STEP)]
    return launch_train(tmp_path_factory.mktemp("collapse16"), RANKS, *args)


def test_report_shows_the_collapsed_timeline_around_the_first_difference(nan_run, cli, tmp_path):
    """`distvlog report`: a table of the folded records just before rank 2's first NaN, the line naming both
    sides of it and rank 2's record kept whole, marked."""
    code, _, err = cli("report", nan_run, "-o", tmp_path / "report.html")
    assert code == 0, err
    page = (tmp_path / "report.html").read_text()
    table = page[page.index('<section id="timeline">') : page.index('<section id="plots">')]
    rows = re.findall(r"<tr( class=apart)?><td>[^<]*</td><td>[^<]*</td><td>([^<]*)</td>", table)
    first = next(i for i, (apart, _) in enumerate(rows) if apart)
    assert first == 8 and all(who == "ranks 0-15" for _, who in rows[:first])
    assert rows[first][1].startswith("ranks 0,1,3-15: nan=0; rank 2: nan=2048")
    assert rows[first + 1] == (" class=apart", "rank 2 differs: nan=2048")


def test_diff_context_shows_the_collapsed_lines_around_the_first_difference(nan_run, cli):
    """`distvlog diff --context 2`: after its findings, 2 folded lines before the first difference and 2 from
    it on, the lines that set rank 2 apart marked `!`."""
    code, out, err = cli("diff", nan_run, "--context", "2")
    assert code == 1, err
    assert out.startswith("16 ranks") and "NaN/Inf origin: rank 2 step 5 pow6GradNode grad_x" in out
    lines = out[out.index("context (merge --collapse):\n") :].splitlines()[1:]
    assert [line[:2] for line in lines] == ["  ", "  ", "! ", "! "]
    assert "] [rank 2 differs: nan=2048] grad_stats node=pow6GradNode" in lines[3]


def per_rank_records(err: str) -> int:
    return int(re.search(r"\(ranks 0-15: ([\d,]+) each\)", err).group(1).replace(",", ""))


def test_a_16_rank_run_folds_to_one_ranks_lines_with_the_nan_rank_marked(nan_run, cli):
    """Every record folds into one line of all 16 ranks (values agreed or spread), as many lines as one rank
    wrote, except rank 2's at step 5 where its gradients are NaN: those stay whole, marked, each after the
    folded line of the other 15 that names both sides."""
    code, out, err = cli("merge", "--collapse", nan_run)
    assert code == 0, err
    tags = FOLDED.findall(out)
    folded = [t for t in tags if t.startswith("ranks")]
    whole = [t for t in tags if t.startswith("rank ")]
    assert len(folded) == per_rank_records(err)
    assert {t for t in folded if ":" not in t} == {"ranks 0-15"}
    assert all(t.startswith("ranks 0,1,3-15: ") and "; rank 2: " in t for t in folded if ":" in t)
    assert whole and all(t.startswith("rank 2 differs: ") for t in whole)
    lines = [line for line in out.splitlines() if "[rank 2 differs" in line]
    assert all(f"step={NAN_STEP}" in line for line in lines)
    assert "[rank 2 differs: nan=2048] grad_stats " in lines[0]  # the first NaN: the square root's gradient
    begins = [line for line in lines if "allreduce begin" in line]
    assert len(begins) == 2 and all("norm=nan" in b and re.search(r"checksum=[0-9a-f]{16}", b) for b in begins)
    ended = [line for line in out.splitlines() if "] allreduce end " in line and f"step={NAN_STEP - 1} " in line]
    assert re.search(r"checksum=[0-9a-f]{16} wait_us=\S+\.\.\S+ max@\d+", ended[0])  # agreed; spread
    assert f"collapsed into {len(tags):,} records" in err
    code, out, err = cli("merge", "--collapse", "--grep", "allreduce .* step=5 ", nan_run)  # the filters first
    tags = FOLDED.findall(out)
    assert len(tags) == 6 and [t for t in tags if t.startswith("rank ")] == ["rank 2 differs: norm=nan"] * 2


def test_jsonl_gives_each_folded_record_its_ranks_and_values(nan_run, cli):
    """--format jsonl: one object per folded record with its ranks as runs and each field as a value or a
    spread; the records kept whole as merge writes them, with their mark."""
    code, out, err = cli("merge", "--collapse", "--format", "jsonl", nan_run)
    assert code == 0, err
    objs = [json.loads(line) for line in out.splitlines()]
    folded = [o for o in objs if "ranks" in o]
    assert len(folded) == per_rank_records(err)
    ends = [o for o in folded if o["event"] == "allreduce end" and o["fields"]["step"] == 0]
    assert ends[0]["ranks"] == [[0, 15]] and ends[0]["count"] == RANKS
    assert type(ends[0]["fields"]["checksum"]) is str
    assert set(ends[0]["fields"]["wait_us"]) == {"min", "max", "max_rank"}
    apart = [o for o in folded if "apart" in o]
    assert apart and all(o["ranks"] == [[0, 1], [3, 15]] for o in apart)
    assert {a["value"] for o in apart for a in o["apart"]} == {"nan", "norm"}
    whole = [o for o in objs if "mark" in o]
    assert whole and all(o["rank"] == NAN_RANK and o["mark"].startswith("differs: ") for o in whole)


def _run(tmp: Path, files: dict[int, list[tuple[int, str]]], world: int = 4) -> Path:
    run = tmp / "run"
    run.mkdir()
    for rank, records in files.items():
        (run / f"rank-{rank}.log").write_text(ours(rank, records, world=world))
    return run


LOCAL = ["0a1b2c3d4e5f6a7b", "1b2c3d4e5f6a7b8c", '"9541839135662427"', "3d4e5f6a7b8c9d0e"]  # a writer quotes digits


def _step(rank: int, step: int, wait: int, checksum: str = "da416017a6f32a5e") -> list[tuple[int, str]]:
    t = T0 + 1_000_000 * step + 100 * rank
    return [
        (t, f"I allreduce begin step={step} bucket=0 checksum={LOCAL[rank]} norm={1 + rank / 10 + step / 100}"),
        (t + 50, f"I allreduce end step={step} bucket=0 checksum={checksum} wait_us={wait}"),
    ]


def test_values_agree_spread_or_set_a_minority_apart(tmp_path, cli):
    """Four ranks, three steps: agreeing values print once, numbers that differ as their spread (durations
    with the rank that waited longest; local checksums, one of them quoted, counted), and rank 3's other checksum at step 1 sets it apart."""
    files = {
        r: [
            rec
            for s in range(3)
            for rec in _step(r, s, 1000 * (r + 1), "77c0a1b2c3d4e5f6" if (r, s) == (3, 1) else "da416017a6f32a5e")
        ]
        for r in range(4)
    }
    code, out, err = cli("merge", "--collapse", _run(tmp_path, files))
    assert code == 0, err
    lines = [line.split("] ", 1)[1] for line in out.splitlines() if line[:1] == "I" and "distvlog-meta" not in line]
    assert lines[0] == "[ranks 0-3] allreduce begin step=0 bucket=0 checksum=<4 values> norm=1..1.3"
    assert lines[1] == "[ranks 0-3] allreduce end step=0 bucket=0 checksum=da416017a6f32a5e wait_us=1000..4000 max@3"
    assert lines[3] == (
        "[ranks 0-2: checksum=da416017…; rank 3: checksum=77c0a1b2…] allreduce end step=1 bucket=0 "
        "checksum=da416017a6f32a5e wait_us=1000..3000 max@2"
    )
    assert (
        lines[4]
        == "[rank 3 differs: checksum=77c0a1b2…] allreduce end step=1 bucket=0 checksum=77c0a1b2c3d4e5f6 wait_us=4000"
    )
    assert len(lines) == 7


def test_infinities_of_either_sign_fold_as_numbers(tmp_path, cli):
    """A rank whose norm is -inf (an exploded gradient) is set apart like a NaN or +inf one, never a crash."""
    t = T0 + 1_000_000
    norms = ["1.5", "-inf", "1.5", "inf"]
    files = {r: [(t + 100 * r, f"I grad_stats step=3 node=mul norm={norm}")] for r, norm in enumerate(norms)}
    code, out, err = cli("merge", "--collapse", _run(tmp_path, files))
    assert code == 0, err
    lines = [line.split("] ", 1)[1] for line in out.splitlines() if line[:1] == "I" and "distvlog-meta" not in line]
    assert lines[0].startswith("[ranks 0,2: norm=1.5; rank 1: norm=-inf; rank 3: norm=inf]"), lines
    assert any(line.startswith("[rank 1 differs: norm=-inf]") for line in lines), lines


def test_a_record_only_some_ranks_wrote_stays_whole_and_a_missing_one_is_named(tmp_path, cli):
    """Rank 1 logs one allreduce more at step 1 (`[rank 1 only]`, and the steps after still fold: a record's
    place is counted within its step); rank 2 logs no allreduce end at step 2 (the others' line names it)."""
    files = {r: [rec for s in range(4) for rec in _step(r, s, 10)] for r in range(4)}
    files[1].insert(4, (T0 + 1_000_300, "I allreduce begin step=1 bucket=0 norm=9.5"))
    files[2] = [rec for rec in files[2] if "end step=2" not in rec[1]]
    code, out, err = cli("merge", "--collapse", _run(tmp_path, files))
    assert code == 0, err
    tags = FOLDED.findall(out)
    assert tags.count("rank 1 only") == 1
    assert "ranks 0,1,3; none from rank 2" in tags
    assert tags.count("ranks 0-3") == 1 + 8 - 1  # the meta records, then every other record


def test_a_record_that_never_finds_its_peers_is_released_after_the_window():
    """Memory stays bounded: a record only rank 0 wrote is released once the window has passed, long before
    the stream ends, and the records after it keep folding."""
    collapse = Collapser(range(4), window_per_rank=8)
    released = collapse.add(b"I1130 02:11:14.000000 1 t.py:1] [rank 0] lonely\n", T0, 0)
    for i in range(40):
        for rank in range(4):
            ts = T0 + 1000 * i + rank
            released += collapse.add(f"I1130 02:11:14.{i:06d} 1 t.py:2] [rank {rank}] tick {i}\n".encode(), ts, rank)
    assert released[0].whole[0][1] == "only" and released[0].ranks == []
    assert len(released) > 20 and all(f.ranks == [0, 1, 2, 3] for f in released[1:])
    assert len(released) + len(collapse.flush()) == 41


def test_a_nul_in_a_body_never_passes_for_a_value_its_peer_has():
    """`x=\\0 y` has one value fewer than `x=1 y`: the two are two records, each whole, never one folded line
    with a value left out (bodies' texts are joined with NUL in the group key)."""
    collapse = Collapser(range(2))
    records = [
        b"I1130 02:11:14.000001 1 x.py:1] [rank 0] x=1 y\n",
        b"I1130 02:11:14.000002 1 x.py:1] [rank 1] x=\0 y\n",
    ]
    groups = collapse.add(records[0], T0, 0) + collapse.add(records[1], T0 + 1, 1) + collapse.flush()
    assert [(f.ranks, [m.text for m, _ in f.whole]) for f in groups] == [([], [records[0]]), ([], [records[1]])]


FOREIGN = """\
Log file created at: 2026/11/30 02:11:14
Running on machine: gpu-node-{node:03d}
Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg
I1130 02:11:14.{us:06d} 4242 trainer.cc:88] [Rank {rank}] Iteration 500, loss = {loss}, lr = 0.001
I1130 02:11:14.{us2:06d} 4242 ProcessGroupNCCL.cpp:1543] [Rank {rank}] NCCL comm 0x7f{rank}a2b000 rank {rank} nranks 4 ready
W1130 02:11:15.{us:06d} 4242 trainer.cc:120] [Rank {rank}] step took {ms} ms
"""


def test_other_programs_glog_folds_on_the_numbers_in_its_messages(tmp_path, cli):
    """C++ glog lines from four ranks (rank from NCCL's `[Rank N]`): the numbers in the message fold into a
    spread, addresses are elided, and rank 3's other `nranks` sets it apart."""
    for rank in range(4):
        text = FOREIGN.format(
            node=rank // 2, rank=rank, us=10 + rank, us2=20 + rank, loss=2.3 + rank / 10, ms=100 + rank
        )
        if rank == 3:
            text = text.replace("nranks 4", "nranks 8")
        (tmp_path / f"worker{rank}.log").write_text(text)
    code, out, err = cli("merge", "--collapse", *sorted(tmp_path.glob("worker*.log")))
    assert code == 0, err
    lines = [line.split("] ", 1)[1] for line in out.splitlines() if line[:1] in "IW"]
    assert lines[0] == "[ranks 0-3] [Rank 0..3] Iteration 500, loss = 2.3..2.6, lr = 0.001"
    assert lines[1].startswith("[ranks 0-2: 4; rank 3: 8] [Rank 0..2] NCCL comm 0x… rank 0..2 nranks 4 ready")
    assert lines[2] == "[rank 3 differs: 8] [Rank 3] NCCL comm 0x7f3a2b000 rank 3 nranks 8 ready"
    assert lines[3] == "[ranks 0-3] [Rank 0..3] step took 100..103 ms"


def test_json_lines_input_folds_too(jsonl_run, cli):
    """Our JSON-lines files: the same folding (2 ranks: the tags r0/r1 in each message are a spread)."""
    code, out, err = cli("merge", "--collapse", jsonl_run)
    assert code == 0, err
    tags = FOLDED.findall(out)
    assert set(tags) == {"ranks 0,1"}
    assert "] [ranks 0,1] plain r0..1t" in out


def test_follow_folds_a_running_job_live(tmp_path):
    """`merge --follow --collapse` on four real rank processes writing while it runs: each tick (one record per
    rank, every fifth spanning three lines) comes out once, folded over the four ranks, and it ends by itself."""
    from test_merge_follow import WORLD, finish, start_follow, start_rank

    # (a long delay: a group waits for its ranks that long at most, and ranks started on a loaded machine can
    # be seconds apart; the follow still ends as soon as every rank has)
    follow = start_follow(tmp_path, "logs/live", "--collapse", "--delay", "30", "-o", "out.log")
    ranks = [start_rank(tmp_path, r, 12, 0.05) for r in range(WORLD)]
    for rank in ranks:
        assert rank.wait(timeout=180) == 0
    code, err = finish(follow)
    out = (tmp_path / "out.log").read_text()
    assert code == 0, err
    ticks = [line for line in out.splitlines() if "] tick " in line]
    assert [t.split("] ", 1)[1] for t in ticks] == [
        f"[ranks 0-3] tick {i} i={i}" + (" +lines=2" if i % 5 == 4 else "") for i in range(12)
    ]
    assert "second line of 4" in out
    assert "collapsed into " in err
