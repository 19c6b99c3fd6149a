"""Jobs the MPI tests run on real ranks: `mpirun -n N python mpi_jobs.py MODE [args]`.

Each rank writes what it has to say to `results/rank-R.json` in the working directory (ranks share one
stdout, where long lines interleave); errors are caught and written the same way, so a test can check
what every rank said instead of the job hanging or dying.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import traceback

import numpy as np

import distvlog as dv
import distvlog.nn.functional as F


def say(**fields) -> None:
    os.makedirs("results", exist_ok=True)
    with open(f"results/rank-{dv.get_rank()}.json", "w") as f:
        json.dump(fields, f)


class Params:
    """A model made of plain tensors: shapes may differ per rank (to provoke mismatches)."""

    def __init__(self, shapes: list[tuple[int, ...]], seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.ps = []
        for i, shape in enumerate(shapes):
            t = dv.to_tensor(rng.standard_normal(shape).astype("float32"))
            t.stop_gradient, t.name = False, f"p{i}"
            self.ps.append(t)

    def parameters(self):
        return self.ps

    def __call__(self, x):
        return dv.tanh(x @ self.ps[0]) @ self.ps[1]


class WithFrozen(Params):
    """Params and a frozen output scale (stop_gradient, to_tensor's default) that starts different per rank."""

    def __init__(self, seed: int) -> None:
        super().__init__([(8, 16), (16, 4)], seed)
        frozen = dv.to_tensor(np.full(4, 1.0 + seed, "float32"))
        frozen.name = "frozen"
        self.ps.append(frozen)

    def __call__(self, x):
        return super().__call__(x) * self.ps[2]


def train(model: dv.DataParallel, steps: int, nan_at: tuple[int, int] | None = None) -> None:
    rng = np.random.default_rng(100 + dv.get_rank())
    opt = dv.optim.SGD(learning_rate=0.1, parameters=model.parameters())
    for step in range(steps):
        x = rng.standard_normal((6, 8)).astype("float32")
        if nan_at == (dv.get_rank(), step):
            x[0, 0] = np.nan
        loss = F.mse_loss(model(dv.to_tensor(x)), dv.to_tensor(np.zeros((6, 4), "float32")))
        loss.backward()
        opt.step()
        opt.clear_grad()


def mode_identical(overlap: str, bucket_bytes: str) -> None:
    """Train; report the digest and the raw parameters' hash so the test compares ranks itself."""
    dv.init()
    model = dv.DataParallel(
        Params([(8, 16), (16, 4)], seed=dv.get_rank()),
        overlap=overlap == "overlap",
        comm_buffer_size=int(bucket_bytes) / 2**20,
    )
    train(model, 5)
    params = b"".join(p.numpy().tobytes() for p in model.parameters())
    say(digest=model.check_parameters(), buckets=len(model.buckets), params=hashlib.sha256(params).hexdigest())
    dv.finalize()


def mode_mismatch(kind: str) -> None:
    """Rank 1 builds a different model (`shape`), trains a parameter the others freeze (`frozen`) or skips a
    step (`step`); debug mode must say so on every rank instead of hanging."""
    dv.init()
    shapes = [(8, 16), (16, 4)]
    if kind == "shape" and dv.get_rank() == 1:
        shapes = [(8, 12), (12, 4)]
    params = WithFrozen(seed=0) if kind == "frozen" else Params(shapes, seed=0)
    if kind == "frozen" and dv.get_rank() == 1:
        params.ps[2].stop_gradient = False  # trained here only: its gradient would join a bucket
    try:
        model = dv.DataParallel(params, debug=True)
        if kind == "step" and dv.get_rank() == 1:
            model.step += 1  # as if this rank had run one more forward
        train(model, 2)
        say(error=None)
    except dv.distributed.DataParallelError as exc:
        say(error=str(exc))


def mode_nan() -> None:
    """Debug mode: rank 1 feeds a NaN at step 2; every rank must get an error naming rank, step,
    parameter and the GradNode that produced it."""
    dv.init()
    model = dv.DataParallel(Params([(8, 16), (16, 4)], seed=0), debug=True)
    try:
        train(model, 4, nan_at=(1, 2))
        say(error=None)
    except dv.distributed.DataParallelError as exc:
        say(error=str(exc), step=model.step)


def mode_hash(when: str) -> None:
    """Rank 2 changes one parameter behind DataParallel's back; the hash check must name it and the rank:
    asked for (`explicit`), or by debug mode (DISTVLOG_DP_DEBUG=1) every 2 steps (`auto`)."""
    dv.init()
    model = dv.DataParallel(Params([(8, 16), (16, 4)], seed=0), check_every=2)
    train(model, 1)
    if dv.get_rank() == 2:
        model.parameters()[1].numpy()[0, 0] += 1.0
    try:
        if when == "auto":
            train(model, 3)
        say(digest=model.check_parameters(), step=model.step)
    except dv.distributed.DataParallelError as exc:
        say(error=str(exc), step=model.step)


def mode_frozen() -> None:
    """A frozen parameter is broadcast and hashed like the others but not reduced; rank 1 then changes it
    behind DataParallel's back, and the hash must say so."""
    dv.init()
    model = dv.DataParallel(WithFrozen(seed=dv.get_rank()))
    train(model, 3)
    frozen = model.parameters()[2]
    fields = {
        "frozen": frozen.numpy().tolist(),
        "digest": model.check_parameters(),
        "reduced": [p.name for b in model.buckets for p in b.params],
    }
    if dv.get_rank() == 1:
        frozen.numpy()[0] += 1.0
    try:
        model.check_parameters()
        say(error=None, **fields)
    except dv.distributed.DataParallelError as exc:
        say(error=str(exc), **fields)


def mode_finalize() -> None:
    """Log at the end of training and after dv.finalize(); say where the log file is."""
    dv.init()
    model = dv.DataParallel(Params([(8, 16), (16, 4)], seed=0))
    train(model, 2)
    log = dv.get_logger("job")
    log.info("training done")
    dv.finalize()
    log.info("after finalize")
    dv.flush()
    from distvlog.logger import SINK

    say(path=str(SINK.path))


def mode_gather(layout: str, records: str) -> None:
    """Log, then finalize(gather=True); `local`: every rank has its own log root, as on node-local disks."""
    base = os.environ["DISTVLOG_LOG_DIR"]
    dv.init(log_dir=f"{base}/node{dv.get_rank()}" if layout == "local" else base)
    log = dv.get_logger("job")
    for i in range(int(records)):
        log.info("filler record to make the file span several chunks", i=i, payload="x" * 40)
    log.info("last record before gather")
    dv.finalize(gather=True)
    from distvlog.logger import SINK

    say(path=str(SINK.path))


def mode_clock(rounds: str) -> None:
    """The measured offset to rank 0 and its uncertainty, as written into the header."""
    from distvlog.distributed import clock, comm

    offset, uncertainty = clock.measure(comm.private("test"), int(rounds))
    say(offset=offset, uncertainty=uncertainty)


STEPS = 3


def batch(rng: np.random.Generator) -> dv.Tensor:
    return dv.to_tensor(rng.standard_normal((6, 8)).astype("float32"))


def backward(model, x: dv.Tensor) -> None:
    F.mse_loss(model(x), dv.to_tensor(np.zeros((6, 4), "float32"))).backward()


def mode_finalize_checks(kind: str, overlap: str) -> None:
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
    except dv.distributed.DataParallelError as exc:
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
    from distvlog.distributed import clock, comm
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


def run(jobs: dict) -> None:
    """Run the job the command line names among `jobs` (a job module's globals); a crash is said, then raised."""
    mode, *args = sys.argv[1:]
    try:
        jobs[f"mode_{mode}"](*args)
    except Exception:
        say(crash=traceback.format_exc())
        raise


if __name__ == "__main__":
    run(globals())
