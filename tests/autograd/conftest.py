from __future__ import annotations

from typing import Any

import pytest

import distvlog as dv
from distvlog.logger import _logger as logger_mod
from distvlog.logger import _rules


@pytest.fixture
def records():
    """The records distvlog logs during the test, as event dicts (captured just before rendering)."""
    captured: list[dict[str, Any]] = []

    def capture(_logger: object, _method: str, ed: dict[str, Any]) -> dict[str, Any]:
        captured.append(dict(ed))
        return ed

    dv.logger.add_processor(capture)
    try:
        yield captured
    finally:
        logger_mod.PROCESSORS.remove(capture)


@pytest.fixture(autouse=True)
def quiet_global_verbosity(monkeypatch):
    """Every test starts at verbosity 0 with no vmodule patterns, and leaves the rules as it found them."""
    monkeypatch.setattr(_rules, "_process", _rules.Rules())
    _rules._update_ceiling()
    yield
    monkeypatch.undo()
    _rules._update_ceiling()
