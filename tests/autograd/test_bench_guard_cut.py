"""benchmarks/bench_guard.py cuts the guard machinery out of the engine's source by text substitution;
when the engine changes, a cut that no longer applies would only show when someone runs the benchmark."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_guard.py"


def test_every_cut_still_applies():
    saved = dict(os.environ)  # the benchmark pins BLAS threads and a log dir for its own process
    try:
        spec = importlib.util.spec_from_file_location("bench_guard", BENCH)
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        for module, name, cuts in bench.BYPASS:
            whole = bench.recompiled(module, name, [])
            cut = bench.recompiled(module, name, cuts)  # stops, naming the snippet, if one no longer applies
            assert cut.__code__.co_code != whole.__code__.co_code
    finally:
        os.environ.clear()
        os.environ.update(saved)
