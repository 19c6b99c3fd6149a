"""`distvlog launch` when ranks end badly, with real ranks: a rank failing after the others finished without
MPI, and one failing while the others wait for it in MPI_Init."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(300)


def _line(code: str, marker: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), start=1) if marker in line)


def _found(text: str, *phrases: str) -> list[str]:
    """Which of `phrases` occur in `text` (pytest's explanation of a failed `not in` diffs long texts slowly)."""
    return [phrase for phrase in phrases if phrase in text]


# Rank 1 fails only once rank 0 is done: rank 0 never initialised MPI, so rank 1's MPI_Init, which an abort
# through MPI needs, would wait for it forever.
AFTER_RANK_0 = """
import os, sys, time
{prologue}
if os.environ["PMI_RANK"] == "0":
    open(sys.argv[1], "w").close()  # rank 0 is done
    sys.exit()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
{failure}  # @fail
"""
LAZY_LOGGING = 'import distvlog as dv\ndv.get_logger("job").info("started")'


@pytest.mark.parametrize("prologue, failure, rc, reason", [
    ("", "sys.exit(3)", 3, "exited with status 3"),  # no distvlog, no MPI in the script
    (LAZY_LOGGING, "raise ValueError('late boom on rank 1')", 1, "ValueError: late boom on rank 1"),
], ids=["plain-exit", "lazy-logging-raise"])
def test_a_rank_failing_after_the_others_ended_without_mpi_ends_the_job(run_cli, tmp_path, prologue, failure,
                                                                        rc, reason):
    script = tmp_path / "late.py"
    code = AFTER_RANK_0.format(prologue=prologue, failure=failure)
    script.write_text(code)
    proc = run_cli("launch", "-n", "2", str(script), str(tmp_path / "rank0-done"))
    assert proc.returncode == rc, proc.stderr
    assert f"distvlog launch: rank 1 failed: {reason} (late.py:{_line(code, '@fail')})" in proc.stderr


BEFORE_RANK_0 = """
import os, sys
import distvlog as dv
if os.environ["PMI_RANK"] == "1":
    raise ValueError("no data on rank 1")  # @raise
dv.init()  # MPI_Init: waits for rank 1, which never comes
print("rank 0 initialised", flush=True)
"""


def test_a_rank_failing_before_mpi_ends_the_ranks_waiting_in_mpi_init(run_cli, tmp_path):
    """The other way round: rank 1 fails without MPI while rank 0 waits for it in MPI_Init. Rank 1 cannot
    abort through MPI without initialising it, and exiting would leave rank 0 waiting: it aborts the job
    through the launcher."""
    script = tmp_path / "early.py"
    script.write_text(BEFORE_RANK_0)
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode != 0 and not _found(proc.stdout, "rank 0 initialised")
    assert (f"distvlog launch: rank 1 failed: ValueError: no data on rank 1 (early.py:{_line(BEFORE_RANK_0, '@raise')})"
            in proc.stderr)
