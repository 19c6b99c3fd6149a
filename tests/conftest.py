"""Shared by every test: in-process logs go to a temporary directory, never into the checkout; the records a
test logs (`records`); the `distvlog` command run in-process (`cli`)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest

os.environ.setdefault("DISTVLOG_LOG_DIR", tempfile.mkdtemp(prefix="distvlog-tests-"))


@pytest.fixture
def records():
    """The records distvlog logs during the test, as event dicts (captured just before rendering)."""
    import distvlog as dv
    from distvlog.logger import _logger as logger_mod

    captured: list[dict[str, Any]] = []

    def capture(_logger: object, _method: str, ed: dict[str, Any]) -> dict[str, Any]:
        captured.append(dict(ed))
        return ed

    dv.logger.add_processor(capture)
    try:
        yield captured
    finally:
        logger_mod.PROCESSORS.remove(capture)


@pytest.fixture
def cli(capfd):
    """cli(*args) -> (exit code, stdout, stderr) of `distvlog ARGS`, run in this process."""
    from distvlog.cli import main

    def run(*args) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out = capfd.readouterr()
        return code, out.out, out.err

    return run
