"""`distvlog merge` against the alternatives, side by side on bench_merge's rank files: where the floor is.

Contenders, each a process timed with its peak RSS (bench_merge.timed), interleaved, medians of `--rounds`:
  merge      `distvlog merge` (numpy/pyarrow blocks, bounded memory)
  parse      our reader alone, no merge and no output (what the merge costs beyond parsing)
  merge-2p   `distvlog merge` of each half of the files in its own process (at once), the two then merged
  polars     polars' CSV reader on the lines, the record boundaries carried as a forward-filled key, one
             sort by (corrected time, rank, line number), written by polars' CSV writer (streaming engine;
             polars 2.1 at 1,024 files stops with "POLARS_MAX_BLOCKING_THREAD_COUNT reached (512), this
             may indicate a deadlock": leave it out there)
  polars-ms  the same lines, each file sorted on its own, then a balanced tree of polars' `merge_sorted`
  duckdb     the same in SQL: read_text, lines with their number, a window for the record's time, ORDER BY,
             COPY to a file
  sort       GNU `LC_ALL=C sort -m -s` on the stamps (tears multi-line records: the speed reference)
  cat-out    the files copied to the output (the I/O floor: read and write the bytes, nothing else)
  cat        the files read to /dev/null (reading only)
Every contender that writes a timeline is first checked on small inputs (short and long records, multi-line,
out-of-order threads, clock offsets): its records must equal `distvlog merge`'s, byte for byte, in order (the
headers differ: only ours writes the merged timeline's header). One that differs is reported and not timed.
Ratios are to `sort` in the same configuration; CPU seconds (GNU time's user + system, children included)
are the figure to compare on a shared machine, where wall time is mostly waiting for a core.

    python benchmarks/bench_merge_alternatives.py [--ranks 4,64,256] [--mb 150] [--rounds 3]
        [--contenders merge,parse,merge-2p,polars,polars-ms,duckdb,sort,cat-out,cat]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_merge import (  # noqa: E402
    add_config_arguments,
    generate,
    merge_command,
    one_config,
    sort_command,
    timed,
)

HERE = Path(__file__).resolve()
STAMP = r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} "  # a record's first line (a continuation line has no stamp)
NAMES = ["merge", "parse", "merge-2p", "polars", "polars-ms", "duckdb", "sort", "cat-out", "cat"]
REFERENCES = {"parse", "sort", "cat-out", "cat"}  # not the same job: timed, not checked


def head(path: Path) -> tuple[int, int, list[tuple[float, int]]]:
    """A rank file's rank, year and clock points (offset to rank 0 in µs, at local µs) from its meta record."""
    with open(path, "rb") as f:
        for line in f.read(1 << 16).split(b"\n")[:8]:
            if b"distvlog-meta " in line:
                meta = json.loads(line.split(b"distvlog-meta ", 1)[1])
                points = [tuple(meta[s].split()[::2]) for s in ("clock_start", "clock_end")]
                return meta["rank"], int(meta["created"][:4]), [(float(o), int(t)) for o, t in points]
    raise SystemExit(f"{path}: no distvlog-meta record")


def _polars_frames(files: list[Path]) -> list:
    """Each file as a polars LazyFrame of its lines (ts, rank, n, line): the record's corrected time on each
    of its lines, the line number in the file, the first line restamped; the header lines dropped."""
    import polars as pl

    frames = []
    for path in files:
        rank, year, ((o0, t0), (o1, t1)) = head(path)
        line = pl.col("line")
        local = (
            pl.concat_str(pl.lit(str(year)), line.str.slice(1, 20))
            .str.strptime(pl.Datetime("us"), "%Y%m%d %H:%M:%S%.f", strict=False)
            .dt.epoch("us")
        )
        frac = ((local - t0) / max(t1 - t0, 1)).clip(0.0, 1.0)
        corrected = local + (o0 + (o1 - o0) * frac).round(0, mode="half_to_even").cast(pl.Int64)
        first = line.str.contains(STAMP)
        stamp = pl.from_epoch(pl.col("ts"), "us").dt.strftime("%m%d %H:%M:%S%.6f")
        frames.append(
            pl.scan_csv(
                path,
                has_header=False,
                separator="\x01",
                quote_char=None,
                schema={"line": pl.String},
                row_index_name="n",
                empty_string_is_null=False,
            )
            .with_columns(first.alias("first"), pl.when(first).then(corrected).forward_fill().alias("ts"))
            .filter(pl.col("ts").is_not_null())  # the file's header lines
            .with_columns(
                pl.when("first").then(pl.concat_str(line.str.slice(0, 1), stamp, line.str.slice(21))).otherwise(line),
                pl.lit(rank).alias("rank"),
            )
            .select("ts", "rank", "n", "line")
        )
    return frames


def _sink(frame, out: Path) -> None:
    frame.select("line").sink_csv(out, include_header=False, separator="\x01", quote_style="never", engine="streaming")


def merge_polars(files: list[Path], out: Path) -> None:
    """One sort of all the files' lines."""
    import polars as pl

    _sink(pl.concat(_polars_frames(files)).sort("ts", "rank", "n"), out)


def merge_polars_sorted(files: list[Path], out: Path) -> None:
    """Each file sorted on its own, then merged pairwise in a balanced tree of `merge_sorted` (ties go left,
    to the lower ranks), which polars' streaming engine can run without holding every file."""
    frames = [f.sort("ts", "n") for f in _polars_frames(files)]
    while len(frames) > 1:
        frames = [a.merge_sorted(b, key="ts") for a, b in zip(frames[::2], frames[1::2])] + frames[len(frames) & ~1 :]
    _sink(frames[0], out)


def merge_duckdb(files: list[Path], out: Path) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    heads = [(str(p), *h) for p, h in zip(files, map(head, files))]
    con.execute(
        "CREATE TABLE heads (filename VARCHAR, rank BIGINT, year BIGINT, o0 DOUBLE, t0 BIGINT, o1 DOUBLE, t1 BIGINT)"
    )
    con.executemany(
        "INSERT INTO heads VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(f, r, y, o0, t0, o1, t1) for f, r, y, ((o0, t0), (o1, t1)) in heads],
    )
    con.execute(
        f"""
        COPY (
          WITH raw AS (SELECT filename, string_split(content, chr(10)) AS l FROM read_text(?)),
          lines AS (SELECT filename, unnest(l) AS line, generate_subscripts(l, 1) AS n, len(l) AS last FROM raw),
          stamped AS (
            SELECT lines.*, rank, regexp_matches(line, '{STAMP}') AS first,
              CASE WHEN regexp_matches(line, '{STAMP}') THEN epoch_us(strptime(year || substr(line, 2, 20), '%Y%m%d %H:%M:%S.%f')) END AS local,
              o0, t0, o1, t1
            FROM lines JOIN heads USING (filename) WHERE NOT (n = last AND line = '')),
          corrected AS (
            SELECT *, local + CAST(round_even(o0 + (o1 - o0) * greatest(0.0, least(1.0, (local - t0) / greatest(t1 - t0, 1))), 0) AS BIGINT) AS c
            FROM stamped),
          keyed AS (
            SELECT *, last_value(c IGNORE NULLS) OVER (PARTITION BY filename ORDER BY n ROWS UNBOUNDED PRECEDING) AS ts
            FROM corrected)
          SELECT CASE WHEN first THEN substr(line, 1, 1) || strftime(make_timestamp(ts), '%m%d %H:%M:%S.%f') || substr(line, 22)
                 ELSE line END
          FROM keyed WHERE ts IS NOT NULL ORDER BY ts, rank, n
        ) TO '{out}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01')
        """,
        [[str(p) for p in files]],
    )


def merge_two_processes(files: list[Path], out: Path) -> None:
    """Each half of the files merged by its own process (in parallel), then the two merged again."""
    halves = [files[: len(files) // 2], files[len(files) // 2 :]]
    parts = [out.with_name(f"{out.name}.part{i}") for i in range(2)]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent.parent))
    procs = [subprocess.Popen(merge_command(h, p), env=env, stderr=subprocess.DEVNULL) for h, p in zip(halves, parts)]
    if any(p.wait() for p in procs):
        raise SystemExit("merge-2p: a half failed")
    subprocess.run(merge_command(parts, out), env=env, stderr=subprocess.DEVNULL, check=True)
    for p in parts:
        p.unlink()


def parse_only(files: list[Path], out: Path) -> None:
    """Our reader alone: every block of every file parsed (records found, stamps read, clock-corrected and
    rewritten), nothing merged or written. What `merge` costs beyond it is the merge, the gather, the write."""
    from distvlog.tools.read import open_sources

    for source in open_sources([str(f) for f in files]):
        while (block := source.next_block()) is not None:
            block.release()


RUNNERS = {
    "parse": parse_only,
    "polars": merge_polars,
    "polars-ms": merge_polars_sorted,
    "duckdb": merge_duckdb,
    "merge-2p": merge_two_processes,
}


def command(name: str, files: list[Path], out: Path) -> list[str]:
    if name == "merge":
        return merge_command(files, out)
    if name == "sort":
        return sort_command(files, out)
    if name == "cat-out":
        return ["sh", "-c", 'out=$1; shift; exec cat "$@" > "$out"', "cat", str(out)] + [str(f) for f in files]
    if name == "cat":
        return ["cat"] + [str(f) for f in files]  # (timed sends stdout to /dev/null)
    return [sys.executable, str(HERE), "--run", name, "-o", str(out)] + [str(f) for f in files]


def available(name: str) -> str | None:
    """Why a contender cannot run here (its library is missing), or None."""
    module = {"polars": "polars", "polars-ms": "polars", "duckdb": "duckdb"}.get(name)
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"{module} not installed (pip install {module})"
    return None


def records(path: Path) -> bytes:
    """A merged file's records: everything from the first stamped line (the headers differ)."""
    text = path.read_bytes()
    first = re.search(STAMP.encode(), text, re.M)
    return text[first.start() :] if first else b""


def check(names: list[str], tmp: Path) -> dict[str, str]:
    """Which contenders' records differ from `distvlog merge`'s on small inputs, and how."""
    bad: dict[str, str] = {}
    for ranks, kind in ((5, "short"), (3, "long"), (40, "short")):
        run = tmp / f"check-{ranks}-{kind}"
        run.mkdir()
        files = [run / f"rank-{r}.log" for r in range(ranks)]
        for r, f in enumerate(files):
            generate(f, r, 3000 // ranks * 2, seed=100 + r, ranks=ranks, kind=kind)
        timed(merge_command(files, run / "merge.out"), run / "merge.out")
        want = records(run / "merge.out")
        for name in names:
            if name in REFERENCES or name == "merge" or name in bad:
                continue
            got_path = run / f"{name}.out"
            timed(command(name, files, got_path), got_path)
            got = records(got_path)
            if got != want:
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                line = want[:at].count(b"\n") + 1
                bad[name] = (
                    f"{ranks} ranks, {kind}: differs from line {line} of the records ({len(got)} vs {len(want)} bytes)"
                )
        shutil.rmtree(run)
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, "4,64,256", 150)
    parser.add_argument("--contenders", default=",".join(NAMES))
    parser.add_argument("--run", choices=sorted(RUNNERS), help=argparse.SUPPRESS)  # one contender, in this process
    parser.add_argument("-o", dest="out", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        RUNNERS[args.run]([Path(f) for f in args.files], Path(args.out))
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # sort -m and polars open every file
    names = []
    for name in args.contenders.split(","):
        if (why := available(name)) is not None:
            print(f"# {name}: skipped, {why}")
        else:
            names.append(name)
    tmp = Path(tempfile.mkdtemp(prefix="bench_merge_alt.", dir=args.dir))
    print(f"# load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    try:
        for name, why in check(names, tmp).items():
            print(f"# {name}: not the same output, not timed: {why}")
            names.remove(name)
        base = "sort" if "sort" in names else names[0]
        print(f"# medians of {args.rounds} rounds; x = ratio to {base} in the same configuration; RSS: the peak")
        print(
            f"{'ranks':>5} {'kind':>7} {'input':>7} {'contender':>9} {'wall':>7} {'x':>6} {'CPU':>7} {'x':>6} {'RSS':>7}"
        )
        for ranks in map(int, args.ranks.split(",")):
            for kind in args.kinds.split(","):
                r = one_config(
                    tmp,
                    ranks,
                    kind,
                    args.mb,
                    args.rounds,
                    lambda files, out: {n: command(n, files, out) for n in names},
                )
                wall, cpu, rss = r["time"], r["cpu"], r["rss_kb"]
                for name in names:
                    print(
                        f"{ranks:>5} {kind:>7} {r['mb']:>5.0f}MB {name:>9} {wall[name]:>6.2f}s "
                        f"{wall[name] / wall[base]:>5.2f}x {cpu[name]:>6.2f}s {cpu[name] / max(cpu[base], 0.01):>5.2f}x "
                        f"{rss[name] / 1024:>5.0f}MB",
                        flush=True,
                    )
        print(f"# load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
