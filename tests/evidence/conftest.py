"""One real torchrun job (4 gloo ranks on CPU, torch's Flight Recorder on) for the whole session: every
planted fault's dumps, the torchrun --log-dir it wrote and our own rank files (see fr_jobs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
FAULTS = ("healthy", "skip", "late", "extra", "order")


@pytest.fixture(scope="session")
def job(tmp_path_factory) -> Path:
    """The job's directory: fr/<fault>/nccl_trace_rank_R (pickle), fr/<fault>-json/ (JSON), tr/ (torchrun's
    --log-dir), dv/ (our log root), console.txt."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("frjob")
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "64", "DISTVLOG_LOG_DIR": str(root / "dv"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--log-dir", str(root / "tr")]
    command += ["--redirects", "3", str(HERE / "fr_jobs.py"), str(root / "fr"), *FAULTS]
    with open(root / "console.txt", "wb") as console:
        subprocess.run(command, env=env, cwd=root, stdout=console, stderr=subprocess.STDOUT, timeout=300)
    for fault in FAULTS:
        assert len(list((root / "fr" / fault).glob("nccl_trace_rank_*"))) == 4, (root / "console.txt").read_text()
    return root
