"""distvlog.torch never breaks a training feature: each case's gradients are identical with and without
distvlog (guards at levels 3-6 and the engine's level), and what cannot be read without side effects is said,
not read. Also: importing the adapter leaves the numpy engine unloaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch adapter's tests need torch (CI installs torch==2.13.0)")


def test_importing_the_adapter_leaves_the_numpy_engine_unloaded():
    """The node log and graph dumps are engine-neutral (`distvlog.nodelog`): `import distvlog.torch` loads no
    module of `distvlog.autograd`."""
    code = "import sys, distvlog.torch; print(sorted(m for m in sys.modules if m.startswith('distvlog.autograd')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
