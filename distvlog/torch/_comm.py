"""distvlog's own traffic over torch.distributed, in the shape of the mpi4py communicator our session code
uses (`rank`, `size`, `bcast`, `Send`, `Recv`, `Irecv(...).Test()` on numpy buffers): the clock offsets and
the run id go over torch's process group, so a torchrun job needs no MPI. It runs on a gloo group of its
own (also under NCCL, whose point-to-point calls need GPU tensors): never matched with the user's calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist


class _Request:
    """A receive in flight. Gloo's says it is complete only once waited for, and its wait blocks without
    spinning (the reason the session code polls MPI's): so Test waits."""

    def __init__(self, work: Any) -> None:
        self.work = work

    def Test(self) -> bool:  # noqa: N802 (mpi4py's name)
        self.work.wait()
        return True


class TorchComm:
    """A gloo process group of all ranks, spoken to as the session code speaks to an mpi4py communicator."""

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo")  # collective: every rank creates it, in the same order
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=root, group=self.group)
        return box[0]

    def Send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:  # noqa: N802
        dist.send(torch.from_numpy(buf), dest, group=self.group, tag=tag)

    def Recv(self, buf: np.ndarray, source: int, tag: int = 0) -> None:  # noqa: N802
        dist.recv(torch.from_numpy(buf), source, group=self.group, tag=tag)  # (into buf: from_numpy shares it)

    def Irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> _Request:  # noqa: N802
        return _Request(dist.irecv(torch.from_numpy(buf), source, group=self.group, tag=tag))

    def Barrier(self) -> None:  # noqa: N802
        dist.barrier(group=self.group)
