"""Zero false alarms: healthy runs of launch/train.py over a matrix of distinct configurations (ranks,
seeds, optimizers, overlap, guard levels, batch sizes, data), 200 steps each: `distvlog diff` exits 0 and
reports no error. (benchmarks/study_healthy.py runs the larger study the thresholds were set from.)"""

from __future__ import annotations

import importlib.util
import re

import pytest
from test_diff_faults import TRAIN, run_dir_of

from distvlog.cli import main

STEPS = 200
# (ranks, seed, optimizer, overlap, guard level, batch size, data): 10 distinct configurations on synthetic
# data, which always run (2 to 8 ranks, both optimizers, overlap on and off, levels 5 and 6, batches of 4 to
# 32), and 2 on the digits, which need scikit-learn
MATRIX = [
    (2, 0, "sgd", False, 5, 32, "synthetic"),
    (2, 1, "adam", True, 6, 8, "synthetic"),
    (3, 5, "sgd", True, 6, 8, "synthetic"),
    (3, 6, "adam", True, 5, 16, "synthetic"),
    (4, 8, "sgd", False, 6, 32, "synthetic"),
    (4, 9, "adam", True, 5, 8, "synthetic"),
    (4, 11, "adam", False, 6, 4, "synthetic"),
    (5, 13, "adam", True, 5, 32, "synthetic"),
    (6, 15, "sgd", True, 6, 32, "synthetic"),
    (8, 16, "adam", True, 5, 8, "synthetic"),
    (2, 18, "adam", False, 5, 8, "digits"),
    (4, 19, "adam", True, 6, 32, "digits"),
]
HAS_DIGITS = importlib.util.find_spec("sklearn") is not None


@pytest.mark.parametrize("ranks,seed,optimizer,overlap,level,batch,data", MATRIX)
def test_a_healthy_run_has_no_error(run_cli, capsys, ranks, seed, optimizer, overlap, level, batch, data):
    """No fault planted: exit 0, no error (notes may appear, they never change the exit code)."""
    if data == "digits" and not HAS_DIGITS:
        pytest.skip("--data digits needs scikit-learn (pip install scikit-learn)")
    args = [
        "--steps",
        str(STEPS),
        "--seed",
        str(seed),
        "--optimizer",
        optimizer,
        "--guard-level",
        str(level),
        "--batch-size",
        str(batch),
        "--data",
        data,
    ] + (["--overlap"] if overlap else [])
    proc = run_cli("launch", "-n", str(ranks), TRAIN, *args)
    assert proc.returncode == 0, proc.stderr
    code = main(["diff", run_dir_of(proc.stderr)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(rf"^{ranks} ranks, {STEPS} steps: ", out) and out.rstrip().endswith("no divergence found"), out
