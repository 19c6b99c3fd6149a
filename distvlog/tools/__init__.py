"""The timeline tools, a room per job: `read` (the one record reader: files, scanning, blocks, headers,
records, runs, and what the tools say about their input), `merge`, `trace` and `diff`. Each command's
module provides `register(subparsers)` for `distvlog.cli`."""
