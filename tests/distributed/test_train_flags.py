"""launch/train.py's fault-injection and data flags: refused as argparse refuses (usage, one reason, status
2) when they would be ignored or could never happen; the data it says it trains on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_testkit import TRAIN


def train(tmp_path: Path, *args: str, path: str = "") -> subprocess.CompletedProcess:
    """`python train.py ARGS`, with `path` first on its PYTHONPATH."""
    source = str(Path(TRAIN).parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [path, source])),
        "DISTVLOG_LOG_DIR": str(tmp_path / "logs"),
    }
    return subprocess.run(
        [sys.executable, TRAIN, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--inject-bitflip-step", "1"], "--inject-bitflip-step 1: needs --inject-bitflip-rank"),
        (["--inject-explode-rank", "-1"], "--inject-explode-rank -1: must be at least 0"),
        (
            ["--inject-scale-rank", "0", "--inject-scale-step", "3"],
            "--inject-scale-step 3: beyond the last step, 2 (--steps 3)",
        ),
        (["--inject-graph-rank", "1"], "--inject-graph-step 3 (the default): beyond the last step, 2 (--steps 3)"),
        (["--inject-slow-ms", "5"], "--inject-slow-ms 5: needs --inject-slow-rank"),
        (["--inject-slow-rank", "0", "--inject-slow-ms", "0"], "--inject-slow-ms 0: must be positive"),
        (["--inject-numerics-step", "3"], "--inject-numerics-step 3: must be a step, 0 to 2 (--steps 3)"),
    ],
)
def test_train_refuses_a_fault_flag_that_could_not_act(tmp_path, args, message):
    """Checked before MPI starts: `python train.py` alone says why, in one line after the usage."""
    proc = train(tmp_path, "--steps", "3", *args)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"train.py: error: {message}", proc.stderr


def test_a_fault_rank_beyond_the_world_is_refused_once(run_cli):
    """A rank that does not exist in this job: rank 0 says so once, every rank exits with status 2."""
    proc = run_cli("launch", "-n", "2", TRAIN, "--steps", "3", "--inject-lr-rank", "4")
    assert proc.returncode == 2
    assert proc.stderr.count("train.py: error: --inject-lr-rank 4: beyond the last rank, 1 (2 ranks)\n") == 1, (
        proc.stderr
    )


def test_digits_without_scikit_learn_is_refused(tmp_path):
    """--data digits needs scikit-learn: without it, train.py says so instead of training on other data.
    (Where it is installed, a package of that name that cannot be imported hides it, as a missing one would.)"""
    (tmp_path / "hide" / "sklearn").mkdir(parents=True)
    (tmp_path / "hide" / "sklearn" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    proc = train(tmp_path, "--data", "digits", path=str(tmp_path / "hide"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "train.py: error: --data digits: needs scikit-learn (pip install scikit-learn), or use --data synthetic"
    )


def test_synthetic_data_is_chosen_whatever_is_installed(tmp_path):
    """--data synthetic trains on the seeded synthetic set even where scikit-learn is installed."""
    proc = train(tmp_path, "--data", "synthetic", "--steps", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("training on synthetic digits-like data: 1438 examples in 1 shards"), proc.stdout
