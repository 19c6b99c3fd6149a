"""distvlog: debug data-parallel training from per-rank logs.

`import distvlog as dv` gives Paddle's eager-mode names (`dv.to_tensor`, `dv.matmul`, `dv.grad`, ...), the
backward guards, the per-rank logger and, under MPI, data parallelism.

Every name is imported on first use (PEP 562): `distvlog merge` of a small run needs neither numpy's
autograd engine nor the logger, and the command's start-up is most of its time.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__version__ = "0.1.0"

_FROM: dict[str, str] = {  # name -> the module that defines it
    **dict.fromkeys(("float16", "float32", "float64", "int32", "int64"), "numpy"),  # dtype names as in paddle
    **dict.fromkeys(("DataParallel", "finalize", "get_rank", "get_world_size", "init"), ".distributed"),
    **dict.fromkeys(("capture_stdlib", "configure", "flush", "get_logger", "set_vlog_level", "vlog_guard"), ".logger"),
}
_SUBPACKAGES = {  # paddle.optimizer is optim; base and utils: Paddle's import paths for the guards
    "base": ".base",
    "nn": ".nn",
    "optim": ".optim",
    "optimizer": ".optim",
    "utils": ".utils",
}


def _autograd() -> Any:
    return importlib.import_module(".autograd", __name__)


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        value = importlib.import_module(_SUBPACKAGES[name], __name__)
    elif name in _FROM:
        value = getattr(importlib.import_module(_FROM[name], __name__), name)
    elif name == "__all__":
        value = sorted([*_autograd().__all__, *_FROM.keys() - {"float16", "float32", "float64", "int32", "int64"}])
        value += sorted(_SUBPACKAGES)
    elif _is_submodule(name):  # `from distvlog import format`: the import system loads it on this error
        raise AttributeError(name)
    elif not name.startswith("__") and name in _autograd().__all__:
        value = getattr(_autograd(), name)
    else:
        raise AttributeError(f"module 'distvlog' has no attribute {name!r}")
    globals()[name] = value  # later uses are plain attribute reads
    return value


def _is_submodule(name: str) -> bool:
    here = os.path.dirname(__file__)
    return os.path.exists(os.path.join(here, f"{name}.py")) or os.path.isdir(os.path.join(here, name))


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
