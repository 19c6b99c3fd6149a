"""The `distvlog` command: `launch`, `merge`, `trace`, `diff`, `report`, `watch`, `stacks`.

Each command lives in its own module, which provides `register(subparsers)`; the parser it adds sets
`run=<function(args) -> int>`. Bad input raises `InputError`: one line on stderr, exit code 2.
Only the module of the command given is imported (the others' are imported for the top-level help):
start-up is most of a small merge's time.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import io
import os
import sys

from . import __version__
from .errors import InputError

COMMANDS = {
    "launch": "distvlog.launch.command",
    "merge": "distvlog.tools.merge",
    "trace": "distvlog.tools.trace",
    "diff": "distvlog.tools.diff",
    "report": "distvlog.tools.report",
    "watch": "distvlog.tools.watch",
    "stacks": "distvlog.tools.stacks",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `command`, only that command's module is imported (the others get bare entries)."""
    parser = argparse.ArgumentParser(
        prog="distvlog",
        description="Debug data-parallel training from per-rank logs.",
        epilog="`distvlog COMMAND --help` describes a command and its options.",
    )
    parser.add_argument("--version", action="version", version=f"distvlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(commands=sub.choices)  # each command's parser, for its own usage in errors
    for name, module in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, add_help=False)
    return parser


def main(argv: list[str] | None = None, *, own_process: bool = False) -> int:
    """Run `distvlog ARGV`. `own_process`: this process is the `distvlog` executable, whose records are no
    rank's: it writes no log file (the logger is loaded only by commands that use it, at their module's top)."""
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in COMMANDS else None
    if own_process and command not in (None, "launch"):
        # numpy's OpenBLAS starts a worker thread per core as numpy loads, which spins ~0.1 s waiting for
        # work: on 2 cores, ~90 ms of CPU and ~15 ms of a small merge's wall time. The timeline tools do no
        # linear algebra (nor start processes that would inherit this); the user's own setting stays.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        _give_freed_memory_back()
    parser = build_parser(command)
    if own_process and "distvlog.logger" in sys.modules:
        sys.modules["distvlog.logger"].SINK.discard()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:  # bare `distvlog`: what it can do, not a usage error
        parser.print_help()
        return 0
    if extra:  # `merge A --rank-of A=0 B`: paths after an option are still paths
        if not hasattr(args, "paths") or any(e.startswith("-") for e in extra):
            args.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        args.paths += extra
    if sys.stdout is None:  # started with stdout closed (`>&-`): a command that writes there says so, once
        _discard_stdout()  # (and no file the tool opens takes descriptor 1, as if it were stdout)
        sys.stdout = _Closed()
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # (what is left to write fails here, where it can be said, not at exit)
        return code
    except InputError as exc:
        print(f"distvlog {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `distvlog merge ... | head`
        sys.stderr.close()
        return 0
    except OSError as exc:  # the output cannot be written (`> /dev/full`, `>&-`): one line, never a traceback
        if exc.errno not in _UNWRITABLE:
            raise
        _discard_stdout()
        print(
            f"distvlog {args.command}: error: cannot write {exc.filename or 'the output'}: {exc.strerror}",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130


_UNWRITABLE = {errno.EBADF, errno.ENOSPC, errno.EFBIG, errno.EDQUOT}  # what writing to a closed or full output raises


def _give_freed_memory_back() -> None:
    """A timeline tool frees blocks of every input as it goes. glibc's malloc keeps freed memory up to a
    threshold that it raises as large blocks are freed: merging 1,024 Flight Recorder dumps peaked at
    250-300 MB, 220-245 MB with the threshold fixed at 1 MiB (our own 1,024 rank files: 220 -> 190 MB,
    64 of them: 146 -> 130 MB), for a few % more system time. Other C libraries keep their own policy."""
    import ctypes  # (numpy imports it anyway)

    if "MALLOC_TRIM_THRESHOLD_" in os.environ or "GLIBC_TUNABLES" in os.environ:  # (the user's own setting stays)
        return
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).mallopt(-1, 1 << 20)  # M_TRIM_THRESHOLD (fixing it also fixes the mmap threshold)


def _discard_stdout() -> None:
    """What is still buffered for stdout goes nowhere: the flush at exit would fail again, with a traceback."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:  # (1 itself when it was closed)
            os.dup2(devnull, 1)
            os.close(devnull)


class _Closed(io.TextIOBase):
    """sys.stdout when there is none: writing raises the OSError a closed descriptor gives."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed", "stdout")

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "stdout is closed", "stdout")


def command() -> int:
    """The `distvlog` executable."""
    try:
        return main(own_process=True)
    except BaseException:  # a tool's own failure: its traceback is no rank's record (the logger may have loaded)
        if "distvlog.logger" in sys.modules:
            sys.modules["distvlog.logger"].SINK.discard()
        raise


if __name__ == "__main__":
    sys.exit(command())
