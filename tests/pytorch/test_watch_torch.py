"""`distvlog watch` on DDP jobs under torchrun (gloo on CPU, distvlog.torch): a rank that skips a step's
allreduces and a NaN on one rank get diff's verdicts while the job runs; --stop-on-error ends the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the PyTorch adapter's tests need torch (CI installs torch==2.13.0)")

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed"))
from launch_testkit import finish, live_run_dir  # noqa: E402

from distvlog.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).with_name("watch_torch_jobs.py")


def _env(logs: Path) -> dict[str, str]:
    drop = ("DISTVLOG_", "GLOG_", "OMPI_", "PMI_", "PMIX_", "MASTER_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in ("RANK", "WORLD_SIZE")}
    return {**env, "PYTHONPATH": str(ROOT), "DISTVLOG_LOG_DIR": str(logs), "OMP_NUM_THREADS": "1"}


def _start(logs: Path, *cmd: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *cmd],
        env=_env(logs),
        cwd=logs.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def watched(tmp_path: Path, mode: str, ranks: int) -> tuple[Path, list[dict]]:
    """torchrun MODE on `ranks` ranks, watched with --stop-on-error: (run dir, the verdicts); diff's JSON
    report is on the captured stdout."""
    logs = tmp_path / "logs"
    job = _start(logs, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), str(JOBS), mode)
    run_dir = live_run_dir(logs, ranks)
    code, out, err = finish(_start(logs, "-m", "distvlog", "watch", "--json", "--stop-on-error", str(run_dir)))
    finish(job)
    assert code == 1, out + err
    assert main(["diff", "--json", str(run_dir)]) == 1
    return run_dir, [json.loads(line) for line in out.splitlines()]


def _first_error(found: list[dict]) -> dict:
    return next(v for v in found if v["error"])


def test_a_rank_that_skips_an_allreduce_under_torchrun(tmp_path, capsys):
    """Rank 1 of 3 runs step 3's backward under no_sync(): distvlog.torch counts it into the next optimizer
    step, so its step 3 runs two backward passes where the others ran one; watch says so live, with diff's
    culprit, and stops the job."""
    run_dir, found = watched(tmp_path, "skip", 3)
    first = _first_error(found)
    assert (first["kind"], first["ranks"], first["step"], first["live"]) == ("desync", [1], 3, True), found
    assert first["repeats"] == 2
    diffs = json.loads(capsys.readouterr().out)["errors"][0]
    assert (diffs["kind"], diffs["ranks"], diffs["step"]) == ("desync", [1], 3)


def test_a_nan_on_one_rank_under_torchrun(tmp_path, capsys):
    """Rank 1's loss is NaN at step 3: watch names its origin (node, forward line) as diff does."""
    run_dir, found = watched(tmp_path, "nan", 2)
    first = _first_error(found)
    origin = json.loads(capsys.readouterr().out)["errors"][0]
    assert (first["kind"], first["rank"], first["step"], first["how"]) == ("nan_origin", 1, 3, "origin"), found
    assert (first["node"], first["site"]) == (origin["node"], origin["site"])
    assert first["site"].startswith("watch_torch_jobs.py:")
