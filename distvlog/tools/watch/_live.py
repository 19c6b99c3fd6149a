"""The watch of one running job: `merge --follow`'s reader hands over the records as the ranks write them,
diff's loader takes them in, and diff's checks judge the steps every rank has finished (what they find
there, they find once the job has ended: no later record can change it), earliest first. When no rank makes
progress for a while, the ranks are asked for their stacks (see _hang). When the job has ended, diff reads
the run as `distvlog diff` does, and what it finds that was not said yet is said then."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path

from ... import format as fmt
from ...errors import InputError
from ..diff import WANTED, Finding, History, Loader, Logs, analyse, line, load
from ..read import Record
from ..stacks import ask, rank_files
from . import _hang, _stop

POLL_S = 0.1
NO_FILES_S = 60.0  # a run directory in which no rank file appears this long is no job's
MIN_GAP_S = 0.2  # between two judgements of the finished steps, and at least 4x the last one's time
REREAD_WINDOW_US = 5_000_000  # a record this much older than the newest fed from its file was fed before
RECENT_KEPT = 100_000  # records kept to know one within that window read again
Emit = Callable[[Finding, bool, bool], None]  # (finding, is an error, the job was running)


class Watch:
    def __init__(
        self,
        run_dir: Path,
        emit: Emit,
        *,
        hang_after: float | None,
        stop_on_error: bool,
        launcher_stop: Callable[[], None] | None,
        job_ended: Callable[[], bool] | None,
        say: Callable[[str], None],
    ) -> None:
        from ..merge import Follow

        self.run_dir, self.emit_, self.say = run_dir, emit, say
        self.hang_after, self.stop_on_error, self.launcher_stop = hang_after, stop_on_error, launcher_stop
        self.loader = Loader()
        wanted = re.compile(b"|".join((WANTED.pattern, fmt.texts_pattern(fmt.STACKS_ANSWER).pattern)), re.M)
        self.follow = Follow(
            run_dir, None, None, take=self._feed, wanted=wanted, idle_s=math.inf, stop=job_ended, say=say
        )
        self.said: set[tuple] = set()
        self.errors = 0
        self.judge = Judge()
        self.new = False  # records came since the last judgement
        self.judged_at, self.judging_s = -math.inf, 0.0
        self.progress_at = time.monotonic()
        self.asked_since_progress = False
        self.own = self.written = 0  # records of the watch's own doing (stacks answers); the job's records read
        self.stopped_by: str | None = None  # the verdict --stop-on-error stopped the job for
        self.last: dict[int, str] = {}  # rank -> its last record, in short
        self.newest: dict[Path | None, int] = {}  # file -> the newest time of a record fed from it
        self.recent: dict[tuple, None] = {}  # the records fed last (in order), to know them when read again

    # -- records in ------------------------------------------------------------------------------------
    def _feed(self, records: list[Record]) -> None:
        for rec in records:
            if self._read_before(rec):
                continue
            first = rec.event.partition("\n")[0]
            if first == fmt.STACKS_ANSWER or first.startswith(_stop.VERDICT):
                self.own += 1  # the watch's own doing: no progress of the job's
                continue
            self.loader.feed(rec)
            self.last[rec.rank] = f"{rec.file}:{rec.line} {first[:120]}"
            self.new = True

    def _progress(self, now: float) -> None:
        """Any record the job wrote (decoded or not) is progress."""
        written = sum(t.records for t in self.follow.tails.values()) - self.own
        if written != self.written:
            self.written, self.progress_at, self.asked_since_progress = written, now, False

    def _read_before(self, rec: Record) -> bool:
        """Whether the record was fed already: the follow reads a file again from its start when it shrinks, as
        when a rank's reserve is cut with a record appended past it (the launcher's, on a signal)."""
        newest = self.newest.get(rec.path, -math.inf)
        if rec.ts < newest - REREAD_WINDOW_US:
            return True
        key = (rec.path, rec.ts, rec.tid, rec.line, rec.event, repr(rec.fields))
        if key in self.recent:
            return True
        self.recent[key] = None
        self.newest[rec.path] = max(newest, rec.ts)
        if len(self.recent) > 2 * RECENT_KEPT:
            self.recent = dict.fromkeys(list(self.recent)[-RECENT_KEPT:])
        return False

    # -- the loop ---------------------------------------------------------------------------------------
    def run(self) -> int:
        """Until the job has ended: 1 when an error was found, 0 when none."""
        started = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if not self.follow.tails and now - started > NO_FILES_S:
                    raise InputError(f"{self.run_dir}: no rank file appeared in {NO_FILES_S:g} s")
                if self.follow.ended(now):
                    self.follow.drain(now)
                    break
                self.follow.step(now)
                self._progress(now)
                self._judge_finished(now)
                self._look_for_hang(now)
                if all(t.caught_up for t in self.follow.tails.values()):  # (a backlog is read without a pause)
                    time.sleep(POLL_S)
        finally:
            self.follow.close()
        if self.stopped_by is not None:
            _stop.leave_verdict(rank_files(self.run_dir), self.stopped_by)
        self._final()
        return 1 if self.errors else 0

    def _live(self) -> bool:
        return not all(t.done for t in self.follow.tails.values())

    def _finished_steps(self) -> int:
        """The steps before this one every rank still running has finished (0 while a rank is not seen yet)."""
        tails = self.follow.tails.values()
        if not tails or len({t.rank for t in tails}) < self.follow.world:
            return 0
        ranks = self.loader.logs.ranks
        steps = [ranks[t.rank].last_step if t.rank in ranks else -1 for t in tails if not t.done]
        return min(steps) if steps else 0

    def _judge_finished(self, now: float) -> None:
        step = self._finished_steps()
        if not self.new or step <= self.judge.settled or now - self.judged_at < max(MIN_GAP_S, 4 * self.judging_s):
            return
        self.new = False
        started = time.monotonic()
        found = self.judge.up_to(self.loader.logs, step)
        self.judged_at, self.judging_s = now, time.monotonic() - started
        for finding in found:
            self._emit(finding, True)

    def _look_for_hang(self, now: float) -> None:
        quiet = now - self.progress_at
        if self.asked_since_progress or not self.follow.tails or not self._live():
            return
        limit = _hang.threshold(self.loader.logs, self.hang_after)
        if quiet < limit:
            return
        self.asked_since_progress = True
        ranks = rank_files(self.run_dir)
        verdict = _hang.judge(self.loader.logs, ask(self.run_dir, ranks), quiet, limit, dict(self.last))
        if verdict.error:  # what diff finds in the records so far, as it will once the job is stopped
            for finding in analyse(self.loader.logs).errors:
                self._emit(finding, True)
        self._emit(verdict, verdict.error)

    def _final(self) -> None:
        """The run read as `distvlog diff` reads it: what was not said yet."""
        try:
            report = analyse(load([str(self.run_dir)]))
        except InputError:
            if not self.said:
                raise
            return
        for finding in report.errors:
            self._emit(finding, True)
        for finding in report.notes:
            self._emit(finding, False)

    # -- verdicts out -------------------------------------------------------------------------------------
    def _emit(self, finding: Finding, error: bool) -> None:
        key = _identity(finding)
        if key in self.said:
            return
        self.said.add(key)
        self.errors += error
        self.judge.erred = self.judge.erred or error
        self.emit_(finding, error, self._live())
        if error and self.stop_on_error and self.stopped_by is None:
            self.stopped_by = (
                _hang.text(finding).partition("\n")[0] if isinstance(finding, _hang.Hang) else line(finding)
            )
            _stop.stop(rank_files(self.run_dir), self.launcher_stop, self.say)


class Judge:
    """The errors in a live run's finished steps, judged as they finish: what diff finds in them."""

    def __init__(self) -> None:
        self.settled = 0  # the steps before it are judged
        self.history: History = {}  # the norms of the steps before `settled`
        self.erred = False

    def up_to(self, logs: Logs, step: int) -> list[Finding]:
        """The errors in the steps before `step` (every rank has finished them), those found before included
        where they are found again."""
        finished = logs.before(step)
        if self.erred:  # what follows an error may be its consequence: judged with every step, as diff does
            errors = analyse(finished).errors
        else:
            # The norms (most of a judgement's cost) of the steps not judged yet only, with the history of the
            # earlier ones (what an explosion is judged by: no stretch of them goes on while no error was
            # found), so that judging them costs the same at step 10 and at step 10,000. The other checks
            # compare whole sequences (allreduces, the nodes each rank ran, which ranks log them): every step.
            report = analyse(finished, self.history, norms_since=self.settled)
            errors, self.history = report.errors, report.history
        self.settled = step
        self.erred = self.erred or bool(errors)
        return errors


def _identity(f: Finding) -> tuple:
    """What makes a finding the same one when it is found again with more records (a desync that differs
    in more steps): its kind, step and ranks (a pause and a hang at one step are two, a pause at the start and one later too)."""
    ranks = getattr(f, "ranks", None)
    if ranks is None:
        ranks = [getattr(f, "rank", None)]
    return (
        type(f).__name__,
        f.step,
        tuple(sorted(ranks, key=str)),
        getattr(f, "error", None),
        getattr(f, "starting", None),
    )
