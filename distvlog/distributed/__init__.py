"""Data-parallel training on MPI: `init`/`finalize`, rank queries, `DataParallel`, and the exit rules of a
job of several ranks (`job`).

Every name is imported on first use (PEP 562): the logger installs the job's exit rules as it is imported,
and `job` needs nothing of the rest; DataParallel loads the numpy engine, which the PyTorch adapter's use
of this package (run ids, clock offsets) does not need.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {  # name -> the module that defines it
    **dict.fromkeys(("agree_on_run", "finalize", "get_rank", "get_world_size", "init", "is_initialized"), ".session"),
    **dict.fromkeys(("DataParallel", "DataParallelError"), ".parallel"),
}


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_FROM[name], __name__), name)
    globals()[name] = value  # later uses are plain attribute reads
    return value


__all__ = sorted(_FROM)
