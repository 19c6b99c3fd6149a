"""distvlog's logging backend: structlog pipeline, glog / JSON-lines renderers, one file per rank."""

from __future__ import annotations

from . import _lifecycle
from ._identity import IDENTITY
from ._logger import Logger, add_processor, bind_context, get_logger, unbind_context
from ._rules import level_for, set_vlog_level, vlog_guard
from ._sink import SINK
from ._stdlib import capture_stdlib

_lifecycle.install()


def flush() -> None:
    """Write everything buffered so far to this rank's file."""
    SINK.flush()


def configure(*, format: str | None = None, log_dir: str | None = None, run_id: str | None = None) -> None:
    """Choose the file format (`glog` | `jsonl`), log root and run id before the first record."""
    from ._logger import use_renderer_of_sink

    SINK.configure(fmt=format, log_dir=log_dir, run_id=run_id)
    use_renderer_of_sink()


def log_file_path():
    """This rank's log file (None until the first record)."""
    return SINK.path


__all__ = [
    "IDENTITY",
    "Logger",
    "add_processor",
    "bind_context",
    "unbind_context",
    "capture_stdlib",
    "configure",
    "flush",
    "get_logger",
    "level_for",
    "log_file_path",
    "set_vlog_level",
    "vlog_guard",
]
