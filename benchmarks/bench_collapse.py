"""`distvlog merge --collapse` vs plain `merge`, side by side on the same rank files, at 4 to 1,024 ranks.

The inputs are generated into a temp dir: per-rank files in our glog format, every rank writing the same
records of a data-parallel step (parameter digests, three nodes' `grad_stats`, a node's `begin run` with its
address, an allreduce's begin and end, the step's loss), with the values a healthy job has: agreed (digests,
reduced checksums, the mean loss) or the rank's own (local norms and checksums, wait times, addresses, the
loss), stamped a few hundred µs apart from rank to rank. At 256 ranks a second set plants one fault on rank
17 at the middle step: a NaN gradient norm, another reduced checksum and one allreduce more.

Per configuration: output records / one rank's records (the goal: <= 1.1), the wall and CPU seconds and
peak RSS of each command (medians over `--rounds`; the goal: no slower than merge, <= 300 MB), and for the
fault whether rank 17's three records are each on a line of their own, marked, and nothing else of it was
folded away at that step.

    python benchmarks/bench_collapse.py [--ranks 4,64,256,1024] [--records 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_merge import START_US, timed  # noqa: E402

RECORDS_PER_STEP = 8
CULPRIT = 17
DIGESTS = json.dumps([f"{0x9E3779B97F4A7C15 * k % 2**64:016x}" for k in range(1, 7)], separators=(",", ":"))
_RECORD_START = re.compile(rb"^[IWEF]\d{4} ", re.M)


def _stamp(us: int) -> str:
    return time.strftime("%m%d %H:%M:%S", time.gmtime(us // 10**6)) + f".{us % 10**6:06d}"


def _step_records(rank: int, step: int, fault: bool) -> list[tuple[int, str, str]]:
    """(µs into the run, site, body) of one rank's records of one step."""
    h = (rank * 2654435761 + step * 40503) % 2**32  # this rank's own values, reproducibly
    norm = 0.5 + h % 1000 / 1000
    reduced = f"{(step * 0x5851F42D4C957F2D) % 2**64:016x}"
    out = [(0, "parallel.py:206", f"parameters v=1 step={step} digests={DIGESTS}")]
    for k in range(3):
        n = "nan" if fault and k == 1 else f"{norm / (k + 1)!r}"
        out.append(
            (
                1000 + 300 * k,
                "nodelog.py:259",
                f"grad_stats node=linear{3 * step + k}GradNode pass={step + 1} v=5 slot=grad_x norm={n} nan={2048 if n == 'nan' else 0} inf=0 step={step}",
            )
        )
    out.append(
        (
            2000,
            "nodelog.py:199",
            f"relu{2 * step}GradNode(0x7f{h:08x}) begin run node=relu{2 * step}GradNode pass={step + 1} v=4 step={step}",
        )
    )
    begin = f"allreduce begin v=1 step={step} bucket=0 bytes=19496 checksum={h * 7919 % 2**64:016x} norm={norm!r}"
    out.append((3000, "parallel.py:257", begin))
    if fault:
        out.append((3100, "parallel.py:257", begin))  # one allreduce more
    end = "0bad0bad0bad0bad" if fault else reduced
    out.append(
        (
            4000 + h % 3000,
            "parallel.py:290",
            f"allreduce end v=1 step={step} bucket=0 checksum={end} wait_us={1000 + h % 3000}",
        )
    )
    out.append(
        (
            8000,
            "train.py:142",
            f"train step loss={2.5 - step / 1000 + h % 100 / 1000!r} mean_loss={2.5 - step / 1000!r} step={step}",
        )
    )
    return out


def generate(path: Path, rank: int, records: int, ranks: int, fault_step: int | None) -> None:
    steps = max(1, records // RECORDS_PER_STEP)
    created = START_US
    meta = {
        "distvlog": 2, "format": "glog", "rank": rank, "world_size": ranks, "host": f"node{rank // 8}", "pid": 4000 + rank,
        "tid": 4000 + rank, "run_id": "bench", "created": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created // 10**6)),
        "created_us": created, "utc_offset_s": 0, "clock_start": "".ljust(64), "clock_end": "".ljust(64),
    }  # fmt: skip
    tid = 4000 + rank
    lines = [
        f"Log file created at: {time.strftime('%Y/%m/%d %H:%M:%S', time.gmtime(created // 10**6))}",
        f"Running on machine: node{rank // 8}",
        "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg",
        f"I{_stamp(created)} {tid} distvlog:0] [rank {rank}] distvlog-meta {json.dumps(meta, separators=(',', ':'))}",
    ]
    skew = rank * 37 % 400  # ranks reach the same record a few hundred µs apart
    for step in range(steps):
        at = created + 1000 + step * 20_000 + skew
        for offset, site, body in _step_records(rank, step, step == fault_step and rank == CULPRIT):
            lines.append(f"I{_stamp(at + offset)} {tid} {site}] [rank {rank}] {body}")
    path.write_text("\n".join(lines) + "\n")


def _records(path: Path) -> int:
    return len(_RECORD_START.findall(path.read_bytes()))


def _fault_seen(out: Path, step: int, ranks: int) -> str:
    """Whether the culprit's three planted records stand on lines of their own, marked, and no folded line of
    that step's allreduce end or NaN node claims it."""
    text = out.read_text()
    own = [line for line in text.splitlines() if f"[rank {CULPRIT} " in line and f"step={step}" in line]
    marks = sorted(re.search(r"\[rank \d+ ([^\]:,]+)", line).group(1) for line in own)
    claimed = [
        line
        for line in text.splitlines()
        if line.startswith("I")
        and f"step={step} " in line
        and ("allreduce end" in line or f"linear{3 * step + 1}GradNode" in line)
        and re.search(rf"\[ranks 0-{ranks - 1}\b", line)
    ]
    ok = marks == ["differs", "differs", "only"] and not claimed
    return f"{'yes' if ok else 'NO'} ({', '.join(marks) or 'none'} marked)"


def one_config(tmp: Path, ranks: int, records: int, rounds: int, fault: bool) -> None:
    run = tmp / f"{ranks}{'-fault' if fault else ''}"
    run.mkdir()
    fault_step = records // RECORDS_PER_STEP // 2 if fault else None
    for rank in range(ranks):
        generate(run / f"rank-{rank}.log", rank, records, ranks, fault_step)
    one_rank = _records(run / "rank-0.log")
    out = tmp / "out.log"
    base = [sys.executable, "-m", "distvlog", "merge", str(run), "-o", str(out)]
    stats: dict[str, list[tuple[float, int, float]]] = {"merge": [], "collapse": []}
    lines = 0
    for _ in range(rounds):
        for name, cmd in (("merge", base), ("collapse", [*base, "--collapse"])):
            stats[name].append(timed(cmd, out))
            if name == "collapse":
                lines = _records(out)
                seen = _fault_seen(out, fault_step, ranks) if fault else ""
    wall = {n: statistics.median(s[0] for s in v) for n, v in stats.items()}
    cpu = {n: statistics.median(s[2] for s in v) for n, v in stats.items()}
    rss = {n: max(s[1] for s in v) / 1024 for n, v in stats.items()}
    print(
        f"{ranks:>5} ranks{' +fault' if fault else '       '} {one_rank:>7,} records/rank  "
        f"lines/rank {lines / one_rank:5.3f}  "
        f"merge {wall['merge']:6.2f} s ({cpu['merge']:6.2f} CPU) {rss['merge']:5.0f} MB  "
        f"collapse {wall['collapse']:6.2f} s ({cpu['collapse']:6.2f} CPU) {rss['collapse']:5.0f} MB  "
        f"x{cpu['collapse'] / max(cpu['merge'], 1e-9):.2f} CPU" + (f"  culprit marked: {seen}" if fault else ""),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="4,64,256,1024", help="rank counts")
    parser.add_argument("--fault-at", type=int, default=256, help="the rank count to plant the fault at too")
    parser.add_argument("--records", type=int, default=2000, help="records per rank")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-collapse-") as tmp:
        for ranks in [int(r) for r in args.ranks.split(",")]:
            one_config(Path(tmp), ranks, args.records, args.rounds, False)
            if ranks == args.fault_at and ranks > CULPRIT:
                one_config(Path(tmp), ranks, args.records, args.rounds, True)


if __name__ == "__main__":
    main()
