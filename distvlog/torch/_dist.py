"""`init()` and `finalize()` for torch.distributed jobs, under torchrun, an MPI launcher or `distvlog launch`.

`init()` finds rank and world size where the launcher put them and sets up torch.distributed when the
script has not: torchrun (and anything that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT) needs
nothing more, and MPI is never initialised then. Under an MPI launcher (Open MPI's OMPI_COMM_WORLD_*,
Hydra's PMI_*, PMIx's) the ranks map its variables onto torch's; without MASTER_ADDR/MASTER_PORT in the
environment, rank 0 picks a free port and tells the others over MPI (mpi4py, a dependency of distvlog): no
fixed port that two jobs on one host could both take. Then, over a gloo group of distvlog's own, every rank
gets rank 0's run id and its clock offset to rank 0 (so `merge` corrects skew without MPI).

`finalize()`, which also runs at a normal exit (not after an unhandled exception: the other ranks may be in
a collective the failed one will never join), logs the last parameter digests, measures the clock offsets
again and shuts torch.distributed down in the order that does not abort: the reducers of live
DistributedDataParallel models first, then the process groups (destroying a group a live DDP model still
holds can end the process with "terminate called without an active exception").
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..distributed import agree_on_run, clock
from ..format import CLOCK_END, CLOCK_START
from ..logger import IDENTITY, SINK, configure, flush, get_logger, unbind_context
from ._comm import TorchComm

_log = get_logger("distvlog.torch")
_state: dict = {"initialized": False, "finalized": False, "comm": None}
# Per launcher: its rank and size variables and the local rank's (for the GPU a rank takes).
_MPI_LAUNCHERS = (
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("a PMI launcher (MPICH's Hydra)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("a PMIx launcher", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"),
)


class InitError(RuntimeError):
    """torch.distributed could not be set up from this environment; the message says what to set."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _rendezvous_env() -> str:
    """Fill in what torch's env:// rendezvous reads (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
    from the launcher; returns the launcher's name."""
    env = os.environ
    if all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return "torchrun" if env.get("TORCHELASTIC_RUN_ID") else "the environment"
    for name, rank_var, size_var, local_var in _MPI_LAUNCHERS:
        if env.get(rank_var) and env.get(size_var):
            env["RANK"], env["WORLD_SIZE"] = env[rank_var], env[size_var]
            if env.get(local_var):
                env.setdefault("LOCAL_RANK", env[local_var])
            if not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")):
                env["MASTER_ADDR"], env["MASTER_PORT"] = _master_over_mpi(name)
            return name
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    return "a single process"


def _master_over_mpi(launcher: str) -> tuple[str, str]:
    """Rank 0's host and a port free on it, broadcast over MPI; a rank on rank 0's host reaches it on the
    loopback."""
    try:
        from ..distributed import comm

        world = comm.private("torch-rendezvous")
    except Exception as exc:
        raise InitError(
            f"distvlog.torch.init(): started by {launcher} without MASTER_ADDR and MASTER_PORT, and MPI could "
            f"not be used to agree on them ({type(exc).__name__}: {exc}); set both in the environment of every "
            "rank (rank 0's host, a free port)"
        ) from exc
    host = socket.gethostname()
    master = world.bcast((host, _free_port()) if world.rank == 0 else None, root=0)
    return ("127.0.0.1" if master[0] == host else master[0]), str(master[1])


def init(
    *,
    backend: str | None = None,
    timeout: datetime.timedelta | None = None,
    log_dir: str | None = None,
    format: str | None = None,
    run_id: str | None = None,
) -> None:
    """Collective (call on every rank, before logging): set up torch.distributed if the script has not
    (`backend`: gloo on CPU, nccl when CUDA is present), give every rank rank 0's run id, measure each rank's
    clock offset to rank 0, and finalize at a normal exit. Calling it again does nothing."""
    if _state["initialized"]:
        return
    if SINK.path is None:
        configure(format=format, log_dir=log_dir)
    launcher = "the script"
    if not dist.is_initialized():
        launcher = _rendezvous_env()
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, **({"timeout": timeout} if timeout is not None else {}))
    IDENTITY.rank, IDENTITY.world_size = dist.get_rank(), dist.get_world_size()
    comm = _state["comm"] = TorchComm()
    shared = agree_on_run(comm, run_id, "distvlog.torch.init()")
    offset, uncertainty = clock.record(comm, CLOCK_START)
    _log.info(
        "dist init",
        world_size=comm.size,
        run_id=shared,
        backend=dist.get_backend(),
        started_by=launcher,
        clock_offset_us=round(offset, 1),
        clock_uncertainty_us=round(uncertainty, 1),
    )
    _state["initialized"] = True
    atexit.register(_at_exit)


def is_initialized() -> bool:
    return _state["initialized"]


def finalize() -> None:
    """Collective, call it instead of `torch.distributed.destroy_process_group()`: the last parameter
    digests of the models `log_ddp` watches, the clock offsets again, then DDP's reducers and the process
    groups released in an order that cannot abort. Runs at a normal exit by itself; calling it again does
    nothing."""
    if not _state["initialized"] or _state["finalized"]:
        return
    _state["finalized"] = True
    flush()  # before any wait: a rank killed while waiting for a dead one keeps its last records
    unbind_context("step")
    from ._ddp import log_final_digests

    log_final_digests()
    if dist.is_initialized():  # (else the script destroyed the process groups itself)
        try:
            clock.record(_state["comm"], CLOCK_END)
        except Exception as exc:  # a peer gone (its process group broken): the offsets stay those of the start
            _log.warning(f"distvlog.torch.finalize(): no closing clock offsets ({type(exc).__name__}: {exc})")
    _release()
    flush()


def _release() -> None:
    """Drop the reducers of live DDP models, then destroy the process groups."""
    for obj in gc.get_objects():  # (by type: isinstance would ask some objects their __class__, and warn)
        if issubclass(type(obj), DistributedDataParallel) and hasattr(obj, "reducer"):
            del obj.reducer
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    _state["comm"] = None


def _at_exit() -> None:
    """A normal exit finalizes, before the logger's own exit hook ends the log with the end record (exit
    hooks run last-registered first); after an unhandled exception (`sys.last_value`) nothing collective
    runs and the log ends with the failure."""
    if hasattr(sys, "last_value"):
        return
    with contextlib.suppress(Exception):
        finalize()
