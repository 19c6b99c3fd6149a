"""`distvlog merge --follow` catching up on a run's backlog vs `distvlog merge` of the same files, side by side.

Follow reads a bite of every file per round and decodes each record's stamp in Python (it serves a live job,
whose records arrive at the rate they are written); merge is the vectorised reader. This measures what a
backlog costs follow (`--idle 0`: print what is there, in order, and stop) against merge on the same run
directory: records/s, the time ratio, peak RSS. The rank files are bench_merge.py's (engine-like records,
10% multi-line, clock offsets per rank). Contenders run interleaved, `--rounds` times each; medians.

    python benchmarks/bench_follow.py [--records 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_merge import generate, timed  # noqa: E402

RANKS = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per rank file")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        run = tmp / "run"
        run.mkdir()
        size = sum(generate(run / f"rank-{r}.log", r, args.records, seed=r, ranks=RANKS) for r in range(RANKS))
        out = tmp / "out.log"
        merge = [sys.executable, "-m", "distvlog", "merge", str(run), "-o", str(out)]
        contenders = {"merge --follow --idle 0": merge + ["--follow", "--idle", "0"], "merge": merge}
        times: dict[str, list[float]] = {name: [] for name in contenders}
        rss: dict[str, list[int]] = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, cmd in contenders.items():
                wall, peak_kib, _cpu = timed(cmd, out)
                times[name].append(wall)
                rss[name].append(peak_kib)
        records = RANKS * (args.records + 1)
        print(f"{RANKS} ranks x {args.records:,} records ({size / 1e6:.0f} MB), median of {args.rounds} rounds")
        base = statistics.median(times["merge"])
        for name in contenders:
            wall = statistics.median(times[name])
            print(
                f"  {name:24s} {wall:7.2f} s  {records / wall / 1e6:6.2f} M records/s  {wall / base:5.2f}x merge"
                f"  peak RSS {max(rss[name]) / 1024:5.0f} MB"
            )


if __name__ == "__main__":
    main()
