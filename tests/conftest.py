"""Shared by every test: in-process logs go to a temporary directory, never into the checkout."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("DISTVLOG_LOG_DIR", tempfile.mkdtemp(prefix="distvlog-tests-"))
