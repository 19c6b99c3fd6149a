"""`paddle.base.core`: `set_vlog_level(level or {module: level})`, for the whole process from now on."""

from ..logger import set_vlog_level

__all__ = ["set_vlog_level"]
