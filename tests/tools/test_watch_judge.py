"""watch's Judge on hand-made logs: judged as steps finish, it finds at each judgement what one `diff` of
the finished steps finds, where a finding becomes decidable only once later steps are in (an extra
allreduce, a rank that stops allreducing or stops logging its nodes)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from distvlog.tools.diff import analyse
from distvlog.tools.diff._logs import Collective, Logs, RankLogs, Stat
from distvlog.tools.watch._live import Judge


def allreduce(step: int, bucket: int = 0) -> Collective:
    return Collective(step, bucket, 0, "c", 1.0, 1, "c")


def node(rank: int, step: int, run: int) -> Stat:
    return Stat(rank, step, "matmul0GradNode", "grad_in", None, 1.0, 0, 0, 0, run)


def extra_allreduce() -> Logs:  # rank 0 reduces bucket 0 twice in step 1
    seqs = {0: [(0, 0), (1, 0), (1, 0), (2, 0)], 1: [(0, 0), (1, 0), (2, 0)]}
    return Logs(
        defaultdict(
            RankLogs, {r: RankLogs(collectives=[allreduce(*c) for c in s], last_step=3) for r, s in seqs.items()}
        )
    )


def stops_allreducing() -> Logs:  # allreduces every other step; rank 1 has none from step 2
    seqs = {0: [(0, 0), (2, 0)], 1: [(0, 0)]}
    return Logs(
        defaultdict(
            RankLogs, {r: RankLogs(collectives=[allreduce(*c) for c in s], last_step=3) for r, s in seqs.items()}
        )
    )


def stops_logging_nodes() -> Logs:  # nodes logged at even steps; rank 2 ran none at step 2
    ranks = {
        r: RankLogs(
            stats=[node(r, 0, 1)] + ([node(r, 2, 2)] if r != 2 else []),
            collectives=[allreduce(s) for s in range(4)],
            last_step=3,
        )
        for r in range(3)
    }
    return Logs(defaultdict(RankLogs, ranks))


@pytest.mark.parametrize("logs", [extra_allreduce(), stops_allreducing(), stops_logging_nodes()])
def test_a_judgement_of_the_new_steps_finds_what_diff_of_every_step_finds(logs):
    judge = Judge()
    for step in (2, 3):
        expected = [repr(f) for f in analyse(logs.before(step)).errors]
        assert [repr(f) for f in judge.up_to(logs, step)] == expected
    assert expected  # (each case has its error, found at the second judgement)
