"""The `distvlog` command: `launch`, `merge`, `trace`, `diff`, `report`.

Each command lives in its own module, which provides `register(subparsers)`; the parser it adds sets
`run=<function(args) -> int>`. Bad input raises `InputError`: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import InputError
from .logger import SINK

COMMAND_MODULES = (
    "distvlog.launch.command",
    "distvlog.tools.merge",
    "distvlog.tools.trace",
    "distvlog.tools.diff",
    "distvlog.tools.report",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distvlog", description="Debug data-parallel training from per-rank logs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.set_defaults(commands=sub.choices)  # each command's parser, for its own usage in errors
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `merge A --rank-of A=0 B`: paths after an option are still paths
        if not hasattr(args, "paths") or any(e.startswith("-") for e in extra):
            args.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        args.paths += extra
    try:
        return int(args.run(args) or 0)
    except InputError as exc:
        print(f"distvlog {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `distvlog merge ... | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130


def command() -> int:
    """The `distvlog` executable. The tools' own process writes no log file: its records are no rank's."""
    SINK.discard()
    return main()


if __name__ == "__main__":
    sys.exit(command())
