"""distvlog: debug data-parallel training from per-rank logs.

`import distvlog as dv` gives Paddle's eager-mode names (`dv.to_tensor`, `dv.matmul`, `dv.grad`, ...), the
backward guards, the per-rank logger and, under MPI, data parallelism.
"""

from numpy import float16, float32, float64, int32, int64  # noqa: F401  (dtype names as in paddle)

from . import base, nn, optim, utils
from .autograd import *  # noqa: F401,F403
from .autograd import __all__ as _autograd_all
from .dist import DataParallel, finalize, get_rank, get_world_size, init
from .logger import capture_stdlib, configure, flush, get_logger, set_vlog_level, vlog_guard

__version__ = "0.1.0"
__all__ = [
    *_autograd_all,
    "DataParallel",
    "base",
    "capture_stdlib",
    "configure",
    "finalize",
    "flush",
    "get_logger",
    "get_rank",
    "get_world_size",
    "init",
    "nn",
    "optim",
    "optimizer",
    "set_vlog_level",
    "utils",
    "vlog_guard",
]
optimizer = optim  # paddle.optimizer
