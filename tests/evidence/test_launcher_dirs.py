"""torchrun --log-dir, Flight Recorder dumps and our rank files in one directory: one timeline; Paddle's
log/ directory read without --rank-of."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from distvlog.tools.read import open_sources, read_records

DATA = Path(__file__).parents[1] / "tools" / "data"


def _mixed(job: Path, into: Path) -> Path:
    """Our rank files, the torchrun log dir and the skip fault's dumps, side by side (times kept)."""
    for path in (job / "dv" / "latest").iterdir():
        shutil.copy2(path, into)
    shutil.copytree(job / "tr", into / "torchrun")
    shutil.copytree(job / "fr" / "skip", into / "dumps")
    return into


def test_one_timeline_of_every_input_line(job, tmp_path, cli):
    mixed = _mixed(job, tmp_path)
    code, out, err = cli("merge", "--format", "jsonl", mixed)
    assert code == 0 and "0 lines skipped" in err, err
    sources = open_sources([str(mixed)])
    assert len(sources) == 4 + 4 + 4 + 4 + 1  # rank files, dumps, stdout.log, stderr.log, one error.json
    by_kind = {}
    for rec in read_records(sources):
        by_kind.setdefault(rec.path.name if rec.path.name.endswith((".log", ".json")) else "dump", set()).add(rec.rank)
    assert by_kind["stdout.log"] == by_kind["dump"] == {0, 1, 2, 3} and by_kind["error.json"] == {1}
    worker_lines = sum(
        len([line for line in p.read_text().splitlines() if line.strip()])
        for p in (mixed / "torchrun").rglob("std*.log")
    )
    tracebacks = sum("Traceback" in p.read_text() for p in (mixed / "torchrun").rglob("stderr.log"))
    records = [r for r in read_records(open_sources([str(mixed)])) if r.file in ("stdout.log", "stderr.log")]
    assert sum(r.event.count("\n") + 1 for r in records) == worker_lines  # each line in one record
    assert tracebacks == sum(1 for r in records if r.severity == "E") == 1


def test_diff_on_the_mixed_directory_puts_the_dumps_verdict_first(job, tmp_path, cli):
    code, out, _ = cli("diff", _mixed(job, tmp_path))
    lines = out.splitlines()
    assert code == 1 and lines[1].startswith("rank 2 is one collective short in group 0")
    assert "error: rank 1: RuntimeError: rank 1 gives up: a collective timed out" in out


def test_paddle_log_directory_needs_no_rank_of(tmp_path, cli):
    """Paddle's launcher writes log/workerlog.N (N: the local rank, the global one on one node) beside its
    own log; the workerlogs here are the real Paddle glog output of tests/tools/data/paddle_seed.txt."""
    log = tmp_path / "log"
    log.mkdir()
    for n in range(2):
        shutil.copy(DATA / "paddle_seed.txt", log / f"workerlog.{n}")
    (log / "endpoints.log").write_text("PADDLE_TRAINER_ENDPOINTS: 127.0.0.1:6070,127.0.0.1:6071\n")
    code, out, err = cli("merge", log)
    assert code == 0, err
    assert "[rank 0] multiply1GradNode" in out and "[rank 1] multiply1GradNode" in out
    assert "2 files" in err


def test_profiler_traces_by_the_rank_they_name(job, cli):
    """Kineto traces (torch 2.13's export_chrome_trace) named by pid: the rank comes from distributedInfo."""
    code, out, err = cli("merge", "--format", "jsonl", job / "fr" / "kineto")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {r["rank"] for r in records} == {0, 1, 2, 3}
    ops = [r["op"] for r in records if r["rank"] == 1 and r["event"] == "kineto collective"]
    assert ops.count("c10d::allreduce_") == 3 and "c10d::broadcast_" in ops and "gloo:all_reduce" in ops
    heads = [r for r in records if r["event"] == "kineto trace"]
    assert len(heads) == 4 and all(r["info"]["world_size"] == 4 for r in heads)


def test_worker_output_with_c10d_lines(tmp_path, cli):
    """c10's `[rank3]:[E1205 ...]` lines keep their time (seconds: the nine digits are a monotonic clock);
    NCCL's untimed lines and prints take the time of the timed line before them, or the first one's."""
    shutil.copytree(Path(__file__).parent / "data" / "nccl_job", tmp_path / "job")
    code, out, err = cli("merge", "--format", "jsonl", tmp_path / "job")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {r["rank"] for r in records} == {3}, err
    watchdog = [r for r in records if r["file"] == "ProcessGroupNCCL.cpp"]
    assert [r["line"] for r in watchdog] == [616, 1785] and watchdog[0]["severity"] == "E"
    assert "WorkNCCL(SeqNum=412" in watchdog[0]["event"]
    assert [r["ts"] for r in records] == sorted(r["ts"] for r in records)
    assert records[0]["event"] == "step 411 done" and records[0]["ts"] == watchdog[0]["ts"]
    (traceback,) = [r for r in records if r["event"].startswith("Traceback")]
    assert traceback["severity"] == "E" and traceback["event"].count("\n") == 3
    assert records[-1]["file"] == "run.py" and records[-1]["tid"] == 20010


def test_report_on_a_mixed_directory(job, tmp_path, cli):
    (tmp_path / "in").mkdir()
    code, _, err = cli("report", _mixed(job, tmp_path / "in"), "-o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert code == 0 and "rank 2 is one collective short in group 0" in html, err
