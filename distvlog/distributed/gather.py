"""Bring every rank's log files into rank 0's run directory over MPI, for clusters whose ranks log to
node-local disks.

Rank 0 serves one rank at a time (so nobody floods it with unexpected messages): the rank sends a
manifest of its files, rank 0 answers which ones it lacks, then the rank streams those in fixed-size
chunks, so neither side ever holds a whole file in memory. A file rank 0 already sees with the same
header (a shared filesystem) is not copied.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..format import rank_file_stem
from ..logger import IDENTITY, SINK, content_size, get_logger

if TYPE_CHECKING:
    from mpi4py import MPI

CHUNK_BYTES = 1 << 20
HEAD_BYTES = 1024  # the header: host, pid and creation time tell two files apart
_GO, _MANIFEST, _WANTED, _DATA = 21, 22, 23, 24
_log = get_logger("distvlog.distributed.gather")


def _own_files() -> list[Path]:
    if SINK.path is None:
        return []
    return sorted(SINK.path.parent.glob(f"{rank_file_stem(IDENTITY.rank)}.*"))  # with files of forked children


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(HEAD_BYTES)


def _receive_file(comm: MPI.Intracomm, peer: int, target: Path) -> int:
    """Write the chunks `peer` sends into `target` until its empty closing chunk; returns the bytes."""
    from mpi4py import MPI

    buf, status, total = bytearray(CHUNK_BYTES), MPI.Status(), 0
    with open(target, "xb") as out:
        while True:
            comm.Recv([buf, MPI.BYTE], source=peer, tag=_DATA, status=status)
            n = status.Get_count(MPI.BYTE)
            if n == 0:
                return total
            out.write(memoryview(buf)[:n])
            total += n


def _send_file(comm: MPI.Intracomm, path: Path) -> None:
    from mpi4py import MPI

    left = content_size(path)  # (not the reserve of a file still being written)
    with open(path, "rb") as f:
        while left > 0 and (chunk := f.read(min(CHUNK_BYTES, left))):
            comm.Send([chunk, MPI.BYTE], dest=0, tag=_DATA)
            left -= len(chunk)
    comm.Send([b"", MPI.BYTE], dest=0, tag=_DATA)


def _wanted(run_dir: Path, manifest: list[tuple[str, bytes]]) -> list[bool]:
    """Rank 0's answer per file: copy it unless this directory already has it (a shared filesystem)."""
    answers = []
    for name, head in manifest:
        target = run_dir / name
        if target.exists():
            if _head(target)[: len(head)] != head:
                _log.warning(
                    f"gather: {target} exists but is not the file of the same name sent by another "
                    "rank; kept the existing one"
                )
            answers.append(False)
        else:
            answers.append(True)
    return answers


def gather(comm: MPI.Intracomm) -> tuple[int, int]:
    """Collective: copy every rank's files into rank 0's run directory; rank 0 gets (files, bytes) copied."""
    SINK.flush()
    if comm.rank != 0:
        go = comm.irecv(source=0, tag=_GO)
        while not go.Test():
            time.sleep(0.001)
        go.wait()
        files = _own_files()
        comm.send([(p.name, _head(p)) for p in files], dest=0, tag=_MANIFEST)
        for path, wanted in zip(files, comm.recv(source=0, tag=_WANTED)):
            if wanted:
                _send_file(comm, path)
        return 0, 0
    if SINK.path is None:
        _log.info("gather: this rank has no log file yet")  # opens it, so the run directory exists
    run_dir = SINK.path.parent
    copied = nbytes = 0
    for peer in range(1, comm.size):
        comm.send(True, dest=peer, tag=_GO)
        manifest = comm.recv(source=peer, tag=_MANIFEST)
        answers = _wanted(run_dir, manifest)
        comm.send(answers, dest=peer, tag=_WANTED)
        for (name, _head_bytes), wanted in zip(manifest, answers):
            if wanted:
                nbytes += _receive_file(comm, peer, run_dir / name)
                copied += 1
    _log.info(
        f"gather: copied {copied} files ({nbytes} bytes) from other ranks into {run_dir}", files=copied, bytes=nbytes
    )
    return copied, nbytes
