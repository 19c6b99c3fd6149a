"""Fixtures for the logger's tests: scripts run in fresh processes with their own log directory, and
in-process VLOG rules restored after each test."""

from __future__ import annotations

import pytest
from logger_testkit import Scripts

from distvlog.logger import _env, _rules


@pytest.fixture
def scripts(tmp_path) -> Scripts:
    """scripts.run(code, env={...}) runs `code` as tmp_path/script.py in a fresh process logging to
    tmp_path/logs; scripts.start(...) starts it for signal tests."""
    return Scripts(tmp_path)


@pytest.fixture
def fresh_rules():
    """Verbosity 0 and no vmodule for this process while the test runs; the previous rules after it."""
    saved = _rules._process
    _rules._process = _rules.Rules()
    _rules._update_ceiling()
    yield _rules
    _rules._process = saved
    _rules._update_ceiling()


@pytest.fixture
def env_warnings(monkeypatch, capsys):
    """env_warnings() is what the environment reader wrote to stderr so far: a fresh process's warnings
    (values warned about before this test are warned about again)."""
    monkeypatch.setattr(_env, "_warned", set())
    return lambda: capsys.readouterr().err.splitlines()
