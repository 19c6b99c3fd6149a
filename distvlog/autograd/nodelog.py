"""The engine's node log observer: `PassLog` writes a pass's `backward begin`/`backward end` records at the
engine's level 3 and, through the engine-neutral `NodeLog` (`distvlog.nodelog`), Paddle's lines for each node
whose level (its tag, else the engine's) is 3 or more.
"""

from __future__ import annotations

import numpy as np

from ..format import BACKWARD_BEGIN, BACKWARD_END
from ..logger import get_logger, level_for
from ..nodelog import ENGINE, NodeLog
from .engine import GraphTask, Observer
from .node import GradNode

_log = get_logger(ENGINE)


class PassLog(Observer):
    """The node log of one pass: its `backward begin`/`backward end` records at the engine's level 3, and
    a `NodeLog` for each node whose level (its tag, else the engine's) is 3 or more.

    It keeps the pass's tables, not the task (which holds its observers): no cycle keeps the gradients
    whose statistics it holds alive after the pass, until the garbage collector comes by."""

    def __init__(self, task: GraphTask, level: int) -> None:
        self.deps, self.holders, self.stops, self.pass_id = task.dependencies, task.holders, task.stops, task.pass_id
        self.level = level
        self.every_node = level >= 3  # (else only the tagged nodes can log)
        self.stats: dict[int, tuple] = {}  # grad_stats by gradient array: a node's input is its producer's output
        self.current: NodeLog | None = None
        self.held: list[bool] | None = None

    def pass_begin(self) -> None:
        if self.level >= 3:
            _log.vlog_at(3, BACKWARD_BEGIN, nodes=len(self.deps), roots=len(self.holders), **{"pass": self.pass_id})

    def node_begin(self, node: GradNode, grad: np.ndarray) -> None:
        level = node.vlog_level if node.vlog_level is not None else self.level
        if level < 3:
            self.current = None
            return
        nlog = self.current = NodeLog(node, level, self.pass_id, self.stats)
        holders = self.holders  # (Sum or Move is level 7's: what the next nodes held before this one ran)
        self.held = [nxt in holders for nxt in node.edges] if level >= 7 else None
        nlog.begin(grad)

    def node_finish(self, node: GradNode, grad: np.ndarray, outputs: tuple) -> None:
        nlog = self.current
        if nlog is not None:
            self.current = None
            nlog.finish(grad, outputs, self.deps, self.held)

    def pass_end(self) -> None:
        if self.level >= 3:
            run = len(self.deps) - len(self.stops)  # every node but grad()'s stops ran
            _log.vlog_at(3, BACKWARD_END, nodes_run=run, **{"pass": self.pass_id})


def observe_pass(task: GraphTask, tagged: list[GradNode]) -> tuple[Observer, ...]:
    """A `PassLog` when the engine's level or a tagged node's level is 3 or more (levels <= 2 print nothing)."""
    if not tagged and not _log.vlog_is_on(3):  # (no rule in force reaches 3: one comparison)
        return ()
    level = level_for(ENGINE)
    if level >= 3 or any(node.vlog_level is not None and node.vlog_level >= 3 for node in tagged):
        return (PassLog(task, level),)
    return ()
