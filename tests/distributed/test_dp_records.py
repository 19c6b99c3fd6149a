"""What DataParallel logs for `distvlog diff` at verbosity 1, from a real 2-rank run of launch/train.py:
the parameter layout once, a digest of every parameter per step (bit-identical across ranks, changing as
they train) and after the last step, each bucket's local checksum and norm going in, and its wait."""

from __future__ import annotations

import math
import re

import pytest
from launch_testkit import launch_train

from distvlog.tools.diff import load

STEPS = 4


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    run_dir = launch_train(tmp_path_factory.mktemp("records"), 2, "--data", "synthetic", "--steps", str(STEPS))
    return load([str(run_dir)])


def test_the_layout_names_every_parameter_and_each_buckets_share(logs):
    """Six parameters of the MLP, in order; the buckets hold every one of them once (all are trained)."""
    for mine in logs.ranks.values():
        assert mine.names == [f"linear_{i}.{p}_0" for i in range(3) for p in "wb"]
        assert sorted(i for bucket in mine.buckets for i in bucket) == list(range(6))


def test_digests_are_identical_across_ranks_and_change_as_they_train(logs):
    """A digest per parameter at the start of every step and after the last (dv.finalize())."""
    zero, one = logs.ranks[0], logs.ranks[1]
    assert sorted(zero.digests) == list(range(STEPS + 1)) and zero.final_step == STEPS
    assert zero.digests == one.digests
    assert all(re.fullmatch(r"[0-9a-f]{16}", d) for d in zero.digests[0])
    assert all(zero.digests[s] != zero.digests[s + 1] for s in range(STEPS))


def test_each_allreduce_logs_its_local_checksum_norm_and_wait(logs):
    """Going in: this rank's checksum and norm (they differ across ranks); coming out: the same averaged
    checksum on both, and how long each waited."""
    zero, one = logs.ranks[0].collectives, logs.ranks[1].collectives
    assert (
        [(c.step, c.bucket) for c in zero]
        == [(c.step, c.bucket) for c in one]
        == [(s, b) for s in range(STEPS) for b in (0, 1)]
    )
    for a, b in zip(zero, one):
        assert a.checksum_in != b.checksum_in and a.checksum_out == b.checksum_out
        assert all(math.isfinite(c.norm) and c.norm > 0 and c.wait_us >= 0 for c in (a, b))
