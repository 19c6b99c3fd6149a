"""`get_logger`: structlog bound loggers with glog severities and `vlog(level, ...)`.

distvlog never calls `structlog.configure`: your own structlog setup stays yours. Our loggers share one
processor chain (`PROCESSORS`), ending in the renderer of the process's log file. `LineWriter` is the
engine's shortcut through that chain for as long as it is distvlog's own, to the same records (but for the
call site and timestamp, which a batch of them shares).
"""

from __future__ import annotations

import functools
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from ..format import PREFIX_FIELDS, V, field_text, pairs_of
from . import _rules
from ._clock import SKEW_PER_RANK_US, now_us
from ._identity import IDENTITY
from ._processors import CONTEXT, SEVERITY, add_record_fields, caller_site, skip_frames_of, thread_id
from ._render import GlogRenderer, salvage
from ._sink import SINK

Processor = Callable[[Any, str, dict], Any]
PROCESSORS: list[Processor] = [add_record_fields, SINK.renderer]


class _ModuleLogger:
    """The object structlog wraps: a module name (for vmodule) and the sink's write methods."""

    __slots__ = ("name", "info", "vlog", "warning", "error", "critical")

    def __init__(self, name: str, echo: bool = True) -> None:
        self.name = name
        self.info = self.vlog = SINK.write
        self.warning = self.error = self.critical = (
            SINK.write_urgent if echo else functools.partial(SINK.write_urgent, echo=False)
        )


def _emitter(method: str) -> Callable[..., None]:
    """One log method: structlog's processor chain, without re-packing keyword arguments on the hot path
    (the methods are generated, as structlog's own filtering loggers are, to save a call per record).

    While the chain is distvlog's own (`add_record_fields`, then glog text) and no field is one of the
    record's own, the record is rendered here, with the same fields in the same order as the chain would
    (the caller's, then `bind_context`'s not among them): no event dict is built and two calls are saved."""
    severity = SEVERITY[method]

    def emit(self: Logger, event: Any = None, **fields: Any) -> None:
        ed = {**self._context, **fields} if self._context else fields
        try:
            processors = self._processors
            renderer = processors[-1]
            ctx = CONTEXT.get()
            if (
                len(processors) == 2
                and type(renderer) is GlogRenderer
                and processors[0] is add_record_fields
                and PREFIX_FIELDS.isdisjoint(ed)
                and (not ctx or PREFIX_FIELDS.isdisjoint(ctx))
            ):
                file, line = caller_site(sys._getframe(1))
                rank = IDENTITY.rank
                ed = renderer.records(
                    # (now_us(), inlined: a call costs more than this line)
                    time.time_ns() // 1000 + (rank * SKEW_PER_RANK_US if SKEW_PER_RANK_US else 0),
                    severity,
                    thread_id(),
                    file,
                    line,
                    rank,
                    ((event, pairs_of(ed) + pairs_of(ctx, ed) if ctx else pairs_of(ed)),),
                )
            else:
                ed["event"] = event
                for processor in processors:
                    ed = processor(self._logger, method, ed)
                if type(ed) is not bytes:  # a user renderer that returns text
                    ed = (ed if isinstance(ed, str) else str(ed)).encode() + b"\n"
        except structlog.DropEvent:
            return
        except Exception as exc:  # a log call never raises: what could not be rendered becomes placeholders
            ed = salvage(SINK.renderer, {**self._context, **fields}, event, method, exc)
        getattr(self._logger, method)(ed)

    emit.__name__ = emit.__qualname__ = method
    return emit


class Logger(structlog.BoundLoggerBase):
    """A bound logger: `info/warning/error/critical`, `debug` (= vlog 1) and `vlog(level, event, **fields)`."""

    info = _emitter("info")
    warning = _emitter("warning")
    error = _emitter("error")
    critical = _emitter("critical")
    _vlog = _emitter("vlog")

    def exception(self, event: Any = None, **fields: Any) -> None:
        """An error record with the current exception's traceback as continuation lines."""
        self.error(f"{event or ''}\n{traceback.format_exc().rstrip()}", **fields)

    def vlog(self, level: int, event: Any = None, **fields: Any) -> None:
        """glog's VLOG(level): logged when the module's verbosity is at least `level`."""
        try:
            if level > _rules.ceiling or level > _rules.level_for(self._logger.name):
                return
        except TypeError:  # (a try costs nothing on the disabled path; a check would)
            raise TypeError(f"vlog: the level must be an int, got {type(level).__name__} {level!r}") from None
        self._vlog(event, v=level, **fields)

    def vlog_at(self, level: int, event: Any = None, **fields: Any) -> None:
        """Write a VLOG record of `level` without consulting the rules: the caller has decided (the engine,
        for a node tagged by backward_vlog_guard)."""
        self._vlog(event, v=level, **fields)

    def debug(self, event: Any = None, **fields: Any) -> None:
        self.vlog(1, event, **fields)

    def vlog_is_on(self, level: int) -> bool:
        """glog's VLOG_IS_ON: check before building an expensive message."""
        return level <= _rules.ceiling and level <= _rules.level_for(self._logger.name)

    warn = warning
    fatal = critical


class LineWriter:
    """The lines of one hot loop (the engine's, for one tagged node): for each record `(v, event, extra)` with
    `v <= level`, what `logger.bind(**fields).vlog_at(v, event, **extra)` writes.

    `lines(records)` writes records made together (a node's lines at its begin, or at its finish). While the
    chain is distvlog's own (no added processor, glog format), the bound fields are rendered once and the
    batch is rendered in one pass, with one call site and one timestamp, in one write to the sink. When a
    field would shadow another or set one of the record's own (`ts`, `file`...), or the chain is not
    distvlog's, each record is that very call."""

    __slots__ = ("_logger", "level", "_context", "_fast", "_bound", "_ctx")

    def __init__(self, logger: Logger, level: int, **fields: Any) -> None:
        self._logger = logger
        self.level = level
        self._context = {**logger._context, **fields}  # what bind() would hold (bound on the generic path only)
        self._fast = PREFIX_FIELDS.isdisjoint(self._context) and V not in self._context
        self._bound = pairs_of(self._context) if self._fast else ""  # (v follows them)
        # bind_context's dict, its rendering (None when it sets a core field) and the fields a record's own
        # may not shadow
        self._ctx: tuple[dict | None, str | None, frozenset[str]] = (None, None, frozenset())

    def lines(self, records: Sequence[tuple[int, Any, dict[str, Any] | None]]) -> None:
        """Write each `(v, event, extra fields or None)` whose `v` is at most the writer's level."""
        ctx = CONTEXT.get()
        cached = self._ctx
        if cached[0] is not ctx:
            cached = self._ctx = (ctx, self._render_context(ctx), PREFIX_FIELDS.union(self._context, ctx, (V,)))
        _, tail, taken = cached
        processors = self._logger._processors
        renderer = processors[-1]
        level = self.level
        if tail is not None and self._fast and len(processors) == 2 and type(renderer) is GlogRenderer:
            bound, items = self._bound, []
            for v, event, extra in records:
                if v > level:
                    continue
                if not extra:
                    items.append((event, f"{bound}{_V_FIELD}{v}{tail}"))
                elif taken.isdisjoint(extra):  # every other field stays as it is
                    items.append((event, f"{bound}{_V_FIELD}{v}{pairs_of(extra)}{tail}"))
                else:
                    break  # the generic path for the whole batch: the records keep their order
            else:
                if items:
                    file, line = caller_site(sys._getframe(1))
                    self._logger._logger.vlog(
                        renderer.records(now_us(), "I", thread_id(), file, line, IDENTITY.rank, items)
                    )
                return
        for _, _, extra in records:  # (before any is written)
            if extra and not _VLOG_AT_ARGUMENTS.isdisjoint(extra):
                raise TypeError(
                    f"LineWriter.lines: a record's fields cannot be named {sorted(_VLOG_AT_ARGUMENTS & extra.keys())}"
                )
        logger = self._logger.bind(**self._context)
        for v, event, extra in records:
            if v <= level:
                logger.vlog_at(v, event, **extra or {})

    def _render_context(self, ctx: dict[str, Any]) -> str | None:
        """The ` k=v` that `bind_context` adds (fields not already bound); None when it sets a core field."""
        if not PREFIX_FIELDS.isdisjoint(ctx) or V in ctx:
            return None
        return pairs_of(ctx, self._context)


skip_frames_of(Logger.debug, Logger.vlog, Logger.vlog_at, Logger.exception, Logger._vlog, LineWriter.lines)
_VLOG_AT_ARGUMENTS = frozenset({"self", "level", "event", V})
_V_FIELD = field_text(V)
_loggers: dict[str, Logger] = {}


def _module_name(caller_globals: dict[str, Any]) -> str:
    """The caller's module name; for the main script the name it has as a module (`train` for `python
    train.py`, `pkg.train` for `python -m pkg.train`), so that vmodule's `train=2` matches it, as glog's
    vmodule matches the file's basename."""
    name = caller_globals.get("__name__", "__main__")
    if name != "__main__":
        return name
    spec = caller_globals.get("__spec__")
    if spec is not None and spec.name:
        return spec.name
    path = caller_globals.get("__file__")
    return os.path.splitext(os.path.basename(path))[0] if path else name


def get_logger(name: str | None = None, **initial_values: Any) -> Logger:
    """A logger for `name` (default: the calling module) writing to this rank's file. The main script's
    `get_logger(__name__)` is named as the script's module, as `get_logger()` is (vmodule's `train=2`)."""
    if name is None or name == "__main__":
        caller = sys._getframe(1).f_globals
        if name is None or caller.get("__name__") == "__main__":
            name = _module_name(caller)
    logger = _loggers.get(name)
    if logger is None:
        logger = _loggers[name] = Logger(_ModuleLogger(name), PROCESSORS, {})
    return logger.bind(**initial_values) if initial_values else logger


def unechoed_logger(name: str) -> Logger:
    """A logger whose warnings and errors go to the file only (for records Python prints itself)."""
    return Logger(_ModuleLogger(name, echo=False), PROCESSORS, {})


def bind_context(**fields: Any) -> None:
    """Add fields (e.g. `step=12`) to every record logged from this thread / async context on.
    (For structlog's own `bind_contextvars`, add `structlog.contextvars.merge_contextvars` as a processor.)"""
    CONTEXT.set({**CONTEXT.get(), **fields})


def unbind_context(*keys: str) -> None:
    CONTEXT.set({k: v for k, v in CONTEXT.get().items() if k not in keys})


def add_processor(processor: Processor) -> None:
    """Run `processor(logger, method_name, event_dict)` on every record, just before rendering."""
    PROCESSORS.insert(len(PROCESSORS) - 1, processor)


def use_renderer_of_sink() -> None:
    PROCESSORS[-1] = SINK.renderer
