"""`distvlog merge` vs GNU `sort -m`, side by side on the same rank files, at 4 to 1024 ranks.

The inputs are generated into a temp dir: per-rank files in our glog format (header, distvlog-meta with a
clock offset per rank), records from the engine's shapes (node begin, grad_stats, 10% multi-line dumps
declaring their `+lines`), two threads per rank with slightly out-of-order stamps; short records (~150
bytes) or long ones (~1 KB: a gradient's values in a field). The reference is
`LC_ALL=C sort -m -s -k1.2,2` on the timestamp keys, same files: it tears multi-line records apart, does no
clock correction and merges more than 16 files in passes; it is the speed reference, not the same job.
Contenders run interleaved, `--rounds` times each; medians are reported (wall time, and CPU time: the
steadier ratio on a shared machine), with each one's peak RSS.

    python benchmarks/bench_merge.py [--ranks 4,64,256,1024] [--mb 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from distvlog.format import VERSION  # noqa: E402
from distvlog.tools.read import restamp  # noqa: E402

_STAMP = b"I0000 00:00:00.000000"  # the digits are written per record
START_US = 1_796_004_674_000_000
GNU_TIME = shutil.which("time")  # /usr/bin/time (see timed); without it, RSS figures include ours
# (template, share of records). '#' runs are filled per record: node number, pointer, pass/step, norm.
SHORT = [
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
_VALUES = b"values=[" + b",".join([b"0.######"] * 100) + b"]"
LONG = [
    (SHORT[0][0].replace(b" v=4\n", b" " + _VALUES[:400] + b"] v=4\n"), 6),
    (SHORT[1][0].replace(b" v=5\n", b" " + _VALUES + b" v=5\n"), 3),
    (SHORT[2][0].replace(b" v=3 +lines=4\n", b" " + _VALUES + b" v=3 +lines=4\n"), 1),
]
KINDS = {"short": SHORT, "long": LONG}


def _fill(rows: np.ndarray, template: bytes, values: np.ndarray, tids: np.ndarray) -> None:
    """Write per-record numbers into the '#' runs and the thread id into TIDTD."""
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


def header_bytes(rank: int, ranks: int, created: int, clock_start: str, clock_end: str) -> bytes:
    """glog's header lines and our meta record for a rank file created at `created` (epoch µs)."""
    meta = {
        "distvlog": VERSION,
        "format": "glog",
        "rank": rank,
        "world_size": ranks,
        "host": "bench",
        "pid": 4000 + rank,
        "tid": 4000 + rank,
        "run_id": "bench",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created // 10**6)) + f".{created % 10**6:06d}",
        "created_us": created,
        "utc_offset_s": 0,
        "clock_start": clock_start.ljust(64),
        "clock_end": clock_end.ljust(64),
    }
    return (
        f"Log file created at: {time.strftime('%Y/%m/%d %H:%M:%S', time.gmtime(created // 10**6))}\n"
        "Running on machine: bench\nLog line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n"
        f"I{time.strftime('%m%d %H:%M:%S', time.gmtime(created // 10**6))}.{created % 10**6:06d} {4000 + rank} "
        f"distvlog:0] [rank {rank}] "
        f"distvlog-meta {json.dumps(meta, separators=(',', ':'))}\n"
    ).encode()


def generate(
    path: Path, rank: int, n: int, seed: int, span_s: float = 60.0, ranks: int = 4, kind: str = "short"
) -> int:
    """A rank file of n records in our glog format; returns its size."""
    rng = np.random.default_rng(seed)
    kinds_list = [(t.replace(b"[rank R]", b"[rank %d]" % rank), share) for t, share in KINDS[kind]]
    offset0, offset1 = 2500.0 * rank, 2500.0 * rank + 80.0 * rank  # clock offset to rank 0, with drift
    step = max(1, int(span_s * 1e6 / n))
    true_ts = START_US + np.cumsum(rng.integers(1, 2 * step, n))
    local = true_ts - np.rint(offset0 + (offset1 - offset0) * np.linspace(0, 1, n)).astype(np.int64)
    jitter = rng.random(n) < 0.01  # the other thread stamped first
    local[jitter] -= rng.integers(1, 200, jitter.sum())
    header = header_bytes(
        rank, ranks, int(local[0]), f"{offset0:.1f} 3.0 {int(local[0])}", f"{offset1:.1f} 3.0 {int(local[-1])}"
    )
    kinds = np.repeat(np.arange(len(kinds_list)), [share for _, share in kinds_list])[np.arange(n) % 10]
    lengths = np.array([len(t) for t, _ in kinds_list])[kinds]
    with open(path, "wb") as f:
        f.write(header)
        for lo in range(0, n, 200_000):
            hi = min(n, lo + 200_000)
            k, length = kinds[lo:hi], lengths[lo:hi]
            offsets = np.concatenate(([0], np.cumsum(length)[:-1]))
            out = np.zeros(int(length.sum()) + 512, np.uint8)
            for kind, (template, _) in enumerate(kinds_list):
                sel = np.flatnonzero(k == kind)
                rows = np.tile(np.frombuffer(template, np.uint8), (len(sel), 1))
                i = np.arange(lo, hi)[sel]
                restamp(rows.reshape(-1), np.arange(len(sel)) * len(template), local[lo:hi][sel])
                _fill(rows, template, i * 7919 % 1000 + i, 14000 + rank % 1000 + 50 * (i % 2))
                rows[i % 100 == 0, 0] = ord("W")
                view = as_strided(out, shape=(len(out) - len(template), len(template)), strides=(1, 1))
                view[offsets[sel]] = rows
            f.write(out[: int(length.sum())].tobytes())
    return path.stat().st_size


def sort_command(files: list[Path], out: Path) -> list[str]:
    return ["sort", "-m", "-s", "-k1.2,2", "-o", str(out)] + [str(f) for f in files]


def merge_command(files: list[Path], out: Path) -> list[str]:
    return [sys.executable, "-m", "distvlog", "merge"] + [str(f) for f in files] + ["-o", str(out)]


def timed(cmd: list[str], out: Path) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of a command (LC_ALL=C: sort's fastest
    comparison). On a machine shared with other work the CPU seconds are the steadier figure: wall time
    there is mostly waiting for a core.

    Each starts alike: no output file from the run before (whose deletion one would pay, the other not) and
    nothing left to write back from it (else later rounds run slower and slower as dirty pages pile up).
    The peak RSS is GNU time's, which forks the command from its own small process: a child forked from
    this one starts with this process's RSS as its high-water mark (Linux keeps it across exec), so
    wait4's figure would be at least the benchmark's own (~130 MB after generating the inputs)."""
    env = dict(os.environ, LC_ALL="C", PYTHONPATH=str(ROOT))
    out.unlink(missing_ok=True)
    rss_file = out.with_name(out.name + ".rss")
    os.sync()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [GNU_TIME, "-f", "%M %U %S", "-o", str(rss_file), *cmd] if GNU_TIME else cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{cmd[0]} failed: {proc.stderr.read().decode()[-2000:]}")
    proc.stderr.close()
    if GNU_TIME:
        rss, user, system = rss_file.read_text().split()[-3:]
        rss_file.unlink()
        return wall, int(rss), float(user) + float(system)
    return wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


Commands = Callable[[list[Path], Path], dict[str, list[str]]]


def merge_and_sort(files: list[Path], out: Path) -> dict[str, list[str]]:
    return {"merge": merge_command(files, out), "sort": sort_command(files, out)}


def one_config(tmp: Path, ranks: int, kind: str, mb: int, rounds: int, commands: Commands = merge_and_sort) -> dict:
    """Rank files of about `mb` MB generated, the contenders (`commands(files, out)`, name -> command) run on
    them in turn `rounds` times; their median wall and CPU seconds and their peak RSS."""
    run = tmp / f"{ranks}-{kind}"
    run.mkdir()
    per_record = 170 if kind == "short" else 1100
    n = max(10, mb * 1_000_000 // per_record // ranks)
    files = [run / f"rank-{r}.log" for r in range(ranks)]
    size = sum(generate(f, r, n, seed=r, ranks=ranks, kind=kind) for r, f in enumerate(files))
    out = tmp / "out.log"
    runs = commands(files, out)
    got: dict[str, list[tuple[float, int, float]]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, cmd in runs.items():
            got[name].append(timed(cmd, out))
    out.unlink(missing_ok=True)
    shutil.rmtree(run)
    return {
        "ranks": ranks,
        "kind": kind,
        "records": n * ranks,
        "mb": size / 1e6,
        "time": {name: statistics.median(t for t, _, _ in v) for name, v in got.items()},
        "cpu": {name: statistics.median(c for _, _, c in v) for name, v in got.items()},
        "rss_kb": {name: max(r for _, r, _ in v) for name, v in got.items()},
    }


def add_config_arguments(parser: argparse.ArgumentParser, ranks: str, mb: int) -> None:
    """The configurations to run (rank counts, record kinds, size) and how (rounds, where)."""
    parser.add_argument("--ranks", default=ranks, help="rank counts, comma-separated")
    parser.add_argument("--kinds", default="short,long")
    parser.add_argument("--mb", type=int, default=mb, help="input size per configuration (MB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", help="where to put the generated files (default: a temp dir)")


def configs(args: argparse.Namespace, commands: Commands = merge_and_sort) -> Iterator[dict]:
    """`one_config` of each rank count and record kind the arguments name, in a temp dir removed at the end."""
    tmp = Path(tempfile.mkdtemp(prefix="bench_merge.", dir=args.dir))
    try:
        for ranks in map(int, args.ranks.split(",")):
            for kind in args.kinds.split(","):
                yield one_config(tmp, ranks, kind, args.mb, args.rounds, commands)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, "4,64,256,1024", 200)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # sort -m opens every file too
    print(
        f"{'ranks':>5} {'records':>6} {'input':>8} {'merge':>8} {'sort -m':>8} {'ratio':>6} {'CPU ratio':>9} "
        f"{'merge RSS':>10} {'sort RSS':>9}"
    )
    for r in configs(args):
        t, cpu, rss = r["time"], r["cpu"], r["rss_kb"]
        print(
            f"{r['ranks']:>5} {r['kind']:>7} {r['mb']:>6.0f}MB {t['merge']:>7.2f}s {t['sort']:>7.2f}s "
            f"{t['merge'] / t['sort']:>5.2f}x {cpu['merge'] / max(cpu['sort'], 0.01):>8.2f}x "
            f"{rss['merge'] / 1024:>8.0f}MB {rss['sort'] / 1024:>7.0f}MB",
            flush=True,
        )


if __name__ == "__main__":
    main()
