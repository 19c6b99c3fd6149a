"""ruff skips folders it takes for build output (`dist`, `build`, `.venv`, ...): these tests fail when a tracked
Python file escapes the lint or the format check, so a folder's name can never hide code from CI again."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout"
)


def _tracked_python() -> set[str]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.split())


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_reads_every_tracked_python_file() -> None:
    shown = _ruff("check", "--show-files", ".").stdout.splitlines()
    read = {str(Path(line).resolve().relative_to(ROOT)) for line in shown if line.endswith(".py")}
    assert _tracked_python() - read == set(), "tracked files ruff's discovery skips"


def test_every_tracked_python_file_passes_lint_and_format() -> None:
    files = sorted(_tracked_python())
    check = _ruff("check", "--no-cache", *files)
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _ruff("format", "--check", "--no-cache", *files)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
