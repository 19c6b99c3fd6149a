from __future__ import annotations

import pytest

from distvlog.logger import _rules


@pytest.fixture(autouse=True)
def quiet_global_verbosity(monkeypatch):
    """Every test starts at verbosity 0 with no vmodule patterns, and leaves the rules as it found them."""
    monkeypatch.setattr(_rules, "_process", _rules.Rules())
    _rules._update_ceiling()
    yield
    monkeypatch.undo()
    _rules._update_ceiling()
