"""NCCL's debug files (`NCCL_DEBUG_FILE=%h.%p`): each read as the rank its largest communicator's init line
says, every line one record on one timeline, alone or beside other evidence; `--rank-of` where no init line
says the rank. The files are data/nccl_debug (NCCL 2.18.3's formats, written by hand: no GPU here)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

DATA = Path(__file__).parent / "data"
BASE = 1_796_000_000  # the files' last change (epoch s): their untimed lines are placed there


def _job(into: Path) -> Path:
    """The fixture's four files, rank r's last changed at BASE + r s."""
    shutil.copytree(DATA / "nccl_debug", into)
    for r, path in enumerate(sorted(into.glob("gpu-node-1.*"))):
        os.utime(path, (BASE + r, BASE + r))
    return into


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def _records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_each_file_is_the_rank_of_its_default_group(tmp_path, cli):
    """Ranks 1 and 3 initialise their pair's 2-rank communicator first (rank 1 there): the 4-rank one's
    rank is theirs. Every non-empty line is one record, in file order, at the file's last change."""
    job = _job(tmp_path / "job")
    code, out, err = cli("merge", "--format", "jsonl", job)
    assert code == 0 and "4 files" in err and "0 lines skipped" in err, err
    records = _records(out)
    for r, path in enumerate(sorted(job.glob("gpu-node-1.*"))):
        mine = [rec for rec in records if rec["rank"] == r]
        assert [rec["event"] for rec in mine] == _lines(path)
        assert {rec["ts"] for rec in mine} == {(BASE + r) * 1_000_000}
    warnings = [rec for rec in records if rec["severity"] != "I"]
    assert [(w["rank"], w["severity"], w["file"], w["line"], w["tid"]) for w in warnings] == [
        (2, "E", "socket.cc", 484, 31182),
        (2, "E", "proxy.cc", 1517, 31182),
    ]


def test_beside_a_torchrun_log_dir_one_timeline(tmp_path, cli):
    """The NCCL files and a torchrun --log-dir of rank 3 (data/nccl_job) in one directory: every line of
    both in one record, rank 3's from both files."""
    job = _job(tmp_path / "job" / "nccl")
    shutil.copytree(DATA / "nccl_job", tmp_path / "job" / "torchrun")
    code, out, err = cli("merge", "--format", "jsonl", tmp_path / "job")
    assert code == 0 and "5 files" in err and "0 lines skipped" in err, err
    records = _records(out)
    worker = tmp_path / "job" / "torchrun" / "attempt_0" / "3" / "stderr.log"
    inputs = sum(len(_lines(p)) for p in [*job.glob("gpu-node-1.*"), worker])
    assert sum(rec["event"].count("\n") + 1 for rec in records) == inputs
    assert {rec["file"] for rec in records if rec["rank"] == 3} >= {"gpu-node-1.31004", "stderr.log"}
    assert [rec["ts"] for rec in records] == sorted(rec["ts"] for rec in records)


def test_diff_names_the_warnings(tmp_path, cli):
    code, out, _ = cli("diff", _job(tmp_path / "job"))
    assert code == 1 and "error: rank 2: gpu-node-1:31003:31182 [2] misc/socket.cc:484 NCCL WARN" in out


def test_without_an_init_line_rank_of_says_the_rank(tmp_path, cli):
    path = tmp_path / "host.4242"
    kept = [
        line for line in (DATA / "nccl_debug" / "gpu-node-1.31003").read_text().splitlines() if " comm 0x" not in line
    ]
    path.write_text("\n".join(kept) + "\n")
    code, _, err = cli("merge", path)
    assert code == 2 and err.strip() == (
        f"distvlog merge: error: {path}: cannot tell which rank wrote it (it and its place say none); "
        f"pass --rank-of {path}=R"
    )
    code, out, err = cli("merge", "--format", "jsonl", "--rank-of", f"{path}=2", path)
    assert code == 0 and {rec["rank"] for rec in _records(out)} == {2}, err


def test_newer_forms_timed_warnings(tmp_path, cli):
    """NCCL 2.23's `ncclCommInitRankConfig comm ...` init line; 2.26's default time on warnings, `[%F %T] `
    in local time, which the untimed lines after it take, and those before it too."""
    path = tmp_path / "node-b.977"
    path.write_text(
        "node-b:977:977 [1] NCCL INFO cudaDriverVersion 12080\n"
        "node-b:977:1040 [1] NCCL INFO ncclCommInitRankConfig comm 0x5612a0 rank 5 nranks 8 cudaDev 1 nvmlDev 1 "
        "busId 2a000 commId 0x9f1e - Init START\n"
        "\n"
        "[2025-03-04 10:11:12] node-b:977:1047 [1] transport/net_ib.cc:1022 (ncclIbTest) NCCL WARN NET/IB : "
        "Got completion from peer 10.0.0.2<37021> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
        "node-b:977:1047 [1] NCCL INFO transport/net.cc:1309 -> 6\n"
    )
    code, out, err = cli("merge", "--format", "jsonl", path)
    records = _records(out)
    stamp = int(time.mktime((2025, 3, 4, 10, 11, 12, 0, 0, -1))) * 1_000_000
    assert code == 0 and [rec["ts"] for rec in records] == [stamp] * 4, err
    assert {rec["rank"] for rec in records} == {5}
    assert records[2]["event"].startswith("node-b:977:1047 [1] transport/net_ib.cc:1022 (ncclIbTest) NCCL WARN")
    assert (records[2]["severity"], records[2]["file"], records[2]["line"]) == ("E", "net_ib.cc", 1022)
