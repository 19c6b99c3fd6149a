"""A rank's Flight Recorder collectives as columns: what diff's checks read of its dump, ~45 bytes an entry
(a thousand dumps of 2,000 entries), aligned across ranks by (process group, sequence id).

Texts (groups, ops, signatures, sites) are codes into one `Texts` table for every rank, so that ranks
compare codes. Entries come in bulk from a dump read into columns, or one record at a time (a merged
JSON-lines file holding Flight Recorder records); point-to-point entries are counted and not kept: no
check reads them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_COLUMNS = {"pg": np.int32, "seq": np.int64, "sig": np.int32, "op": np.int32, "site": np.int32}
_COLUMNS |= {"created": np.int64, "timeout_ms": np.int64, "done": np.bool_}
_NO_SEQ = -1


class Texts:
    """Strings as codes, shared by every rank's entries."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self.texts: list[str] = []

    def code(self, text: str) -> int:
        code = self._codes.get(text)
        if code is None:
            code = self._codes[text] = len(self.texts)
            self.texts.append(text)
        return code


def signature(op: str, sizes: Any, dtypes: Any) -> str:
    """What ranks must agree on to run one collective together."""
    return f"{op} {sizes} {dtypes}"


class Flight:
    """One rank's collectives, oldest first (see the module's docstring)."""

    def __init__(self) -> None:
        self.entries = 0  # point-to-point ones too
        self.knows_done = False  # its dump says which collectives completed (NCCL with timing on; gloo: never)
        self.any_done = False  # ... or which entries, point-to-point ones too
        self._parts: list[dict[str, np.ndarray]] = []
        self._rows: list[list] = []  # entries fed one at a time: [*columns, p2p]
        self._columns: dict[str, np.ndarray] | None = None
        self._by_pg: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return self.entries

    def add_dump(self, dump: Any, texts: Texts) -> None:
        """Every entry of a dump read into columns (what `Source.read_flight` gives: the reader of dumps is
        imported only where a file is one)."""
        shapes = dump.shapes
        per_shape = {
            "pg": [texts.code(s.pg) for s in shapes],
            "sig": [texts.code(signature(s.op, s.middle["sizes"], s.middle["dtypes"])) for s in shapes],
            "op": [texts.code(s.op) for s in shapes],
            "site": [texts.code(s.site) for s in shapes],
            "timeout_ms": [s.tail["timeout_ms"] or 0 for s in shapes],
            "done": [s.middle["state"] == "completed" for s in shapes],
        }
        shape = dump.shape
        p2p = np.array([s.p2p for s in shapes], bool)[shape] if shapes else np.zeros(0, bool)
        done = np.array(per_shape.pop("done"), bool)[shape] | dump.completions() if shapes else np.zeros(0, bool)
        self.entries += len(shape)
        kept = ~p2p
        self.knows_done |= bool(done[kept].any())
        self.any_done |= bool(done.any())
        part = {name: np.array(values, _COLUMNS[name])[shape[kept]] for name, values in per_shape.items()}
        part |= {"seq": dump.seqs(_NO_SEQ)[kept], "created": dump.created()[kept], "done": done[kept]}
        self._parts.append(part)
        self._columns = None

    def add(self, pg: int, seq: int | None, sig: int, op: int, site: int, created: int, timeout_ms: int | None, done: bool, p2p: bool) -> None:  # fmt: skip
        """One entry, from its record."""
        self._rows.append([pg, _NO_SEQ if seq is None else seq, sig, op, site, created, timeout_ms or 0, done, p2p])
        self.entries += 1
        self.knows_done |= done and not p2p
        self.any_done |= done
        self._columns = None

    def complete(self, pg: int, seq: int | None, p2p: bool) -> None:
        """The completion of the last entry fed one at a time of that group and sequence id."""
        seq = _NO_SEQ if seq is None else seq
        for row in reversed(self._rows):
            if row[0] == pg and row[1] == seq and row[-1] == p2p:
                row[7] = self.any_done = True
                self.knows_done |= not p2p
                self._columns = None
                return

    def column(self, name: str) -> np.ndarray:
        """One column over every collective, oldest first."""
        if self._columns is None:
            rows = [r for r in self._rows if not r[-1]]
            fed = {n: np.array([r[i] for r in rows], k) for i, (n, k) in enumerate(_COLUMNS.items())}
            if len(self._parts) > 1:
                self._parts = [{n: np.concatenate([p[n] for p in self._parts]) for n in _COLUMNS}]
            bulk = self._parts[0] if self._parts else None
            if bulk is None or not rows:
                self._columns = fed if bulk is None else bulk
            else:
                self._columns = {n: np.concatenate((bulk[n], fed[n])) for n in _COLUMNS}
            self._by_pg = {}
        return self._columns[name]

    def groups(self) -> list[int]:
        return np.unique(self.column("pg")).tolist()

    def of_group(self, pg: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequence ids in order, the row of each) of one group's collectives; of an id met twice, the last."""
        got = self._by_pg.get(pg)
        if got is None:
            rows = np.flatnonzero(self.column("pg") == pg)
            seqs = self.column("seq")[rows]
            order = np.argsort(seqs, kind="stable")
            seqs, rows = seqs[order], rows[order]
            last = np.append(seqs[1:] != seqs[:-1], True) if len(seqs) else np.zeros(0, bool)
            got = self._by_pg[pg] = (seqs[last], rows[last])
        return got

    def row(self, pg: int, seq: int) -> int | None:
        """The row of a group's collective, None where this rank never issued it."""
        seqs, rows = self.of_group(pg)
        at = int(np.searchsorted(seqs, seq))
        return int(rows[at]) if at < len(seqs) and seqs[at] == seq else None

    def last_seq(self, pg: int) -> int:
        """The group's last sequence id here (0: none)."""
        seqs, _ = self.of_group(pg)
        return int(seqs[-1]) if len(seqs) else 0

    def at_common(self, pg: int, seqs: np.ndarray, name: str) -> np.ndarray:
        """A column at a group's sequence ids, every one of which this rank issued."""
        own, rows = self.of_group(pg)
        return self.column(name)[rows[np.searchsorted(own, seqs)]]

    def blocked(self) -> int | None:
        """The row where the rank is: its first collective not completed where completions are known, else
        its last."""
        n = len(self.column("pg"))
        if not n:
            return None
        if not self.knows_done:
            return n - 1
        pending = np.flatnonzero(~self.column("done"))
        return int(pending[0]) if len(pending) else None
