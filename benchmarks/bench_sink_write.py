"""The cost of getting a rendered record into the rank file, without the logger around it: appending to a
buffer written out with os.write every 64 KB (what a death loses up to a flush), against copying it into a
mapped window of the file (what survives a SIGKILL), the window reserved by writing NUL bytes (the sink's
choice) or with posix_fallocate. The reserve's and the flushes' own costs are inside the timings.

    python benchmarks/bench_sink_write.py [--records 200000] [--rounds 11]
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import tempfile
import time

RECORD = b"I1201 20:30:00.123456 12345 train.py:42] [rank 0] train step step=123 loss=0.25\n"
WINDOW = 256 * 1024
PAGE = mmap.ALLOCATIONGRANULARITY


def buffered_write(fd: int, n: int) -> float:
    buf = bytearray()
    t0 = time.perf_counter()
    for _ in range(n):
        buf.extend(RECORD)
        if len(buf) >= 65536:
            data = bytes(buf)
            del buf[: len(data)]
            os.write(fd, data)
    os.write(fd, bytes(buf))
    return time.perf_counter() - t0


def _mapped(reserve):
    def run(fd: int, n: int) -> float:
        t0 = time.perf_counter()
        base = 0
        reserve(fd, 0, WINDOW)
        window = mmap.mmap(fd, WINDOW, offset=base)
        for _ in range(n):
            try:
                window.write(RECORD)
            except ValueError:  # full: the next window starts at the page holding the end
                end = base + window.tell()
                window.close()
                base = end - end % PAGE
                reserve(fd, end, base + WINDOW - end)
                window = mmap.mmap(fd, WINDOW, offset=base)
                window.seek(end - base)
                window.write(RECORD)
        dt = time.perf_counter() - t0
        window.close()
        return dt

    return run


def _write_zeros(fd: int, at: int, size: int) -> None:
    os.pwrite(fd, bytes(size), at)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    contenders = {
        "buffer + os.write per 64 KB": buffered_write,
        "mapped window, NUL-written reserve": _mapped(_write_zeros),
        "mapped window, posix_fallocate": _mapped(os.posix_fallocate),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
            for name in order:
                path = os.path.join(d, "rank-0.log")
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    times[name].append(contenders[name](fd, args.records))
                finally:
                    os.close(fd)
                    os.unlink(path)
    print(f"{args.records} records of {len(RECORD)} bytes x {args.rounds} interleaved rounds, median per record:")
    for name, ts in times.items():
        print(f"  {name:36s} {statistics.median(ts) / args.records * 1e9:7.1f} ns")


if __name__ == "__main__":
    main()
