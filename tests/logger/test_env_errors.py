"""A bad value in the environment stops the program at `import distvlog.logger` with one clear line,
instead of logging somewhere or somehow unexpected."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("var, value, message", [
    ("DISTVLOG_V", "verbose", "DISTVLOG_V='verbose' is not an integer"),
    ("GLOG_vmodule", "engine", "GLOG_vmodule: 'engine' is not of the form name=level"),
    ("DISTVLOG_FORMAT", "json", "DISTVLOG_FORMAT='json' is not a log format (choose from ['glog', 'jsonl'])"),
    ("DISTVLOG_FLUSH_INTERVAL", "soon", "DISTVLOG_FLUSH_INTERVAL='soon' is not a positive number of seconds"),
    ("DISTVLOG_FLUSH_INTERVAL", "0", "DISTVLOG_FLUSH_INTERVAL='0' is not a positive number of seconds"),
    ("PMI_RANK", "first", "environment variable PMI_RANK='first' is not an integer"),
])
def test_bad_value_stops_the_program_at_import(scripts, var, value, message):
    run = scripts.run("import distvlog.logger", env={var: value}, rc=1)
    assert run.proc.stderr.strip().splitlines()[-1] == f"ValueError: distvlog: {message}"
