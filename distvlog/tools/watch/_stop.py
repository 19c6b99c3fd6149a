"""Ending a job after an error verdict (`--stop-on-error`): through its launcher (`distvlog launch --watch`),
else with SIGTERM to the pids the rank files' meta records name on this host (a rank on another host is
named, as one this command cannot stop). Each rank logs where it was, as on any SIGTERM; once the job has
ended, the verdict is appended to every rank's file (a W record of distvlog's own): it is the last record.
(Appended while the rank lives, it would sit past its reserve until the rank's exit moved it up, and a
follower would read the file again.)"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from ...wording import ranks_text
from ..stacks import RankFile

VERDICT = "distvlog watch stopped the job after the verdict: "


def stop(ranks: list[RankFile], launcher: Callable[[], None] | None, say: Callable[[str], None]) -> None:
    from ..merge import alive

    if launcher is not None:
        say("stopping the job through its launcher")
        launcher()
        return
    stopped, elsewhere = [], []
    for r in ranks:
        if not r.here or r.pid is None:
            elsewhere.append(r)
        elif alive(r.pid):
            with contextlib.suppress(OSError):
                os.kill(r.pid, signal.SIGTERM)
                stopped.append(r.rank)
    if stopped:
        say(f"sent SIGTERM to {ranks_text(stopped)} (the pids their files name on this host)")
    for r in elsewhere:
        say(f"rank {r.rank} runs on {r.host or 'an unknown host'} (pid {r.pid}): it cannot be stopped from here")


def leave_verdict(ranks: list[RankFile], verdict: str) -> None:
    from ...logger import append_record

    for r in ranks:
        with contextlib.suppress(OSError):
            append_record(r.path, "warning", VERDICT + verdict, rank=r.rank)
