"""What `merge` pays for holding our own (version 2) files to their format: every record's first line carries
its `[rank R]` tag, or it is counted as damage (format, section 5). The same merge with the check switched off
(in the benchmark's process only) is the baseline, and `merge` against itself the A/A control; the three run
in turn, round by round, on the same generated rank files.

    python benchmarks/bench_damage_check.py [--ranks 16] [--mb 290] [--rounds 7]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_merge import add_config_arguments, configs, merge_command

# merge, with the parser's check of each record's tag answering "nothing damaged" without looking
UNCHECKED = (
    "import sys\n"
    "from distvlog.cli import main\n"
    "from distvlog.tools.read import _glog\n"
    "_glog.GlogParser._untagged = lambda self, data, n, starts, ends, ok: None\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def contenders(files: list[Path], out: Path) -> dict[str, list[str]]:
    merge = merge_command(files, out)
    return {"merge": merge, "unchecked": [sys.executable, "-c", UNCHECKED, *merge[3:]], "merge (A/A)": merge}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, "16", 290)
    parser.set_defaults(kinds="short", rounds=7)
    args = parser.parse_args()
    print(
        f"{'ranks':>5} {'input':>7} {'merge':>8} {'unchecked':>10} {'merge A/A':>10} {'ratio':>6} {'A/A':>6}  (CPU s)"
    )
    for r in configs(args, contenders):
        cpu = r["cpu"]
        print(
            f"{r['ranks']:>5} {r['mb']:>5.0f}MB {cpu['merge']:>7.2f}s {cpu['unchecked']:>9.2f}s "
            f"{cpu['merge (A/A)']:>9.2f}s {cpu['merge'] / cpu['unchecked']:>5.3f} "
            f"{cpu['merge (A/A)'] / cpu['merge']:>5.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
