"""A crashed process's Python stacks, read as a record of its rank (the format's section 1).

faulthandler prints them (`Fatal Python error: ...`, then every thread's stack) at the end of the file, after
the reserve the process left. The reader shows them as one F record at `distvlog:0` with the time, thread and
rank of the last record before the reserve, so a merged timeline places the crash right after it: the text
from its first line to the end of the file is read as that record, rendered as the file's own format.
"""

from __future__ import annotations

import os

from ... import format as fmt

CRASH_START = b"Fatal Python error: "
_TAIL = 64 << 10  # where the stacks are looked for: the file's last bytes (faulthandler prints a few KB)
_BACK = 1 << 18  # what is read at a time, back over the reserve, to the last record before it
_RESERVE_READS = 8  # up to 2 MiB of reserve (a window made for a larger record may be larger: not found)


def find(fd: int, size: int) -> tuple[int, bytes] | None:
    """(where the stacks start, the record they are read as) in a plain file, None when it has none."""
    start = max(0, size - _TAIL)
    tail = os.pread(fd, size - start, start)
    at = tail.rfind(b"\0" + CRASH_START)
    if at < 0:
        return None
    text = tail[at + 1 :]
    end = start + at  # back over the reserve, to the content before it
    before = b""
    for _ in range(_RESERVE_READS):
        if end <= 0:
            break
        read_from = max(0, end - _BACK)
        before = os.pread(fd, end - read_from, read_from).rstrip(b"\0")
        if before:
            if read_from:  # (from the first line start on)
                before = before[before.find(b"\n") + 1 :]
            break
        end = read_from
    record = _render(before, text)
    return (start + at + 1, record) if record is not None else None


def _render(before: bytes, text: bytes) -> bytes | None:
    """The stacks as a record like the last one in `before` (its format, time, thread and rank)."""
    message = text.decode("utf-8", "replace").strip("\n")
    *whole, _cut = before.split(b"\n")  # (what follows the last newline is empty, or a record cut by the death)
    for line in reversed(whole):
        if line.startswith(b"{"):
            try:
                last = fmt.loads(line)
            except ValueError:
                continue
            if isinstance(last, dict) and fmt.TS in last:
                own = {key: last.get(key) for key in (fmt.TS, fmt.RANK, fmt.WORLD_SIZE, fmt.TID)}
                own.update({fmt.SEVERITY: "F", fmt.FILE: fmt.OWN_FILE, fmt.LINE: fmt.OWN_LINE, fmt.EVENT: message})
                return fmt.dumps(own) + b"\n"
            continue
        last = fmt.parse_glog(line.decode("utf-8", "replace")) if fmt.RECORD_START.match(line) else None
        if last is not None and last.rank is not None:
            prefix = fmt.prefix_text("F", last.stamp, last.tid, fmt.OWN_FILE, fmt.OWN_LINE, last.rank)
            return fmt.record_text(prefix, message, "").encode()
    return None
