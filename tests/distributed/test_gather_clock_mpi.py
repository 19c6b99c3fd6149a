"""finalize(gather=True) and the ping-pong clock offsets, on real MPI ranks."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from distvlog.distributed.gather import CHUNK_BYTES
from distvlog.format import END_RECORD

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n", [2, 4])
def test_gather_brings_node_local_files_to_rank_0(run_mpi, rank_results, n):
    proc = run_mpi(n, "gather", "local", "15000")
    assert proc.returncode == 0, proc.stderr
    got = rank_results(proc)
    run_dir = Path(got[0]["path"]).parent
    for rank in range(1, n):
        original = Path(got[rank]["path"])
        assert original.parent != run_dir and original.parent.name == run_dir.name  # own root, same run id
        assert original.stat().st_size > CHUNK_BYTES  # so the file travelled in several chunks
        copy, kept = (run_dir / original.name).read_bytes(), original.read_bytes()
        assert kept.startswith(copy)  # (gathered at finalize; the end record followed at exit)
        assert kept[len(copy) :].count(b"\n") == 1 and kept.endswith(f"] [rank {rank}] {END_RECORD}\n".encode())
    assert f"gather: copied {n - 1} files" in (run_dir / "rank-0.log").read_text()


def test_gather_on_a_shared_filesystem_copies_nothing(run_mpi, rank_results):
    proc = run_mpi(2, "gather", "shared", "10")
    got = rank_results(proc)
    run_dir = Path(got[0]["path"]).parent
    assert Path(got[1]["path"]).parent == run_dir
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank-0.log", "rank-1.log"]
    assert "gather: copied 0 files" in (run_dir / "rank-0.log").read_text()


def test_ping_pong_measures_a_simulated_skew(run_mpi, rank_results):
    skew = 50_000
    got = rank_results(run_mpi(4, "clock", "12", env={"DISTVLOG_SIMULATE_CLOCK_SKEW_US": str(skew)}))
    assert got[0] == {"offset": 0.0, "uncertainty": 0.0}
    for rank in (1, 2, 3):
        offset, uncertainty = got[rank]["offset"], got[rank]["uncertainty"]
        # same machine, so the true offset is exactly -rank * skew; the estimate is within its uncertainty
        assert abs(offset + rank * skew) <= uncertainty + 1, got[rank]
        assert uncertainty < 5_000, got[rank]


def _allreduce_windows(jsonl: str) -> dict[tuple, tuple[int, int]]:
    """(step, bucket) -> (latest 'allreduce begin' of any rank, earliest 'allreduce end' of any rank)."""
    begins, ends = defaultdict(list), defaultdict(list)
    for line in jsonl.splitlines():
        record = json.loads(line)
        if record.get("event") in ("allreduce begin", "allreduce end"):
            side = begins if record["event"] == "allreduce begin" else ends
            side[(record["step"], record["bucket"])].append(record["ts"])
    assert begins and begins.keys() == ends.keys()
    assert all(len(ts) == 4 for ts in [*begins.values(), *ends.values()])
    return {key: (max(begins[key]), min(ends[key])) for key in begins}


def test_merged_timeline_is_causal_only_with_clock_correction(run_cli):
    skew = 50_000
    proc = run_cli(
        "launch",
        "-n",
        "4",
        str(REPO / "launch" / "train.py"),
        "--steps",
        "4",
        env={"DISTVLOG_SIMULATE_CLOCK_SKEW_US": str(skew)},
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = re.search(r"distvlog launch: logs: (\S+)/ \(", proc.stderr).group(1)
    merged = {}
    for flags in ([], ["--no-clock-correction"]):
        out = run_cli("merge", run_dir, "--format", "jsonl", *flags)
        assert out.returncode == 0, out.stderr
        merged[bool(flags)] = _allreduce_windows(out.stdout)
    for last_begin, first_end in merged[False].values():
        assert last_begin <= first_end + 2_000  # every rank began before any rank finished
    assert all(last_begin > first_end + 2_000 for last_begin, first_end in merged[True].values())
