"""torchrun --log-dir, Flight Recorder dumps and our rank files in one directory: one timeline; Paddle's
log/ directory read without --rank-of."""

from __future__ import annotations

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
