"""distvlog for PyTorch jobs: the backward guard on torch autograd, DDP allreduce logging, the same files.

    import distvlog.torch as dvt

    dvt.init()                          # torchrun, mpirun or distvlog launch: one run, clock offsets
    model = dvt.log_ddp(DDP(model))     # allreduce begin/end per bucket, parameter digests per step
    with dvt.backward_vlog_guard(5):    # the nodes this thread creates inside log Paddle's lines in backward
        h = F.relu(model.fc2(h))
    dvt.set_vlog_level(5)               # or vlog_guard({"engine": 5}): every node logs, as in our engine

An optional extra (`pip install 'distvlog[torch]'`): `import distvlog` never imports torch.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover (CI installs torch)
    raise ImportError(
        "distvlog.torch needs PyTorch: pip install torch (the CPU build: pip install torch "
        "--index-url https://download.pytorch.org/whl/cpu), then pip install 'distvlog[torch]'"
    ) from exc

from ..logger import set_vlog_level, vlog_guard
from ._ddp import log_ddp
from ._dist import InitError, finalize, init, is_initialized
from ._guard import backward_vlog_guard, capture_backward_subgraph_guard
from ._nodelog import name_leaves

__all__ = [
    "InitError",
    "backward_vlog_guard",
    "capture_backward_subgraph_guard",
    "finalize",
    "init",
    "is_initialized",
    "log_ddp",
    "name_leaves",
    "set_vlog_level",
    "vlog_guard",
]
