"""Records per second into a per-rank file: distvlog's structlog pipeline vs. stdlib logging (glog formatter,
FileHandler), with the raw formatted-write rate as the ceiling and structlog's own minimal configuration.

Every contender writes the same record (message, step, loss; file:line, thread id, µs timestamp, rank) to
its own file in a temp dir. Rounds are interleaved and the median is reported, because machines are noisy.
Also: the cost of a disabled vlog call, and peak memory while logging millions of records.

    python benchmarks/bench_logging.py [--records 30000] [--rounds 11] [--memory-records 2000000]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)  # run from a checkout without installing


def _timed_structured(log, n: int, flush) -> float:
    """Seconds to log n structured records through `log` and flush them."""
    t0 = time.perf_counter()
    for i in range(n):
        log.info("train step", step=i, loss=0.25)
    flush()
    return time.perf_counter() - t0


def bench_distvlog(path: str, n: int) -> float:
    import distvlog.logger as dlog

    return _timed_structured(dlog.get_logger("bench"), n, dlog.flush)


def bench_stdlib(path: str, n: int) -> float:
    class GlogFormatter(logging.Formatter):
        def format(self, r: logging.LogRecord) -> str:
            t = time.localtime(r.created)
            return "%s%02d%02d %02d:%02d:%02d.%06d %d %s:%d] [rank 0] %s" % (  # noqa: UP031 (stdlib style)
                r.levelname[0],
                t.tm_mon,
                t.tm_mday,
                t.tm_hour,
                t.tm_min,
                t.tm_sec,
                int(r.msecs * 1000),
                threading.get_native_id(),
                r.filename,
                r.lineno,
                r.getMessage(),
            )

    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(GlogFormatter())
    log = logging.getLogger(f"bench-{path}")
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    t0 = time.perf_counter()
    for i in range(n):
        log.info("train step step=%d loss=%s", i, 0.25)
    handler.flush()
    dt = time.perf_counter() - t0
    handler.close()
    log.removeHandler(handler)
    return dt


def bench_structlog_minimal(path: str, n: int) -> float:
    import structlog

    with open(path, "w") as f:
        log = structlog.wrap_logger(
            structlog.WriteLogger(f),
            processors=[
                structlog.processors.TimeStamper(fmt="%m%d %H:%M:%S.%f"),
                structlog.processors.KeyValueRenderer(key_order=["timestamp", "event"]),
            ],
        )
        return _timed_structured(log, n, f.flush)


def bench_raw(path: str, n: int) -> float:
    """The ceiling: format the same line with an f-string and write it through a buffered file."""
    tid = threading.get_native_id()
    with open(path, "w", buffering=64 * 1024) as f:
        t0 = time.perf_counter()
        for i in range(n):
            ts = time.time_ns() // 1000
            f.write(f"I1130 01:26:20.{ts % 1_000_000:06d} {tid} bench.py:1] [rank 0] train step step={i} loss=0.25\n")
        f.flush()
        return time.perf_counter() - t0


def disabled_vlog_ns(n: int = 1_000_000) -> tuple[float, float]:
    import distvlog.logger as dlog

    log = dlog.get_logger("bench")
    empty = min(timeit.repeat("pass", number=n, repeat=5))
    plain = min(timeit.repeat(lambda: log.vlog(5, "x"), number=n, repeat=5))
    fields = min(timeit.repeat(lambda: log.vlog(5, "x", step=1), number=n, repeat=5))
    call = min(timeit.repeat(lambda: None, number=n, repeat=5))
    return (plain - call + empty) / n * 1e9, (fields - call + empty) / n * 1e9


def peak_memory_mb(records: int) -> tuple[float, float]:
    """Peak RSS of a child that logs `records` records, at a tenth of them and at all of them."""
    code = (
        "import sys, resource, distvlog.logger as d\n"
        "log = d.get_logger('mem'); n = int(sys.argv[1]); out = []\n"
        "for i in range(n):\n"
        "    log.info('train step', step=i, loss=0.25)\n"
        "    if i + 1 in (n // 10, n): out.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
        "print(*out)\n"
    )
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, DISTVLOG_LOG_DIR=d, PYTHONPATH=ROOT)
        res = subprocess.run(
            [sys.executable, "-c", code, str(records)], env=env, capture_output=True, text=True, check=True
        )
    tenth, full = map(float, res.stdout.split())
    return tenth, full


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=30_000)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--memory-records", type=int, default=2_000_000)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        os.environ["DISTVLOG_LOG_DIR"] = os.path.join(d, "distvlog")
        contenders = {
            "raw formatted write (ceiling)": bench_raw,
            "distvlog": bench_distvlog,
            "structlog minimal (KeyValue)": bench_structlog_minimal,
            "stdlib logging + FileHandler": bench_stdlib,
        }
        times: dict[str, list[float]] = {k: [] for k in contenders}
        for r in range(args.rounds):
            order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]  # nobody always goes first
            for name in order:
                fn = contenders[name]
                times[name].append(fn(os.path.join(d, f"{r}-{fn.__name__}.log"), args.records))
    rate = {k: args.records / statistics.median(v) for k, v in times.items()}
    # The headline ratio pairs each round's two runs, which ran moments apart: drift between rounds cancels.
    paired = statistics.median(s / d for s, d in zip(times["stdlib logging + FileHandler"], times["distvlog"]))
    print(f"{args.records} records x {args.rounds} interleaved rounds, median rate:")
    for name, r in rate.items():
        print(f"  {name:32s} {r:12,.0f} rec/s  {1e6 / r:6.2f} us/rec")
    print(
        f"distvlog vs stdlib logging: {paired:.2f}x faster (median of per-round ratios; goal >= 2.5x); "
        f"ratio of medians {rate['distvlog'] / rate['stdlib logging + FileHandler']:.2f}x; "
        f"share of the raw ceiling: {rate['distvlog'] / rate['raw formatted write (ceiling)']:.0%}"
    )
    plain, fields = disabled_vlog_ns()
    print(f"disabled vlog call: {plain:.0f} ns (no fields), {fields:.0f} ns (one field)   (goal <= 150 ns)")
    if args.memory_records:
        tenth, full = peak_memory_mb(args.memory_records)
        print(
            f"peak RSS logging {args.memory_records:,} records: {tenth:.1f} MB after 10%, {full:.1f} MB after all "
            f"({full / tenth:.2f}x)"
        )


if __name__ == "__main__":
    main()
