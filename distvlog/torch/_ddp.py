"""`log_ddp(model)`: what a DistributedDataParallel job logs for `distvlog diff`, the records DataParallel
writes on MPI, with the same names and fields:

- `parameter layout names=[...] buckets=[[...], ...]`: the parameters in order, and which of them each
  allreduce bucket holds (again when DDP rebuilds its buckets, after the first step);
- `parameters step=S digests=[...]`: an XXH3 digest of every parameter as step S starts (`final=True` at
  `finalize()`); replicas must be bit-identical, so the first step whose digests differ brackets the
  update that parted them;
- per bucket, `allreduce begin step=S bucket=B bytes=N checksum=C norm=X` (this rank's gradients going in)
  and `allreduce end step=S bucket=B checksum=C wait_us=W` (the result, and the time from launch to result).

All of them through DDP's one comm hook, which wraps the default allreduce or the user's own hook
(compression, PowerSGD). A step is an optimizer step: it ends with the allreduce of the last bucket, so
forward passes under `no_sync()` belong to the step whose gradients they accumulate into. The step is
bound to the records of the thread that runs the forward (`step=`, as DataParallel binds it), and written
explicitly into the allreduce records, which torch may complete on a thread of its own.
"""

import time
import weakref
from typing import Any

import numpy as np
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from ..checksum import checksum
from ..format import ALLREDUCE_BEGIN, ALLREDUCE_END
from ..logger import bind_context, get_logger
from ._device import PENDING, on_device
from ._nodelog import as_array, name_leaves, report_failure

PARAMETER_LAYOUT, PARAMETERS = "parameter layout", "parameters"
_log = get_logger("distvlog.torch.ddp")
_watched: "weakref.WeakSet[_Watch]" = weakref.WeakSet()  # their last digests at finalize()


class _Watch:
    """One DDP model's logging state: its parameters, the steps, the buckets as last seen."""

    def __init__(self, model: DistributedDataParallel, digest_every: int) -> None:
        named = list(model.module.named_parameters())
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.index = {id(p): i for i, p in enumerate(self.params)}
        self.digest_every = digest_every
        self.step = 0  # optimizer steps done: the step the next forward belongs to
        self.started = -1  # the last step whose start was logged
        self.buckets: dict[int, list[int]] = {}
        self.layout: list[list[int]] | None = None

    def forward_pre_hook(self, module: Any, args: Any) -> None:
        """A forward: the first of a step binds the step and logs the parameters' digests."""
        try:
            if self.step != self.started:
                self.started = self.step
                bind_context(step=self.step)
                self.log_parameters()
        except Exception as exc:
            report_failure("DDP forward hook", exc)

    def log_parameters(self, final: bool = False) -> None:
        extra = {"final": True} if final else {}
        if self.params and on_device(self.params[0]) and (final or self.step % self.digest_every == 0):
            step = self.step
            PENDING.submit(
                self.params,
                lambda got: _log.vlog_at(1, PARAMETERS, step=step, digests=[v.checksum for v in got], **extra),
            )
            if final:
                PENDING.drain(wait=True)
        elif final or self.step % self.digest_every == 0:
            digests = [checksum(as_array(p)) for p in self.params]
            _log.vlog_at(1, PARAMETERS, step=self.step, digests=digests, **extra)
        else:
            _log.vlog_at(1, PARAMETERS, step=self.step)

    def see_bucket(self, bucket: Any) -> None:
        """Log the layout when a round of buckets shows one not seen before (DDP's rebuild)."""
        members = [self.index.get(id(p), -1) for p in bucket.parameters()]
        self.buckets[bucket.index()] = members
        if bucket.is_last():
            layout = [self.buckets[i] for i in sorted(self.buckets)]
            if layout != self.layout:
                self.layout = layout
                _log.vlog_at(1, PARAMETER_LAYOUT, names=self.names, buckets=layout)
            self.buckets = {}


def _norm(a: np.ndarray) -> float:
    """L2 norm; in float64 when the dtype's own sum of squares overflows or is not finite."""
    square = float(a.dot(a)) if a.size else 0.0
    if not np.isfinite(square):
        wide = a.astype(np.float64)
        square = float(wide.dot(wide))
    return float(np.sqrt(square))


def _begin(step: int, bucket: int, size: int, digest: str, norm: float) -> None:
    _log.vlog_at(1, ALLREDUCE_BEGIN, step=step, bucket=bucket, bytes=size, checksum=digest, norm=norm)


def _end(step: int, bucket: int, digest: str, wait_us: int) -> None:
    _log.vlog_at(1, ALLREDUCE_END, step=step, bucket=bucket, checksum=digest, wait_us=wait_us)


def _logged(watch: _Watch, hook: Any) -> Any:
    """The comm hook DDP gets: `hook`'s allreduce between a begin and an end record."""

    def logged_allreduce(state, bucket):  # (no annotations: DDP checks the hook's signature against its types)
        step, index = watch.step, bucket.index()
        started = time.perf_counter()
        try:
            watch.see_bucket(bucket)
            buffer = bucket.buffer()
            if on_device(buffer):  # logged when the device's statistics arrive: no sync here
                size = buffer.numel() * buffer.element_size()
                PENDING.submit([buffer], lambda got: _begin(step, index, size, got[0].checksum, got[0].norm))
            else:
                local = as_array(buffer).reshape(-1)
                _begin(step, index, local.nbytes, checksum(local), _norm(local))
            if bucket.is_last():
                watch.step += 1
        except Exception as exc:
            report_failure("DDP comm hook", exc)

        def done(fut: torch.futures.Future) -> torch.Tensor:
            result = fut.value()  # (raises if the allreduce failed: DDP reports it)
            try:
                wait_us = round((time.perf_counter() - started) * 1e6)
                if on_device(result):
                    PENDING.submit([result], lambda got: _end(step, index, got[0].checksum, wait_us))
                else:
                    _end(step, index, checksum(as_array(result)), wait_us)
            except Exception as exc:
                report_failure("DDP comm hook", exc)
            return result

        return hook(state, bucket).then(done)

    return logged_allreduce


def log_ddp(
    model: DistributedDataParallel, hook: Any = None, state: Any = None, *, digest_every: int = 1
) -> DistributedDataParallel:
    """Log what `distvlog diff` needs of a DDP model (see the module docstring) and name its parameters in
    the guard's dumps. DDP takes one comm hook per model: pass yours as `hook` (with its `state`) and it
    runs inside ours; default: DDP's own allreduce. Returns the model."""
    if not isinstance(model, DistributedDataParallel):
        raise TypeError(f"log_ddp: expected a DistributedDataParallel model, got {type(model).__name__}")
    if isinstance(digest_every, bool) or not isinstance(digest_every, int) or digest_every < 1:
        raise ValueError(f"log_ddp: digest_every must be an integer >= 1, got {digest_every!r}")
    if getattr(model, "_comm_hooks", None):
        raise RuntimeError(_ONE_HOOK)
    if hook is None:
        hook, state = default_hooks.allreduce_hook, model.process_group if state is None else state
    watch = _Watch(model, digest_every)
    try:
        model.register_comm_hook(state, _logged(watch, hook))
    except RuntimeError as exc:
        if "only be called once" in str(exc):
            raise RuntimeError(_ONE_HOOK) from None
        raise
    name_leaves(model.module.named_parameters())
    model.register_forward_pre_hook(watch.forward_pre_hook)
    _watched.add(watch)
    return model


_ONE_HOOK = (
    "log_ddp: this model has a comm hook already, and DDP takes one per model: register yours through "
    "log_ddp(model, hook=your_hook, state=your_state) instead of model.register_comm_hook(your_state, your_hook), "
    "and distvlog runs it inside its own"
)


def log_final_digests() -> None:
    """The digests of every watched model's parameters after its last step (`final=True`)."""
    for watch in list(_watched):
        if watch.started >= 0:
            watch.log_parameters(final=True)
    PENDING.drain(wait=True)
