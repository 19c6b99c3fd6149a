"""`distvlog diff RUN_A RUN_B` on two `distvlog.torch` runs of launch/train_torch.py under torchrun (gloo,
CPU): the same command twice is bitwise identical, and the numerics changed from step 2 depart within
rounding there, at a guarded node."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the PyTorch adapter's tests need torch (CI installs torch==2.13.0)")

from test_ddp import TRAIN, _run, cli, torchrun  # noqa: E402

BASE = ("--data", "synthetic", "--steps", "4", "--lr", "0.01")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The run directory of each job (2 ranks): twice the same command, then a departure from it."""
    found = {}
    for name, extra in (
        ("base", ()),
        ("again", ()),
        ("numerics", ("--inject-numerics-step", "2")),
    ):
        logs = tmp_path_factory.mktemp(name) / "logs"
        proc = _run(torchrun(2, TRAIN, *BASE, *extra), logs)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (found[name],) = [p for p in logs.iterdir() if p.is_dir() and not p.is_symlink()]
    return found


def diff(runs: dict[str, Path], b: str) -> subprocess.CompletedProcess:
    return cli("diff", runs["base"], runs[b], logs=runs["base"].parent)


def test_the_same_torch_command_twice_is_bitwise_identical(runs):
    proc = diff(runs, "again")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1].startswith(
        "bitwise identical: every value compared is equal: ranks 0,1, steps 0-4: 60 parameter digests, 8 losses, "
    ), proc.stdout


def test_torch_numerics_changed_from_step_2_departs_within_rounding_at_a_guarded_node(runs):
    proc = diff(runs, "numerics")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.match(
        r"departs within rounding at step 2: node \w+GradNode grad_\w+ \(forward at train_torch.py:\d+\) on ranks? ",
        proc.stdout.splitlines()[1],
    ), proc.stdout
