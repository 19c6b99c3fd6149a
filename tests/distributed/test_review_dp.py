"""DataParallel fixes after review, on real MPI ranks: dv.finalize() in debug mode names a rank that skipped or
added a backward pass instead of hanging; finalize flushes before it waits; a parameter no rank used keeps
`.grad` None; constructor arguments and boolean environment variables are checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import distvlog as dv
from distvlog.launch.command import find_launcher, launcher_kind, mpi_command

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).with_name("review_dp_jobs.py")


@pytest.fixture
def run_job(tmp_path: Path):
    """run_job(n, mode, *args, env={}) runs review_dp_jobs.py MODE on n ranks (as conftest's run_mpi does
    mpi_jobs.py); rank_results reads what they said."""
    launcher = find_launcher(None)
    kind = launcher_kind(launcher)

    def run(n: int, mode: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        cmd = mpi_command(launcher, kind, n, {}, None) + [sys.executable, str(JOBS), mode, *args]
        full = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
        full.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"), **(env or {}))
        return subprocess.run(cmd, env=full, cwd=tmp_path, capture_output=True, text=True, timeout=240)

    return run


# -- 1: dv.finalize() joins debug mode's checks ----------------------------------------------------------------
@pytest.mark.parametrize(
    "kind,overlap,where",
    [
        ("skip", "sync", "at allreduce of bucket 0 of step 2 of DataParallel 0 on rank 0, at dv.finalize() on rank 1"),
        (
            "skip",
            "overlap",
            "at allreduce of bucket 0 of step 2 of DataParallel 0 on rank 0, at dv.finalize() on rank 1",
        ),
        ("extra", "sync", "at dv.finalize() on rank 0, at allreduce of bucket 0 of step 3 of DataParallel 0 on rank 1"),
        (
            "second",
            "sync",
            "at allreduce of bucket 0 of step 2 of DataParallel 1 on rank 0, at dv.finalize() on rank 1",
        ),
        ("debug1", "sync", "at the initial broadcast in debug mode on rank 0, at the initial broadcast on rank 1"),
    ],
)
def test_a_rank_elsewhere_than_finalize_is_an_error_on_every_rank(run_job, rank_results, kind, overlap, where):
    got = rank_results(run_job(2, "finalize", kind, overlap))
    assert sorted(got) == [0, 1]
    for r in got.values():
        assert r["error"].startswith("DataParallel check before ") and r["error"].endswith(where), r["error"]


def test_finalize_in_debug_mode_passes_when_every_rank_is_there(run_job, rank_results):
    got = rank_results(run_job(2, "finalize", "none", "overlap"))
    assert got == {0: {"error": None}, 1: {"error": None}}


# -- 2: finalize flushes before it waits ----------------------------------------------------------------------
def test_a_rank_killed_while_waiting_in_finalize_keeps_its_last_record(run_job, tmp_path):
    proc = run_job(2, "killed_in_finalize", env={"DISTVLOG_FLUSH_INTERVAL": "1000"})  # no timer flush
    assert proc.returncode != 0  # rank 0 was SIGKILLed
    said = json.loads((tmp_path / "results" / "rank-0.json").read_text())
    assert "rank 0's last record before finalize" in Path(said["path"]).read_text(), proc.stderr


# -- 3: unused parameters ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overlap,bucket_bytes", [("sync", "100000"), ("overlap", "16"), ("overlap", "100000")])
def test_unused_parameters_match_a_single_process_reference(run_job, rank_results, overlap, bucket_bytes):
    got = rank_results(run_job(2, "unused", overlap, bucket_bytes))
    assert sorted(got) == [0, 1]
    for r in got.values():
        assert r["params"] == r["reference"]  # bit for bit
        assert r["has_grad"] == [[True, True, True, False]] * 3  # p2: rank 0 used it; p3: no rank did
        assert r["unused_moved"] == 0.0  # Adam's weight decay never saw p3


# -- 4: constructor arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"check_every": 0}, "check_every must be an integer >= 1 (steps between parameter hash checks), got 0"),
        ({"check_every": 2.5}, "check_every must be an integer >= 1 (steps between parameter hash checks), got 2.5"),
        ({"comm_buffer_size": 0}, "comm_buffer_size must be a positive number of MB, got 0"),
        ({"comm_buffer_size": float("inf")}, "comm_buffer_size must be a positive number of MB, got inf"),
        ({"comm_buffer_size": "25"}, "comm_buffer_size must be a positive number of MB, got '25'"),
    ],
)
def test_bad_constructor_arguments_are_named_before_any_communication(kwargs, message):
    with pytest.raises(ValueError) as info:
        dv.DataParallel(dv.nn.Linear(2, 2), debug=True, **kwargs)
    assert str(info.value) == f"DataParallel: {message}"


# -- 5: boolean environment variables -------------------------------------------------------------------------
def test_boolean_variables_mean_what_they_say(run_job, rank_results):
    values = ["1", "TRUE", "yes", "On", "0", "False", "no", "OFF", "maybe"]
    proc = run_job(1, "flags", *values)
    got = rank_results(proc)[0]
    expected = [True] * 4 + [False] * 5
    assert got == {"debug": expected, "echo": expected}
    for name in ("DISTVLOG_DP_DEBUG", "DISTVLOG_ALSOLOGTOSTDERR"):
        assert (
            f"distvlog: ignoring {name}='maybe': not one of 1/true/yes/on or 0/false/no/off (using False)\n"
            in proc.stderr
        )
