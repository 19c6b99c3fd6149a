"""The README's path: a torchrun job hangs (rank 1 stalls past the collective timeout), its ranks dump their
Flight Recorders (rank 0 on its timeout's exception, rank 1 on torchrun's SIGTERM), and `distvlog diff`
names rank 1 and the line the others wait at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCH = Path(__file__).parents[2] / "launch"


def test_a_hang_diagnosed_from_dumps(tmp_path, cli):
    pytest.importorskip("torch")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(LAUNCH / "train_torch.py")]
    command += ["--steps", "3", "--inject-slow-rank", "1", "--inject-slow-ms", "60000", "--timeout-s", "4"]
    command += ["--fr-dump", "dumps", "--data", "synthetic"]
    env = {**os.environ, "DISTVLOG_LOG_DIR": str(tmp_path / "logs")}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    code, out, _ = cli("diff", tmp_path / "dumps")
    assert code == 1
    assert out.splitlines()[1].startswith("rank 1 is one collective short in group 0: never issued all_reduce #")
    source = (LAUNCH / "train_torch.py").read_text().splitlines()
    backward = next(i for i, line in enumerate(source, 1) if line.strip() == "loss.backward()")
    assert out.splitlines()[1].endswith(f"which rank 0 issued at train_torch.py:{backward} and wait in")
    code, out, _ = cli("merge", tmp_path / "dumps", tmp_path / "logs" / "latest")
    assert code == 0 and "[rank 1] fr enqueued op=broadcast" in out and "[rank 0] fr enqueued op=all_reduce" in out
    assert "[rank 1] distvlog-meta" in out  # our rank files in the same timeline
