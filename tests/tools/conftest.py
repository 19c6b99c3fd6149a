"""Fixtures for the timeline tools: rank files written by our logger, and the CLI run in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools_logfiles import write_run

from distvlog.cli import main


@pytest.fixture(scope="session")
def glog_run(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("logs"), "glogrun", ranks=4, n=40)


@pytest.fixture(scope="session")
def jsonl_run(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("jlogs"), "jsonrun", ranks=2, n=20, fmt="jsonl")


@pytest.fixture
def cli(capfd):
    """cli(*args) -> (exit code, stdout, stderr) of `distvlog ARGS`, run in this process."""

    def run(*args) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out = capfd.readouterr()
        return code, out.out, out.err

    return run
