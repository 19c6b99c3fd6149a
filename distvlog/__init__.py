from .log import get_logger, set_vlog_level, vlog_guard
