"""Memory stays bounded while logging many records: the peak RSS after all of them is within a small
margin of the peak after the first tenth."""

from __future__ import annotations

from distvlog.format import END_RECORD

MANY = """
import resource
import numpy as np
import distvlog.logger as dlog
log = dlog.get_logger()
N = 300_000
peaks = []
for i in range(N):
    if i % 10:
        log.info(f"step {i} done", step=i, loss=i * 0.5, shape=[i, 3])
    else:
        log.vlog(0, f"summary {i}\\n  second line {i}", norm=np.float32(i))
    if i + 1 in (N // 10, N):
        peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB
print(*peaks)
"""
MARGIN_KIB = 4 * 1024  # a leak of 16 bytes per record would be 4.3 MB over the last 270,000 records


def test_memory_stays_bounded(scripts):
    run = scripts.run(MANY)
    tenth, full = map(int, run.proc.stdout.split())
    assert full - tenth < MARGIN_KIB, f"peak RSS grew from {tenth} KiB to {full} KiB"
    last, end = run.only_file().read_bytes().rstrip(b"\n").rsplit(b"\n", 2)[-2:]
    assert last.endswith(b"] [rank 0] step 299999 done step=299999 loss=149999.5 shape=[299999,3]") and end.endswith(
        END_RECORD.encode()
    )
