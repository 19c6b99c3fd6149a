"""A job's session on MPI: `init`/`finalize` and rank queries.

`init()` is the explicit, collective start: MPI, one run id for all ranks, clock offsets to rank 0 in
every file header. Without it everything still works lazily (rank from the launcher, run id agreed
through the environment), only without clock offsets: a lazy start must never wait for other ranks.
"""

from __future__ import annotations

from typing import Any

from ..format import CLOCK_END, CLOCK_START
from ..logger import IDENTITY, SINK, configure, default_run_id, get_logger, log_dir, unbind_context
from . import clock, comm

_log = get_logger("distvlog.distributed")
_state = {"initialized": False, "finalized": False}


def init(*, log_dir: str | None = None, format: str | None = None, run_id: str | None = None) -> None:
    """Collective (call on every rank, before logging): start MPI, give all ranks rank 0's run id and
    measure each rank's clock offset to rank 0. Calling it again does nothing."""
    if _state["initialized"]:
        return
    world = comm.world()
    private = comm.private("session")
    if SINK.path is None:
        configure(format=format, log_dir=log_dir)
    shared = agree_on_run(private, run_id, "distvlog.init()")
    offset, uncertainty = clock.record(private, CLOCK_START)
    _log.info(
        "dist init",
        world_size=world.size,
        run_id=shared,
        clock_offset_us=round(offset, 1),
        clock_uncertainty_us=round(uncertainty, 1),
    )
    _state["initialized"] = True


def agree_on_run(comm: Any, run_id: str | None, init_name: str) -> str:
    """Collective over `comm` (an mpi4py communicator, or anything with its `rank`, `size` and `bcast`):
    every rank logs into rank 0's run, which is returned; a rank whose file is open in another run (its
    ranks named the run apart: no shared file system, a launcher `_job` does not know) moves it there.
    `init_name` is the init function a rank that logged before it should have called first."""
    if comm.rank == 0:
        # Rank 0's file decides the run: a reused run id moves it on to <id>.1, and every rank follows it
        # there, whatever files an earlier job with that id (and another number of ranks) left behind.
        if SINK.path is None:
            configure(run_id=run_id or SINK.run_id or default_run_id(comm.size, SINK.root or log_dir()))
        SINK.open()
    shared = comm.bcast(SINK.run_id if comm.rank == 0 else None, root=0)
    if SINK.path is None:
        configure(run_id=shared)
    else:
        try:
            SINK.move_to(shared)  # a rank that logged before the job's run was known carries its records over
        except OSError as exc:
            _log.warning(
                f"this rank logs to run {SINK.run_id}, rank 0 to run {shared}, and its file could not be moved "
                f"there ({exc}); call {init_name} before the first log record"
            )
    return shared


def finalize(*, gather: bool = False) -> None:
    """Collective: measure clock offsets again (so `merge` can correct drift), flush, and with
    `gather=True` copy every rank's log files into rank 0's run directory over MPI. In DataParallel's debug
    mode it first checks that no rank is still reducing gradients (DataParallelError, not a hang)."""
    if _state["finalized"]:
        return
    SINK.flush()  # before any wait: a rank killed while waiting for a dead one keeps its last records
    unbind_context("step")  # bound by DataParallel's forward: records after training belong to no step
    from .parallel import check_finalize

    check_finalize()
    init()
    private = comm.private("session")
    clock.record(private, CLOCK_END)
    if gather:
        from .gather import gather as gather_files

        gather_files(private)
    SINK.flush()
    _state["finalized"] = True


def is_initialized() -> bool:
    return _state["initialized"]


def get_rank() -> int:
    """This process's rank: MPI's once MPI is up, else the launcher's environment (no MPI call)."""
    return IDENTITY.rank


def get_world_size() -> int:
    return IDENTITY.world_size
