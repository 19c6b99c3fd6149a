"""`distvlog merge` vs GNU `sort -m`, side by side on the same rank files; heapq.merge and lnav as references.

The input is generated into a temp dir: per-rank files in our glog format (header, distvlog-meta with a
clock offset per rank), records from the engine's shapes (node begin, grad_stats, 10% multi-line dumps that
declare their continuation lines),
two threads per rank with slightly out-of-order stamps. `sort -m` compares whole lines (and tears the
multi-line records apart); lnav is slow, so it runs on a smaller input and its time is scaled up.
Contenders run interleaved, `--rounds` times each; medians are reported. Then peak memory (max RSS) of
`distvlog merge` on 4 x 100 MB and 4 x 400 MB files.

    python benchmarks/bench_merge.py [--records 1000000] [--rounds 3] [--lnav-records 50000] [--no-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from distvlog.format import VERSION  # noqa: E402
from distvlog.tools.read import restamp  # noqa: E402

RANKS = 4
_STAMP = b"I0000 00:00:00.000000"  # the digits are written per record
START_US = 1_796_004_674_000_000
# (template, share of records). '#' runs are filled per record: node number, pointer, pass/step, norm.
KINDS = [
    (
        _STAMP + b" TIDTD engine.py:501] [rank R] multiply###GradNode(0x7f3a########) begin run "
        b"node=multiply###GradNode pass=##### v=4\n",
        6,
    ),
    (
        _STAMP + b" TIDTD nodelog.py:141] [rank R] grad_stats node=multiply###GradNode slot=x "
        b"tensor=multiply###_out_float32_2x3@Grad shape=2x3 dtype=float32 norm=0.###### min=-1.5 max=2.25 "
        b"mean=0.125 nan=0 inf=0 checksum=######## step=##### v=5\n",
        3,
    ),
    (
        _STAMP + b" TIDTD nodelog.py:96] [rank R]  node=multiply###GradNode pass=##### v=3 +lines=4\n"
        b"==========================Running_AD_API_GRAD: multiply_grad==========================\n"
        b"{ Input: [ \n( grad_out , [{\n        Name: multiply###_out_float32_2x3@Grad }]), ]} \n",
        1,
    ),
]


def _fill(rows: np.ndarray, template: bytes, values: np.ndarray, rank: int, tids: np.ndarray) -> None:
    """Write per-record numbers into the '#' runs, the rank and thread id into R / TIDTD."""
    t = np.frombuffer(template, np.uint8)
    rows[:, t.tobytes().index(b"R")] = ord("0") + rank
    tid_at = template.index(b"TIDTD")
    for k in range(5):
        rows[:, tid_at + k] = 48 + tids // 10 ** (4 - k) % 10
    runs = [
        (m, m + template[m:].index(next(c for c in template[m:] if c != ord("#"))))
        for m in range(len(template))
        if template[m] == ord("#") and (m == 0 or template[m - 1] != ord("#"))
    ]
    for start, end in runs:
        width = end - start
        digits = values % 10**width
        for k in range(width):
            rows[:, start + k] = 48 + digits // 10 ** (width - 1 - k) % 10


def generate(path: Path, rank: int, n: int, seed: int, span_s: float = 60.0) -> int:
    """A rank file of n records in our glog format; returns its size."""
    rng = np.random.default_rng(seed)
    offset0, offset1 = 2500.0 * rank, 2500.0 * rank + 80.0 * rank  # clock offset to rank 0, with drift
    step = max(1, int(span_s * 1e6 / n))
    true_ts = START_US + np.cumsum(rng.integers(1, 2 * step, n))
    local = true_ts - np.rint(offset0 + (offset1 - offset0) * np.linspace(0, 1, n)).astype(np.int64)
    jitter = rng.random(n) < 0.01  # the other thread stamped first
    local[jitter] -= rng.integers(1, 200, jitter.sum())
    created = int(local[0])
    meta = {
        "distvlog": VERSION,
        "format": "glog",
        "rank": rank,
        "world_size": RANKS,
        "host": "bench",
        "pid": 4000 + rank,
        "tid": 4000 + rank,
        "run_id": "bench",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created // 10**6)) + f".{created % 10**6:06d}",
        "created_us": created,
        "utc_offset_s": 0,
        "clock_start": f"{offset0:.1f} 3.0 {int(local[0])}".ljust(64),
        "clock_end": f"{offset1:.1f} 3.0 {int(local[-1])}".ljust(64),
    }
    header = (
        f"Log file created at: {time.strftime('%Y/%m/%d %H:%M:%S', time.gmtime(created // 10**6))}\n"
        "Running on machine: bench\nLog line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n"
        f"I{time.strftime('%m%d %H:%M:%S', time.gmtime(created // 10**6))}.{created % 10**6:06d} {4000 + rank} "
        f"distvlog:0] [rank {rank}] "
        f"distvlog-meta {json.dumps(meta, separators=(',', ':'))}\n"
    ).encode()
    kinds = np.repeat(np.arange(len(KINDS)), [share for _, share in KINDS])[np.arange(n) % 10]
    lengths = np.array([len(t) for t, _ in KINDS])[kinds]
    with open(path, "wb") as f:
        f.write(header)
        for lo in range(0, n, 200_000):
            hi = min(n, lo + 200_000)
            k, length = kinds[lo:hi], lengths[lo:hi]
            offsets = np.concatenate(([0], np.cumsum(length)[:-1]))
            out = np.zeros(int(length.sum()) + 512, np.uint8)
            for kind, (template, _) in enumerate(KINDS):
                sel = np.flatnonzero(k == kind)
                rows = np.tile(np.frombuffer(template, np.uint8), (len(sel), 1))
                i = np.arange(lo, hi)[sel]
                restamp(rows.reshape(-1), np.arange(len(sel)) * len(template), local[lo:hi][sel])
                _fill(rows, template, i * 7919 % 1000 + i, rank, 14000 + rank + 50 * (i % 2))
                rows[i % 100 == 0, 0] = ord("W")
                view = as_strided(out, shape=(len(out) - len(template), len(template)), strides=(1, 1))
                view[offsets[sel]] = rows
            f.write(out[: int(length.sum())].tobytes())
    return path.stat().st_size


HEAPQ = """
import heapq, sys
files = [open(p, "rb") for p in sys.argv[2:]]
with open(sys.argv[1], "wb") as out:
    out.writelines(heapq.merge(*files))
"""


def contenders(files: list[Path], out: Path) -> dict[str, list[str]]:
    env_py = [sys.executable, "-m", "distvlog", "merge"]
    return {
        "distvlog merge": env_py + [str(f) for f in files] + ["-o", str(out)],
        "sort -m": ["sort", "-m", "-o", str(out)] + [str(f) for f in files],
        "heapq.merge": [sys.executable, "-c", HEAPQ, str(out)] + [str(f) for f in files],
    }


def timed(cmd: list[str], out: Path) -> float:
    """Wall seconds of a command (LC_ALL=C: sort's fastest comparison).

    Each starts alike: no output file from the run before (whose deletion one would pay, the other not) and
    nothing left to write back from it (else later rounds run slower and slower as dirty pages pile up)."""
    env = dict(os.environ, LC_ALL="C", PYTHONPATH=str(ROOT))
    out.unlink(missing_ok=True)
    os.sync()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed: {proc.stderr.decode()[-2000:]}")
    return wall


def peak_rss(cmd: list[str]) -> int:
    """Max RSS (KiB) of one run, measured by GNU time in its own process tree."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M"] + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if proc.returncode:
        raise SystemExit(f"failed: {proc.stderr[-2000:]}")
    return int(proc.stderr.strip().splitlines()[-1])


def lnav_seconds(tmp: Path, records: int) -> float | None:
    """lnav headless reading the same kind of files and writing the merged view, for `records` per rank."""
    if not shutil.which("lnav"):
        return None
    files = [tmp / f"small-{r}.log" for r in range(RANKS)]
    for r, f in enumerate(files):
        generate(f, r, records, seed=100 + r)
    out = tmp / "lnav.out"
    cmd = ["lnav", "-n", "-c", f":write-raw-to {out}"] + [str(f) for f in files]
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, HOME=str(tmp)))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per rank file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lnav-records", type=int, default=50_000, help="records per rank for lnav (0: skip)")
    parser.add_argument("--no-memory", action="store_true", help="skip the 4 x 100 MB vs 4 x 400 MB memory run")
    parser.add_argument("--dir", help="where to put the generated files (default: a temp dir)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_merge.", dir=args.dir))
    try:
        files = [tmp / f"rank-{r}.log" for r in range(RANKS)]
        sizes = [generate(f, r, args.records, seed=r) for r, f in enumerate(files)]
        print(f"input: {RANKS} files x {args.records:,} records ({sum(sizes) / 1e6:,.0f} MB, 10% multi-line)")
        out = tmp / "out.log"
        runs = contenders(files, out)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, cmd in runs.items():
                times[name].append(timed(cmd, out))
        median = {name: statistics.median(t) for name, t in times.items()}
        base = median["sort -m"]
        for name, t in median.items():
            print(
                f"{name:16s} {t:7.2f} s   {t / base:5.2f}x sort -m   (rounds: {', '.join(f'{x:.2f}' for x in times[name])})"
            )
        if args.lnav_records:
            t = lnav_seconds(tmp, args.lnav_records)
            if t is not None:
                scaled = t * args.records / args.lnav_records
                print(
                    f"{'lnav headless':16s} {scaled:7.2f} s   {scaled / base:5.2f}x sort -m   "
                    f"(measured {t:.2f} s on {args.lnav_records:,} records per rank, scaled linearly)"
                )
        if not args.no_memory:
            memory(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def memory(tmp: Path) -> None:
    """Peak RSS of distvlog merge for 4 x 100 MB vs 4 x 400 MB inputs (written to /dev/null)."""
    result = {}
    for mb in (100, 400):
        files = [tmp / f"mem{mb}-{r}.log" for r in range(RANKS)]
        n = mb * 1_000_000 // 175  # ~175 bytes per record
        for r, f in enumerate(files):
            generate(f, r, n, seed=r, span_s=60.0 * mb / 100)
        result[mb] = peak_rss(
            [sys.executable, "-m", "distvlog", "merge"] + [str(f) for f in files] + ["-o", os.devnull]
        )
        for f in files:
            f.unlink()
    growth = result[400] / result[100] - 1
    print(
        f"peak memory: 4 x 100 MB -> {result[100] / 1024:.0f} MiB, 4 x 400 MB -> {result[400] / 1024:.0f} MiB "
        f"({growth:+.1%})"
    )


if __name__ == "__main__":
    main()
