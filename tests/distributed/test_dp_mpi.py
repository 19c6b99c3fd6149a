"""DataParallel on real MPI ranks: identical replicas, debug checks that fail loudly instead of hanging
(dv.finalize() among them), unused parameters, constructor arguments and boolean settings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import distvlog as dv

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("n,overlap,bucket_bytes", [(2, "sync", "64"), (4, "overlap", "256"), (4, "sync", "100000")])
def test_replicas_stay_bit_identical(run_mpi, rank_results, n, overlap, bucket_bytes):
    proc = run_mpi(n, "identical", overlap, bucket_bytes)
    assert proc.returncode == 0, proc.stderr
    got = rank_results(proc)
    assert sorted(got) == list(range(n))
    assert len({r["params"] for r in got.values()}) == 1  # the raw bytes, compared by the test itself
    assert len({r["digest"] for r in got.values()}) == 1
    assert got[0]["buckets"] == (1 if bucket_bytes == "100000" else 2)


def test_overlap_and_bucket_size_do_not_change_the_result(run_mpi, rank_results):
    runs = [
        rank_results(run_mpi(2, "identical", overlap, size))[0]["params"]
        for overlap, size in (("sync", "64"), ("overlap", "64"), ("sync", "100000"))
    ]
    assert runs[0] == runs[1] == runs[2]


def every_rank_reports(got: dict, ranks: int, *phrases: str) -> None:
    """Every one of `ranks` ranks reported, and each error names all `phrases` (the same error everywhere)."""
    assert sorted(got) == list(range(ranks))
    for r in got.values():
        for phrase in phrases:
            assert phrase in r["error"], r["error"]


def test_shape_mismatch_is_an_error_on_every_rank(run_mpi, rank_results):
    proc = run_mpi(4, "mismatch", "shape")
    every_rank_reports(
        rank_results(proc),
        4,
        "before the initial broadcast",
        "p0: [8, 16] float32 on ranks 0,2,3, [8, 12] float32 on rank 1",
    )


def test_a_parameter_frozen_on_some_ranks_only_is_an_error_on_every_rank(run_mpi, rank_results):
    every_rank_reports(
        rank_results(run_mpi(2, "mismatch", "frozen")),
        2,
        "before the initial broadcast",
        "frozen: [4] float32 frozen on rank 0, [4] float32 on rank 1",
    )


def test_frozen_parameters_are_broadcast_and_hashed_but_not_reduced(run_mpi, rank_results):
    got = rank_results(run_mpi(2, "frozen"))
    assert sorted(got) == [0, 1]
    assert got[0]["frozen"] == got[1]["frozen"] == [1.0] * 4  # rank 0's value, unchanged by training
    assert got[0]["digest"] == got[1]["digest"]
    assert got[0]["reduced"] == got[1]["reduced"] == ["p1", "p0"]
    for r in got.values():
        assert "frozen differs between ranks 0,1 (no majority)" in r["error"]


def test_step_mismatch_is_an_error_on_every_rank(run_mpi, rank_results):
    every_rank_reports(rank_results(run_mpi(2, "mismatch", "step")), 2, "step 0 on rank 0, step 1 on rank 1")


def test_nan_gradient_names_rank_step_parameter_and_node(run_mpi, rank_results):
    got = rank_results(run_mpi(4, "nan"))
    assert sorted(got) == [0, 1, 2, 3]
    for r in got.values():
        assert r["step"] == 2
        assert re.search(
            r"rank 1 step 2: gradient of p1 has \d+ NaN and 0 Inf, produced by matmul\d+GradNode "
            r"\(forward at mpi_jobs.py:\d+\)",
            r["error"],
        ), r["error"]


@pytest.mark.parametrize("when,env,step", [("explicit", {}, 0), ("auto", {"DISTVLOG_DP_DEBUG": "1"}, 2)])
def test_parameter_hash_names_the_diverged_parameter_and_rank(run_mpi, rank_results, when, env, step):
    got = rank_results(run_mpi(4, "hash", when, env=env))
    assert sorted(got) == [0, 1, 2, 3]
    for r in got.values():
        assert r["step"] == step  # debug mode checks at the forward of step 2 (every 2 steps)
        assert (
            f"parameters are not identical across replicas at step {step}: p1 differs on rank 2 "
            "(ranks 0,1,3 agree)" in r["error"]
        )
        assert "p0" not in r["error"]


def test_finalize_unbinds_the_step_dataparallel_bound(run_mpi, rank_results):
    got = rank_results(run_mpi(2, "finalize"))
    assert sorted(got) == [0, 1]
    for r in got.values():
        text = Path(r["path"]).read_text()
        assert re.search(r"\] training done step=1$", text, re.M), text
        assert re.search(r"\] after finalize$", text, re.M), text


def test_a_reused_run_id_keeps_every_rank_of_the_new_job_together(run_mpi, rank_results, tmp_path):
    """An earlier 2-rank job used the id: the 4-rank job must not put ranks 2 and 3 into the old run."""
    env = {"DISTVLOG_RUN_ID": "reused"}
    first = rank_results(run_mpi(2, "finalize", env=env))
    assert {Path(r["path"]).parent.name for r in first.values()} == {"reused"}
    second = rank_results(run_mpi(4, "finalize", env=env))
    assert sorted(second) == [0, 1, 2, 3]
    assert {Path(r["path"]).parent.name for r in second.values()} == {"reused.1"}
    assert sorted(p.name for p in (tmp_path / "logs" / "reused").iterdir()) == ["rank-0.log", "rank-1.log"]


# -- dv.finalize() joins debug mode's checks ----------------------------------------------------------------
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
def test_a_rank_elsewhere_than_finalize_is_an_error_on_every_rank(run_mpi, rank_results, kind, overlap, where):
    got = rank_results(run_mpi(2, "finalize_checks", kind, overlap))
    assert sorted(got) == [0, 1]
    for r in got.values():
        assert r["error"].startswith("DataParallel check before ") and r["error"].endswith(where), r["error"]


def test_finalize_in_debug_mode_passes_when_every_rank_is_there(run_mpi, rank_results):
    got = rank_results(run_mpi(2, "finalize_checks", "none", "overlap"))
    assert got == {0: {"error": None}, 1: {"error": None}}


# -- finalize flushes before it waits ----------------------------------------------------------------------
def test_a_rank_killed_while_waiting_in_finalize_keeps_its_last_record(run_mpi, tmp_path):
    proc = run_mpi(2, "killed_in_finalize", env={"DISTVLOG_FLUSH_INTERVAL": "1000"})  # no timer flush
    assert proc.returncode != 0  # rank 0 was SIGKILLed
    said = json.loads((tmp_path / "results" / "rank-0.json").read_text())
    assert "rank 0's last record before finalize" in Path(said["path"]).read_text(), proc.stderr


# -- unused parameters ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overlap,bucket_bytes", [("sync", "100000"), ("overlap", "16"), ("overlap", "100000")])
def test_unused_parameters_match_a_single_process_reference(run_mpi, rank_results, overlap, bucket_bytes):
    got = rank_results(run_mpi(2, "unused", overlap, bucket_bytes))
    assert sorted(got) == [0, 1]
    for r in got.values():
        assert r["params"] == r["reference"]  # bit for bit
        assert r["has_grad"] == [[True, True, True, False]] * 3  # p2: rank 0 used it; p3: no rank did
        assert r["unused_moved"] == 0.0  # Adam's weight decay never saw p3


# -- constructor arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"check_every": 0}, "check_every must be an integer >= 1 (steps between parameter hash checks), got 0"),
        ({"check_every": 2.5}, "check_every must be an integer >= 1 (steps between parameter hash checks), got 2.5"),
        ({"comm_buffer_size": 0}, "comm_buffer_size must be a positive number of MB, got 0"),
        ({"comm_buffer_size": float("inf")}, "comm_buffer_size must be a positive number of MB, got inf"),
        ({"comm_buffer_size": "25"}, "comm_buffer_size must be a positive number of MB, got '25'"),
        ({"digest_every": 0}, "digest_every must be an integer >= 1 (steps between logged parameter digests), got 0"),
    ],
)
def test_bad_constructor_arguments_are_named_before_any_communication(kwargs, message):
    with pytest.raises(ValueError) as info:
        dv.DataParallel(dv.nn.Linear(2, 2), debug=True, **kwargs)
    assert str(info.value) == f"DataParallel: {message}"


# -- boolean environment variables -------------------------------------------------------------------------
def test_boolean_variables_mean_what_they_say(run_mpi, rank_results):
    values = ["1", "TRUE", "yes", "On", "0", "False", "no", "OFF", "maybe"]
    proc = run_mpi(1, "flags", *values)
    got = rank_results(proc)[0]
    expected = [True] * 4 + [False] * 5
    assert got == {"debug": expected, "echo": expected}
    for name in ("DISTVLOG_DP_DEBUG", "DISTVLOG_ALSOLOGTOSTDERR"):
        assert (
            f"distvlog: ignoring {name}='maybe': not one of 1/true/yes/on or 0/false/no/off (using False)\n"
            in proc.stderr
        )
