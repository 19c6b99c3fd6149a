"""`paddle.base` as Paddle code imports it: `base.framework` (the guards) and `base.core` (set_vlog_level).

Thin faces over distvlog's own functions, with distvlog's semantics: guards are per thread and nest as a
stack, `set_vlog_level` is the process's, Paddle's module names map onto distvlog's (see `logger`).
"""

from . import core, framework

__all__ = ["core", "framework"]
