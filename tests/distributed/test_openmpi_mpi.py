"""Debian's Open MPI (openmpi-bin) next to the mpich wheel, as on CI: `distvlog launch --mpirun mpirun.openmpi`
trains on real Open MPI ranks (mpi4py pointed at Open MPI's libmpi), and a launcher of one MPI with mpi4py on
the other's libmpi is one clear error instead of N silent copies of rank 0."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from launch_testkit import TRAIN, losses, run_dir_of

from distvlog.launch.command import find_launcher, launcher_kind, launcher_libmpi

OPENMPI = shutil.which("mpirun.openmpi")
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(OPENMPI is None, reason="Open MPI (Debian's openmpi-bin) is not installed"),
]


@pytest.fixture
def mpich_with_openmpi_libmpi() -> tuple[str, str]:
    """(the mpich wheel's mpirun, Open MPI's libmpi): the classic mismatch, set up on purpose."""
    launcher = find_launcher(None)
    if launcher_kind(launcher) != "hydra":
        pytest.skip(f"{launcher} is not MPICH's mpirun (the mpich wheel of the [test] extra)")
    return launcher, launcher_libmpi(OPENMPI, "openmpi")


def test_train_on_debian_openmpi(run_cli):
    proc = run_cli("launch", "--mpirun", "mpirun.openmpi", "-n", "2", TRAIN, "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    assert f"distvlog launch: 2 ranks with {OPENMPI} (openmpi" in proc.stderr
    assert "in 2 shards" in proc.stdout  # COMM_WORLD has 2 ranks, not 2 worlds of 1
    found = losses(proc.stdout)
    assert len(found) == 3 and found[-1] < found[0], proc.stdout
    assert re.search(r"parameters bit-identical on all 2 ranks: digest [0-9a-f]{32}", proc.stdout)
    run_dir = run_dir_of(proc)
    assert sorted(p.name for p in run_dir.glob("rank-*")) == ["rank-0.log", "rank-1.log"]
    timeline = (run_dir / "timeline.log").read_text()
    assert all(f"] [rank {r}] allreduce end v=1 step=2 bucket=0" in timeline for r in range(2))


def test_a_nan_on_one_openmpi_rank_is_named(run_cli):
    proc = run_cli(
        "launch",
        "--mpirun",
        "mpirun.openmpi",
        "-n",
        "2",
        TRAIN,
        "--steps",
        "4",
        "--inject-nan-rank",
        "1",
        "--inject-nan-step",
        "2",
        "--debug",
    )
    assert proc.returncode != 0
    assert re.search(
        r"distvlog launch: rank 1 failed DataParallel's check before allreduce of bucket 0 of step 2 "
        r"\(train\.py:\d+\): rank 1 step 2: gradient of linear_1\.b_0 has 64 NaN",
        proc.stderr,
    ), proc.stderr
    assert "distvlog launch: rank 0 stopped because of rank 1\n" in proc.stderr, proc.stderr


def test_launch_refuses_mpich_mpirun_with_openmpi_libmpi(run_cli, mpich_with_openmpi_libmpi):
    launcher, libmpi = mpich_with_openmpi_libmpi
    proc = run_cli("launch", "-n", "2", TRAIN, env={"MPI4PY_LIBMPI": libmpi})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        re.escape(f"distvlog launch: error: {launcher} is MPICH's launcher, but mpi4py loads ")
        + r"Open MPI v[\d.]+ "
        + re.escape(
            f"(MPI4PY_LIBMPI={libmpi}): pass --mpirun with the launcher of that MPI, or set MPI4PY_LIBMPI "
            "to MPICH's libmpi.so.12"
        ),
        lines[0],
    ), proc.stderr


def test_ranks_on_another_mpis_libmpi_stop_with_one_clear_error(run_mpi, tmp_path, mpich_with_openmpi_libmpi):
    """Started by mpirun itself, as `mpirun -n 2 python train.py` with the wrong mpirun on PATH would be."""
    _, libmpi = mpich_with_openmpi_libmpi
    proc = run_mpi(2, "finalize", env={"MPI4PY_LIBMPI": libmpi})  # its dv.init() is the first MPI call
    assert proc.returncode != 0
    said = {p.name: json.loads(p.read_text())["crash"] for p in (tmp_path / "results").glob("rank-*.json")}
    assert sorted(said) == ["rank-0.json", "rank-1.json"], proc.stderr
    for rank in (0, 1):
        assert re.search(
            re.escape(
                "InputError: launched by a PMI launcher (MPICH's or Intel MPI's mpirun, srun --mpi=pmi2) as "
                f"rank {rank} of 2, but mpi4py loaded Open MPI v"
            )
            + r"[\d.]+ \(\S+libmpi\.so[.\d]*\), "
            r"whose COMM_WORLD has 1 rank: ",
            said[f"rank-{rank}.json"],
        ), said
