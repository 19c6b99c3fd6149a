"""`merge --follow` on a directory of other programs' evidence while a real process writes it: torchrun's
worker output and a Paddle workerlog followed as they grow, Flight Recorder dumps (written once) read once
into the same live timeline; every line once, as `merge` reads the files afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Appends to its files in two parts (the second after the test creates `go`), a traceback written across
# two writes: lines of a worker's stdout/stderr and of Paddle's glog, flushed as they are written.
WRITER = r"""
import os, sys, time
from pathlib import Path
d = Path(sys.argv[1])
out, err, paddle = (open(d / p, "a") for p in ("tr/run_0/attempt_0/1/stdout.log", "tr/run_0/attempt_0/1/stderr.log", "log/workerlog.2"))
def put(f, text):
    f.write(text); f.flush()
put(out, "step 0 loss 2.31\nstep 1 loss 2.17\n")
put(paddle, "I1205 11:24:20.100000 4242 engine.cc:31] paddle starts\n")
put(err, "W1205 11:24:21.000000 20010 run.py:874] first part done\n")
while not (d / "go").exists():
    time.sleep(0.05)
put(out, "step 2 loss 2.02\n")
put(err, "Traceback (most recent call last):\n  File \"/job/train.py\", line 9, in <module>\n")
put(paddle, "E1205 11:24:22.300000 4242 engine.cc:77] paddle stops\n")
put(err, "    loss.backward()\nRuntimeError: boom\n")
"""


def test_follow_reads_growing_text_and_dumps_once(job, tmp_path):
    d = tmp_path / "job"
    (d / "tr" / "run_0" / "attempt_0" / "1").mkdir(parents=True)
    (d / "log").mkdir()
    shutil.copytree(job / "fr" / "skip", d / "dumps")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distvlog",
            "merge",
            "--follow",
            str(d),
            "--format",
            "jsonl",
            "--idle",
            "3",
            "--delay",
            "0.2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(d)], env=env)
    live = []
    for line in follow.stdout:  # the first part, printed while the writer still runs
        live.append(json.loads(line))
        if sum(r["event"] in ("step 1 loss 2.17", "paddle starts", "first part done") for r in live) == 3:
            break
    assert writer.poll() is None
    (d / "go").touch()
    live += [json.loads(line) for line in follow.stdout]
    err = follow.stderr.read()
    assert follow.wait() == 0 and writer.wait() == 0, err
    assert "no rank wrote for 3 s" in err, err

    after = subprocess.run(
        [sys.executable, "-m", "distvlog", "merge", "--format", "jsonl", str(d)],
        env=env,
        capture_output=True,
        text=True,
    )
    read = [json.loads(line) for line in after.stdout.splitlines()]

    def per_file(records: list[dict]) -> dict:
        """Each file's events in order (a dump's records by their event, the others by their file)."""
        out: dict = {}
        for r in records:
            out.setdefault((r["rank"], "dump" if r["event"].startswith("fr ") else r["file"]), []).append(r["event"])
        return out

    assert per_file(live) == per_file(read)
    (traceback,) = [r for r in live if r["event"].startswith("Traceback")]
    assert traceback["rank"] == 1 and traceback["severity"] == "E" and traceback["event"].endswith("RuntimeError: boom")
    assert {r["rank"] for r in live if r["event"] == "fr dump"} == {0, 1, 2, 3}
    assert [r["event"] for r in live if r["rank"] == 2 and r["file"] == "engine.cc"] == [
        "paddle starts",
        "paddle stops",
    ]
