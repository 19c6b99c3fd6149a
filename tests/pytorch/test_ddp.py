"""PyTorch DDP jobs on real ranks, started by torchrun, by mpirun and by `distvlog launch`: one run of rank
files that `merge`, `trace` and `diff` read, a NaN planted on one rank found by `diff`, the allreduce records
around the user's own comm hook, steps as optimizer steps under no_sync(), and a clean exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the PyTorch adapter's tests need torch (CI installs torch==2.13.0)")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "launch" / "train_torch.py"
JOBS = Path(__file__).with_name("ddp_jobs.py")
BIN = Path(sys.executable).parent
HANG_TIMEOUT_S = 300  # against hangs only: never a limit on how fast anything must be
NAN = ("--inject-nan-rank", "2", "--inject-nan-step", "3")


def _env(logs: Path) -> dict[str, str]:
    """This environment without any launcher's or distvlog's variables: each job is started afresh."""
    drop = ("DISTVLOG_", "GLOG_", "OMPI_", "PMI_", "PMIX_", "MASTER_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in ("RANK", "WORLD_SIZE")}
    return {**env, "PYTHONPATH": str(ROOT), "DISTVLOG_LOG_DIR": str(logs), "OMP_NUM_THREADS": "1"}


def _run(cmd: list[str], logs: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(logs), cwd=logs.parent, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)


def torchrun(n: int, *args: str | Path) -> list[str]:
    """torchrun on a free port (--standalone), n ranks."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n), *map(str, args)]


def mpirun(n: int, *args: str | Path) -> list[str]:
    """The MPICH wheel's mpirun (distvlog's default launcher), n ranks."""
    return [str(BIN / "mpirun"), "-n", str(n), sys.executable, *map(str, args)]


def cli(*args: str | Path, logs: Path) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "distvlog", *map(str, args)], logs)


def merged(logs: Path) -> list[dict]:
    """Every record of the run, through `distvlog merge --format jsonl`."""
    out = cli("merge", logs, "--format", "jsonl", logs=logs)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """The digits MLP on 4 ranks, 6 steps, NaN planted on rank 2 at step 3: once under torchrun, once under a
    plain mpirun (the ranks agree on MASTER_PORT over MPI)."""
    ran = {}
    for name, launch in (("torchrun", torchrun), ("mpirun", mpirun)):
        logs = tmp_path_factory.mktemp(name) / "logs"
        ran[name] = logs, _run(launch(4, TRAIN, "--steps", "6", *NAN), logs)
    return ran


@pytest.fixture(params=["torchrun", "mpirun"])
def job(request, jobs) -> tuple[Path, subprocess.CompletedProcess]:
    logs, proc = jobs[request.param]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return logs, proc


def test_a_job_writes_one_file_per_rank_into_one_run_with_clock_offsets(job):
    """Four rank files in one run directory, each header with the same run id and a measured clock offset."""
    logs, _ = job
    (run,) = [p for p in logs.iterdir() if p.is_dir() and not p.is_symlink() and p.name != ".jobs"]
    assert sorted(p.name for p in run.iterdir()) == [f"rank-{r}.log" for r in range(4)]
    metas = [r["meta"] for r in merged(logs) if r["event"] == "distvlog-meta"]
    assert {m["run_id"] for m in metas} == {run.name} and sorted(m["rank"] for m in metas) == [0, 1, 2, 3]
    assert all(m["clock_start"].strip() and m["clock_end"].strip() for m in metas)


def test_the_ranks_log_every_allreduce_with_the_same_averaged_checksum(job):
    """Per step and bucket, every rank logs begin and end; the ends agree on the checksum of the average."""
    records = merged(job[0])
    ends: dict[tuple, dict[int, str]] = {}
    for r in records:
        if r["event"] == "allreduce end":
            ends.setdefault((r["step"], r["bucket"]), {})[r["rank"]] = r["checksum"]
    begins = {(r["step"], r["bucket"], r["rank"]) for r in records if r["event"] == "allreduce begin"}
    assert sorted({step for step, _ in ends}) == list(range(6))
    assert all(sorted(by_rank) == [0, 1, 2, 3] for by_rank in ends.values())
    assert begins == {(step, bucket, rank) for step, bucket in ends for rank in range(4)}
    assert all(len(set(by_rank.values())) == 1 for by_rank in ends.values())


def test_diff_finds_the_nan_planted_on_rank_2(job):
    """`distvlog diff` names rank 2, step 3 and the square root's node in the guarded layer, and how the NaN
    reached the other ranks; exit status 1."""
    out = cli("diff", job[0], logs=job[0])
    assert out.returncode == 1, out.stdout + out.stderr
    assert "NaN/Inf origin: rank 2 step 3 pow" in out.stdout and "train_torch.py:" in out.stdout
    assert "then NaN/Inf on ranks 0,1,3 from step 4" in out.stdout


def test_trace_draws_the_guarded_nodes_and_the_allreduces(job):
    """`distvlog trace`: a slice per logged node run and per allreduce, on all four ranks."""
    logs, _ = job
    out = cli("trace", logs, "-o", logs.parent / "trace.json", logs=logs)
    assert out.returncode == 0, out.stderr
    events = json.loads((logs.parent / "trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    slices = [e for e in events if e.get("ph") == "X"]
    names = {e["name"] for e in slices}
    assert any(n.startswith("addmm") for n in names) and any(n.startswith("allreduce") for n in names), names
    assert {e["pid"] for e in slices} >= {0, 1, 2, 3}


def test_every_rank_ends_with_the_end_record_and_no_abort(job):
    """Whatever started it, each rank's last record says the script ended; no rank aborted at exit."""
    logs, proc = job
    last = {}
    for r in merged(logs):
        last[r["rank"]] = r["event"]
    assert last == dict.fromkeys(range(4), "the script ended")
    assert "terminate called" not in proc.stderr


def test_distvlog_launch_runs_the_torch_example(tmp_path):
    """`distvlog launch -n 2 launch/train_torch.py`: the ranks agree over MPI, the timeline is merged."""
    logs = tmp_path / "logs"
    out = cli("launch", "-n", "2", "--log-dir", logs, TRAIN, "--steps", "2", logs=logs)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "parameters bit-identical on all 2 ranks" in out.stdout
    assert (logs / "latest" / "timeline.log").is_file()


@pytest.fixture(scope="module")
def fp16_job(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Two ranks under torchrun training with the user's fp16 compression hook: (logs, each rank's results)."""
    root = tmp_path_factory.mktemp("fp16")
    proc = _run(torchrun(2, JOBS, "fp16", root / "results"), root / "logs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "logs", [json.loads((root / "results" / f"rank-{r}.json").read_text()) for r in range(2)]


def test_the_users_comm_hook_runs_inside_ours(fp16_job):
    """log_ddp(model, hook=fp16_compress_hook): DDP's one comm hook is ours, around the user's; the
    replicas stay identical and each bucket's allreduce is logged."""
    logs, results = fp16_job
    assert results[0]["weight"] == results[1]["weight"]
    ends = [r for r in merged(logs) if r["event"] == "allreduce end"]
    assert sorted({(r["rank"], r["step"]) for r in ends}) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_under_torchrun_mpi_is_never_initialised(fp16_job):
    """torchrun's environment is enough: init() agrees on the run and the clocks over torch.distributed."""
    _, results = fp16_job
    assert [r["mpi_loaded"] for r in results] == [False, False]


def test_a_step_is_an_optimizer_step_under_no_sync(tmp_path):
    """Two optimizer steps of three micro-batches, two of them under no_sync(): allreduces of steps 0 and 1
    only, and one `parameters` record per step (the last after the final step)."""
    logs = tmp_path / "logs"
    proc = _run(torchrun(2, JOBS, "no_sync", tmp_path / "results"), logs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = merged(logs)
    assert sorted({r["step"] for r in records if r["event"] == "allreduce begin"}) == [0, 1]
    digests = [(r["rank"], r["step"], r.get("final", False)) for r in records if r["event"] == "parameters"]
    assert sorted(digests) == [(rank, step, step == 2) for rank in range(2) for step in range(3)]


def test_a_model_with_a_comm_hook_already_gets_an_error_saying_how(tmp_path):
    """DDP takes one comm hook: log_ddp on a model that has one says to pass the user's hook to log_ddp.
    (One plain process: init() sets up a world of one.)"""
    logs = tmp_path / "logs"
    proc = _run([sys.executable, str(JOBS), "second_hook", str(tmp_path / "results")], logs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    error = json.loads((tmp_path / "results" / "rank-0.json").read_text())["error"]
    assert "log_ddp(model, hook=your_hook, state=your_state)" in error


def test_a_fault_only_train_py_plants_is_refused(tmp_path):
    """--inject-extra-allreduce-rank would need a second backward without a forward, which DDP refuses:
    train_torch.py says so before starting, as argparse refuses (status 2, one line)."""
    logs = tmp_path / "logs"
    proc = _run([sys.executable, str(TRAIN), "--steps", "5", "--inject-extra-allreduce-rank", "1"], logs)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("train_torch.py: error: --inject-extra-allreduce-rank: planted by launch/train.py only")
    ), proc.stderr
    assert not logs.exists()
