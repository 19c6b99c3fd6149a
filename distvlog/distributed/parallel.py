"""`DataParallel`: Paddle's data-parallel wrapper on MPI, built to be debugged.

At construction rank 0's parameters are broadcast (frozen ones too: replicas must agree on all). During
backward a gradient hook on every trainable parameter notes its gradient; when the backward pass is over (the
engine's `queue_callback`) the buckets are averaged with one Allreduce each, in a fixed order, and the
averages become the parameters' `.grad`, so `loss.backward(); opt.step()` needs nothing else. With
`overlap=True` a bucket's Iallreduce starts from the hook that completes it, while backward goes on (buckets
still start in index order on every rank).

At verbosity >= 1 (module `parallel`) DataParallel logs what `distvlog diff` needs to tell which rank went
wrong, cheaply (a hash and a dot product per bucket, a hash per parameter per step):
- once, `parameter layout names=[...] buckets=[[...], ...]`: the parameters' names in order, and which of
  them (indices into `names`) each bucket holds;
- at the start of every step, `parameters step=S digests=[...]`: an XXH3 digest of each parameter as the
  step starts (every `digest_every` steps; `final=True` at `dv.finalize()`, after the last step). Replicas
  must be bit-identical, so the first step whose digests differ brackets the update that parted them;
- per bucket, `allreduce begin step=S bucket=B bytes=N checksum=C norm=X` (this rank's gradients going in)
  and `allreduce end step=S bucket=B checksum=C wait_us=W` (the averaged result, and how long this rank
  waited in MPI for it: a rank that others wait for is a straggler);
at >= 2 also every parameter's reduced gradient checksum. Steps are counted by training forward calls from
0 and bound to every record of the thread (`step=`) until `dv.finalize()`.
In debug mode (`debug=True` or DISTVLOG_DP_DEBUG=1) the ranks compare notes before each collective
(`checks.Checks`) and every `check_every` steps compare parameter hashes; `dv.finalize()` then compares
notes too (`check_finalize`), so a rank that skipped or added a backward pass is an error, not a hang.

A parameter no rank used in a backward pass keeps `.grad` None (so the optimizer leaves it alone, as without
DataParallel); one used on some ranks gets the average, with zeros from the others (see `buckets`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import numbers
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import logger as dlog
from ..autograd import Tensor, is_grad_enabled
from ..autograd.engine import queue_callback
from ..checksum import checksum
from ..format import ALLREDUCE_BEGIN, ALLREDUCE_END, ALLREDUCE_PARAM, PARAMETER_LAYOUT, PARAMETERS
from ..logger import env_boolean, read_env
from . import comm as comm_mod
from .buckets import Bucket, make_buckets
from .checks import Checks, DataParallelError, Note, agree, nonfinite_text

_log = dlog.get_logger("distvlog.distributed.parallel")
MB = 1 << 20

__all__ = ["DataParallel", "DataParallelError"]


_numbers = itertools.count()  # DataParallels in order of construction: collective, so the same on every rank
_state = {"debug": False}  # a debug-mode DataParallel passed its first check here (so on every rank)
_live: weakref.WeakSet[DataParallel] = weakref.WeakSet()  # their parameters' last digests at dv.finalize()


def _checks_comm() -> Any:
    """The communicator all DataParallels' checks and dv.finalize()'s share."""
    return comm_mod.private("dataparallel-checks")


def check_finalize() -> None:
    """Collective, once a debug-mode DataParallel exists (else free): called by `dv.finalize()` before it
    waits for the other ranks, so a rank still reducing gradients meets it here and both raise
    DataParallelError naming what each was doing."""
    for model in list(_live):
        model._log_parameters(final=True)
    if _state["debug"]:
        agree(_checks_comm(), Note(None, None, -1, "dv.finalize()", False))


def _check_arguments(comm_buffer_size: float, check_every: int, digest_every: int) -> None:
    """Bad arguments are a one-line error at construction, not a ZeroDivisionError steps later."""
    if (
        isinstance(comm_buffer_size, bool)
        or not isinstance(comm_buffer_size, numbers.Real)
        or not 0 < comm_buffer_size < math.inf
    ):
        raise ValueError(f"DataParallel: comm_buffer_size must be a positive number of MB, got {comm_buffer_size!r}")
    if isinstance(check_every, bool) or not isinstance(check_every, numbers.Integral) or check_every < 1:
        raise ValueError(
            f"DataParallel: check_every must be an integer >= 1 (steps between parameter hash "
            f"checks), got {check_every!r}"
        )
    if isinstance(digest_every, bool) or not isinstance(digest_every, numbers.Integral) or digest_every < 1:
        raise ValueError(
            f"DataParallel: digest_every must be an integer >= 1 (steps between logged parameter "
            f"digests), got {digest_every!r}"
        )


class _Reduction:
    """The gradient reduction of one backward pass."""

    def __init__(self, buckets: list[Bucket]) -> None:
        self.flats: dict[int, np.ndarray] = {}
        self.delivered: list[set[int]] = [set() for _ in buckets]
        self.requests: dict[int, Any] = {}
        self.launched = 0  # buckets start strictly in index order: the same collective order on every rank


class DataParallel:
    """Wrap a model (anything with `parameters()` that is called for its forward) for data parallelism.

    `comm_buffer_size` is the bucket size in MB (Paddle's name and default; > 0), `check_every` the steps
    between debug mode's parameter hash checks (>= 1), `digest_every` the steps between logged parameter
    digests (>= 1; at verbosity >= 1). Collective: construct it on every rank, with the same model.
    """

    def __init__(
        self,
        layers: Any,
        comm_buffer_size: float = 25,
        *,
        overlap: bool = False,
        debug: bool | None = None,
        check_every: int = 10,
        digest_every: int = 1,
    ) -> None:
        _check_arguments(comm_buffer_size, check_every, digest_every)
        self._layers = layers
        self.params: list[Tensor] = list(layers.parameters())  # frozen ones too: replicas must agree on all
        trainable = [p for p in self.params if not p.stop_gradient]
        self.overlap = overlap
        self.debug = read_env("DISTVLOG_DP_DEBUG", env_boolean, False) if debug is None else bool(debug)
        self.check_every = check_every
        self.digest_every = digest_every
        self.step = -1
        self.comm = comm_mod.world().Dup()
        self.world_size = self.comm.size
        self._checks = Checks(_checks_comm(), self.params, next(_numbers))
        self.buckets = make_buckets(trainable, max(1, int(comm_buffer_size * MB)))
        self._reduction: _Reduction | None = None
        self._sync = True
        # always: a mismatched model would hang the broadcast, debug mode on some ranks only the first allreduce
        self._checks.before("the initial broadcast" + (" in debug mode" if self.debug else ""), self.step)
        _state["debug"] = _state["debug"] or self.debug
        self._broadcast()
        for bucket in self.buckets:
            for i, param in enumerate(bucket.params):
                param.register_post_accumulate_grad_hook(self._hook(bucket, i))
        index = {id(p): i for i, p in enumerate(self.params)}
        _log.vlog(
            1,
            PARAMETER_LAYOUT,
            names=[p.name for p in self.params],
            buckets=[[index[id(p)] for p in bucket.params] for bucket in self.buckets],
        )
        _live.add(self)

    # -- the wrapped model -------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The model's forward; a training forward (grad enabled) starts the next step."""
        if is_grad_enabled():
            self._abandon_reduction()
            self.step += 1
            dlog.bind_context(step=self.step)
            self._log_parameters()
            if self.debug and self.step and self.step % self.check_every == 0:
                self.check_parameters()
        return self._layers(*args, **kwargs)

    forward = __call__

    def parameters(self) -> list[Tensor]:
        return self._layers.parameters()

    def __getattr__(self, name: str) -> Any:
        if name == "_layers":  # not set yet: construction failed
            raise AttributeError(name)
        return getattr(self._layers, name)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside keep their gradients local (gradient accumulation); the first backward
        after it averages everything accumulated."""
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def check_parameters(self) -> str:
        """Collective: a digest of all parameters; raises DataParallelError naming the parameters and
        ranks when the replicas are not bit-identical."""
        # always: on the shared communicator another allgather (a check, dv.finalize()'s) may meet this one
        self._checks.before("parameter hash", self.step)
        digest = self._checks.parameters(self.step)
        _log.vlog(1, "parameters identical", digest=digest, params=len(self.params))
        return digest

    def _log_parameters(self, final: bool = False) -> None:
        """The `parameters` record of the step starting now (of the parameters the last step left, `final`)."""
        if not _log.vlog_is_on(1) or final and self.step < 0:
            return
        step = self.step + 1 if final else self.step
        if final or step % self.digest_every == 0:
            digests = [checksum(p.numpy()) for p in self.params]
            _log.vlog(1, PARAMETERS, step=step, digests=digests, **({"final": True} if final else {}))
        else:
            _log.vlog(1, PARAMETERS, step=step)

    # -- broadcast and reduction -------------------------------------------------------------------
    def _broadcast(self) -> None:
        nbytes = sum(p.numpy().nbytes for p in self.params)
        _log.vlog(1, "broadcast parameters begin", params=len(self.params), bytes=nbytes)
        for param in self.params:
            self.comm.Bcast(param.numpy(), root=0)
        _log.vlog(1, "broadcast parameters end", params=len(self.params), buckets=len(self.buckets))

    def _hook(self, bucket: Bucket, i: int) -> Callable[[Tensor], None]:
        def on_accumulated(param: Tensor) -> None:
            if not self._sync:
                return
            reduction = self._reduction
            if reduction is None:
                reduction = self._reduction = _Reduction(self.buckets)
                queue_callback(self._finish)
            if self.overlap:
                self._deliver(reduction, bucket, i, param.grad.numpy())

        return on_accumulated

    def _deliver(self, reduction: _Reduction, bucket: Bucket, i: int, grad: np.ndarray) -> None:
        """Overlap mode: put the parameter's accumulated gradient into its bucket, and start every bucket
        that is complete and next in order."""
        flat = reduction.flats.get(bucket.index)
        if flat is None:
            flat = reduction.flats[bucket.index] = bucket.buffer()
        bucket.put(flat, i, grad)
        reduction.delivered[bucket.index].add(i)
        while reduction.launched < len(self.buckets) and len(reduction.delivered[reduction.launched]) == len(
            self.buckets[reduction.launched].params
        ):
            self._launch(reduction, self.buckets[reduction.launched])

    def _launch(self, reduction: _Reduction, bucket: Bucket) -> None:
        from mpi4py import MPI

        flat = reduction.flats.get(bucket.index)
        if flat is None or len(reduction.delivered[bucket.index]) < len(bucket.params):
            # not filled by hooks (overlap off, or parameters without a gradient): backward is over, so
            # every `.grad` holds its accumulated value now
            flat = reduction.flats[bucket.index] = bucket.pack(bucket.buffer())
        if self.debug:
            bad = nonfinite_text(bucket, flat, self.step, self.comm.rank)
            self._checks.before(f"allreduce of bucket {bucket.index}", self.step, bad)
        if _log.vlog_is_on(1):
            local = bucket.gradients(flat)
            _log.vlog(
                1,
                ALLREDUCE_BEGIN,
                step=self.step,
                bucket=bucket.index,
                bytes=bucket.nbytes,
                checksum=checksum(local),
                norm=_norm(local),
            )
        if self.overlap:
            reduction.requests[bucket.index] = self.comm.Iallreduce(MPI.IN_PLACE, flat, MPI.SUM)
        else:
            started = time.perf_counter()
            self.comm.Allreduce(MPI.IN_PLACE, flat, MPI.SUM)
            self._complete(bucket, flat, time.perf_counter() - started)
        reduction.launched += 1

    def _finish(self) -> None:
        """End of backward: start the buckets not started yet, wait for the started ones."""
        reduction = self._reduction
        while reduction.launched < len(self.buckets):
            self._launch(reduction, self.buckets[reduction.launched])
        for index, request in reduction.requests.items():
            started = time.perf_counter()
            request.Wait()
            self._complete(self.buckets[index], reduction.flats[index], time.perf_counter() - started)
        self._reduction = None

    def _complete(self, bucket: Bucket, flat: np.ndarray, waited_s: float) -> None:
        """Average a reduced bucket and hand it to the `.grad` of the parameters some rank used."""
        gradients = bucket.gradients(flat)
        gradients /= self.world_size
        if _log.vlog_is_on(1):
            _log.vlog(
                1,
                ALLREDUCE_END,
                step=self.step,
                bucket=bucket.index,
                checksum=checksum(gradients),
                wait_us=round(waited_s * 1e6),
            )
            if _log.vlog_is_on(2):
                for i, param in enumerate(bucket.params):
                    _log.vlog(
                        2,
                        ALLREDUCE_PARAM,
                        step=self.step,
                        bucket=bucket.index,
                        param=param.name,
                        checksum=checksum(bucket.slot(flat, i)),
                    )
        bucket.unpack(flat)

    def _abandon_reduction(self) -> None:
        """A backward that raised left its reduction behind: let its started collectives finish (every
        rank started them) and forget it."""
        reduction, self._reduction = self._reduction, None
        if reduction is not None:
            for request in reduction.requests.values():
                request.Wait()


def _norm(a: np.ndarray) -> float:
    """L2 norm; in float64 when the dtype's own sum of squares overflows (an exploding gradient) or is not
    finite (NaN stays NaN, an Inf gives inf)."""
    square = float(a.dot(a)) if a.size else 0.0
    if not math.isfinite(square):
        square = float(np.dot(a.astype(np.float64), a.astype(np.float64)))
    return math.sqrt(square)
