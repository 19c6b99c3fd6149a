"""Fixtures for the timeline tools: rank files written by our logger."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools_logfiles import write_run


@pytest.fixture(scope="session")
def glog_run(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("logs"), "glogrun", ranks=4, n=40)


@pytest.fixture(scope="session")
def jsonl_run(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("jlogs"), "jsonrun", ranks=2, n=20, fmt="jsonl")
