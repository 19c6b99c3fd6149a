"""Jobs for test_review_dp.py, run as `mpirun -n N python review_dp_jobs.py MODE [args]`: what each rank has to
say goes to `results/rank-R.json` (mpi_jobs.say), as for mpi_jobs.py."""

from __future__ import annotations

import hashlib
import os
import signal

import numpy as np
from mpi_jobs import Params, run, say

import distvlog as dv
import distvlog.nn.functional as F

STEPS = 3


def batch(rng: np.random.Generator) -> dv.Tensor:
    return dv.to_tensor(rng.standard_normal((6, 8)).astype("float32"))


def backward(model, x: dv.Tensor) -> None:
    F.mse_loss(model(x), dv.to_tensor(np.zeros((6, 4), "float32"))).backward()


def mode_finalize(kind: str, overlap: str) -> None:
    """Debug mode, STEPS steps; at the last one rank 1 skips the backward (`skip`), runs one more forward and
    backward (`extra`), or skips the backward of the second of two models (`second`); `debug1`: debug mode on
    rank 0 only; `none`: nothing wrong. Then dv.finalize(), which must raise where a rank was elsewhere, and
    once more, which must then end the job normally on every rank."""
    dv.init()
    rank, rng = dv.get_rank(), np.random.default_rng(dv.get_rank())
    error = None
    try:
        debug = rank == 0 if kind == "debug1" else True
        models = [
            dv.DataParallel(Params([(8, 16), (16, 4)], seed), debug=debug, overlap=overlap == "overlap")
            for seed in range(2 if kind == "second" else 1)
        ]
        for step in range(STEPS):
            for i, model in enumerate(models):
                x = batch(rng)
                if not (step == STEPS - 1 and rank == 1 and kind in ("skip", "second") and i == len(models) - 1):
                    backward(model, x)
                if step == STEPS - 1 and rank == 1 and kind == "extra":
                    backward(model, x)
        dv.finalize()
    except dv.dist.DataParallelError as exc:
        error = str(exc)
    dv.finalize()
    say(error=error)


class Partly(Params):
    """p2 is used on every rank but rank 1, p3 on none."""

    def __init__(self) -> None:
        super().__init__([(8, 16), (16, 4), (4,), (4,)], seed=0)

    def __call__(self, x, rank: int):
        out = super().__call__(x)
        return out if rank == 1 else out + self.ps[2]


def mode_unused(overlap: str, bucket_bytes: str) -> None:
    """Adam with weight decay through DataParallel, and in this process on every rank's batches (gradients
    summed in rank order and averaged, a parameter no rank used left without one): the parameters must be
    bit-identical, and the unused one unmoved."""
    dv.init()
    rank, world = dv.get_rank(), dv.get_world_size()
    model, ref = Partly(), Partly()
    dp = dv.DataParallel(model, overlap=overlap == "overlap", comm_buffer_size=int(bucket_bytes) / 2**20)
    opt, ref_opt = (dv.optim.Adam(learning_rate=0.1, parameters=m.parameters(), weight_decay=0.1) for m in (model, ref))
    rngs = [np.random.default_rng(100 + r) for r in range(world)]
    unused_before = model.ps[3].numpy().copy()
    has_grad = []
    for _ in range(STEPS):
        xs = [batch(rng) for rng in rngs]
        F.mse_loss(dp(xs[rank], rank), dv.to_tensor(np.zeros((6, 4), "float32"))).backward()
        has_grad.append([p.grad is not None for p in model.ps])
        opt.step()
        opt.clear_grad()
        totals: list[np.ndarray | None] = [None] * len(ref.ps)
        for r, x in enumerate(xs):
            loss = F.mse_loss(ref(x, r), dv.to_tensor(np.zeros((6, 4), "float32")))
            for i, g in enumerate(dv.grad([loss], ref.ps, allow_unused=True)):
                if g is not None:
                    totals[i] = g.numpy() if totals[i] is None else totals[i] + g.numpy()
        for p, total in zip(ref.ps, totals):
            p.grad = None if total is None else dv.to_tensor(total / world)
        ref_opt.step()
        ref_opt.clear_grad()

    def digest(m: Partly) -> str:
        return hashlib.sha256(b"".join(p.numpy().tobytes() for p in m.ps)).hexdigest()

    say(
        params=digest(model),
        reference=digest(ref),
        has_grad=has_grad,
        unused_moved=float(np.abs(model.ps[3].numpy() - unused_before).max()),
    )
    dv.finalize()


def mode_killed_in_finalize() -> None:
    """Rank 0 logs a record and finalizes; rank 1 never does: it SIGKILLs rank 0 (as a launcher would) once
    rank 0's clock-sync ping arrives, i.e. while rank 0 waits in dv.finalize()."""
    from distvlog.dist import clock, comm
    from distvlog.logger import SINK

    dv.init()
    pids = comm.world().allgather(os.getpid())
    if dv.get_rank() == 0:
        say(path=str(SINK.path))
        dv.get_logger("job").info("rank 0's last record before finalize")
        dv.finalize()
    else:
        comm.private("session").Probe(source=0, tag=clock._PING)
        os.kill(pids[0], signal.SIGKILL)
        signal.pause()  # until the launcher, seeing rank 0 killed, ends the job


def mode_flags(*values: str) -> None:
    """DataParallel's debug mode and the sink's echo, for DISTVLOG_DP_DEBUG and DISTVLOG_ALSOLOGTOSTDERR set to
    each of `values`."""
    from distvlog.logger._sink import RankFile

    debug, echo = [], []
    for value in values:
        os.environ["DISTVLOG_DP_DEBUG"] = os.environ["DISTVLOG_ALSOLOGTOSTDERR"] = value
        debug.append(dv.DataParallel(Params([(8, 16), (16, 4)], seed=0)).debug)
        echo.append(RankFile().echo_all)
    say(debug=debug, echo=echo)


if __name__ == "__main__":
    run(globals())
