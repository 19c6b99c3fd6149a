"""Route Python `logging` records of other libraries into this rank's file, with the same prefix."""

from __future__ import annotations

import logging

from ._logger import get_logger


class _Bridge(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "_distvlog_bridged", False):
            return  # captured on a logger and on one of its ancestors: the record reaches us twice
        record._distvlog_bridged = True
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            fields = {
                "file": record.filename,
                "line": record.lineno,
                "ts": int(record.created * 1e6),
                "logger": record.name,
            }
            log = get_logger(record.name)
            if record.levelno >= logging.CRITICAL:
                log.critical(message, **fields)
            elif record.levelno >= logging.ERROR:
                log.error(message, **fields)
            elif record.levelno >= logging.WARNING:
                log.warning(message, **fields)
            elif record.levelno >= logging.INFO:
                log.info(message, **fields)
            else:  # the stdlib logger already decided DEBUG is wanted: keep it, marked as verbosity 1
                log._vlog(message, v=1, **fields)
        except Exception:
            self.handleError(record)


_bridge = _Bridge()


def capture_stdlib(level: int = logging.INFO, logger: str | None = None) -> None:
    """Send records of the stdlib `logger` (default: the root logger) at `level` and above to distvlog.

    The logger's own level is lowered to `level` if it was higher; its other handlers keep working.
    """
    target = logging.getLogger(logger)
    if _bridge not in target.handlers:
        target.addHandler(_bridge)
    _bridge.setLevel(level)
    if target.getEffectiveLevel() > level:
        target.setLevel(level)
