"""distvlog's logging backend: structlog pipeline, glog / JSON-lines renderers, one file per rank.

What other packages use is here: loggers and verbosity (`level_for`; a logger's `vlog_is_on` checks the
highest level in force first), settings from the environment (`read_env`: a bad value is named once, never
fatal), the rank's identity and file, the engine's batch line writer (`LineWriter`, with
`SINK.signals_held` around a node's lines), the records the launcher writes about a rank's end, and whether
a frame is distvlog's or the user's (`is_distvlog_file`, `PACKAGE_DIR`), and `vlog_rules.ceiling` for code
that skips work below it without a call."""

from __future__ import annotations

from . import _lifecycle, _stacks
from . import _rules as vlog_rules  # `vlog_rules.ceiling`: the highest level any rule in force allows
from ._clock import now_us
from ._env import LAUNCHER_VARS, SETTINGS_SAID
from ._env import boolean as env_boolean
from ._env import read as read_env
from ._env import seconds as env_seconds
from ._identity import IDENTITY, rank_from_env
from ._lifecycle import (
    FLUSH_INTERVAL_S,
    SIGNAL_GRACE_S,
    log_at,
    log_end,
    log_failure,
    log_interrupt,
)
from ._logger import LineWriter, Logger, add_processor, bind_context, get_logger, unbind_context
from ._processors import PACKAGE_DIR, code_site, is_distvlog_file
from ._rules import level_for, set_vlog_level, vlog_guard
from ._rundir import default_run_id, log_dir
from ._sink import SINK, append_record, content_size, trim_if_writer_gone, trim_reserve
from ._stdlib import capture_stdlib

_lifecycle.install()
_stacks.install()


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
    "FLUSH_INTERVAL_S",
    "IDENTITY",
    "LAUNCHER_VARS",
    "SETTINGS_SAID",
    "PACKAGE_DIR",
    "SIGNAL_GRACE_S",
    "SINK",
    "LineWriter",
    "append_record",
    "Logger",
    "add_processor",
    "bind_context",
    "capture_stdlib",
    "code_site",
    "configure",
    "content_size",
    "default_run_id",
    "env_boolean",
    "env_seconds",
    "flush",
    "get_logger",
    "is_distvlog_file",
    "level_for",
    "log_at",
    "log_end",
    "log_dir",
    "log_failure",
    "log_file_path",
    "log_interrupt",
    "now_us",
    "rank_from_env",
    "read_env",
    "set_vlog_level",
    "trim_if_writer_gone",
    "trim_reserve",
    "unbind_context",
    "vlog_guard",
    "vlog_rules",
]
