"""Flight Recorder dumps from a real torchrun job read as records of the ranks that dumped them."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

from distvlog.tools.read import open_sources, read_records


def _records(path: Path) -> list:
    return list(read_records(open_sources([str(path)])))


def test_every_entry_is_a_record_of_its_rank(job):
    """A pickle dump and its JSON twin give the same entries: op, group, sequence id, sizes, the user frame."""
    for form in ("healthy", "healthy-json"):
        recs = [r for r in _records(job / "fr" / form) if r.event == "fr enqueued"]
        assert sorted({r.rank for r in recs}) == [0, 1, 2, 3]
        mine = [r for r in recs if r.rank == 2]
        assert [(r.fields["op"], r.fields["seq"], r.fields["pg"]) for r in mine] == [
            ("all_reduce", 1, "0"),
            ("all_reduce", 2, "0"),
            ("all_reduce", 3, "0"),
            ("broadcast", 4, "0"),
            ("barrier", 5, "0"),
        ]
        assert mine[0].fields["sizes"] == [[8]] and mine[0].fields["dtypes"] == ["Float"]
        assert [r.ts for r in mine] == sorted(r.ts for r in mine)
    pickled = [r for r in _records(job / "fr" / "healthy") if r.event == "fr enqueued"]
    assert pickled[0].file == "fr_jobs.py" and pickled[0].line > 0  # the frame that called all_reduce
    assert any("in collectives" in frame for frame in pickled[0].fields["stack"])


def test_dump_record_says_what_the_dump_holds(job):
    dumps = {r.rank: r for r in _records(job / "fr" / "skip") if r.event == "fr dump"}
    assert sorted(dumps) == [0, 1, 2, 3]
    assert dumps[2].fields["entries"] == 2 and dumps[0].fields["entries"] == 3
    assert dumps[0].fields["version"] == "2.10"
    assert list(dumps[0].fields["groups"].values())[0]["ranks"] == [0, 1, 2, 3]


def test_malicious_pickle_runs_nothing(tmp_path, cli):
    """A 'dump' whose pickle calls os.system is refused in one line, exit 2; the command never ran."""

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    data = pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [Evil()]})
    (tmp_path / "nccl_trace_rank_0").write_bytes(data)
    code, out, err = cli("merge", tmp_path / "nccl_trace_rank_0")
    assert code == 2 and not (tmp_path / "pwned").exists()
    assert err.count("\n") == 1 and "refused" in err and "posix.system" in err, err


def test_cut_dump_keeps_its_whole_entries(job, tmp_path, cli):
    """A pickle cut short anywhere keeps the entries before the cut, never a half one, and says so once."""
    data = (job / "fr" / "healthy" / "nccl_trace_rank_1").read_bytes()
    kept = []
    for end in [*range(len(data) // 2, len(data), len(data) // 16), len(data) - 1]:
        (tmp_path / "nccl_trace_rank_1").write_bytes(data[:end])
        code, out, err = cli("merge", "--format", "jsonl", tmp_path / "nccl_trace_rank_1")
        records = [json.loads(line) for line in out.splitlines()]
        entries = [r for r in records if r["event"] == "fr enqueued"]
        assert code == 0 and [r["seq"] for r in entries] == list(range(1, len(entries) + 1))
        assert all(r["state"] == "scheduled" and "sizes" in r for r in entries)
        assert err.count("cut short") == 1 and records[-1]["cut"] is True
        kept.append(len(entries))
    assert kept == sorted(kept) and kept[-1] == 5 and any(0 < k < 5 for k in kept)


def test_rank_from_name_or_rank_of(job, tmp_path, cli):
    """Torch names a dump <prefix><rank>: a host name in the prefix does not matter; a name without a rank
    needs --rank-of."""
    shutil.copy(job / "fr" / "healthy" / "nccl_trace_rank_3", tmp_path / "node-a_trace_3")
    shutil.copy(job / "fr" / "healthy" / "nccl_trace_rank_3", tmp_path / "dump.pkl")
    assert {r.rank for r in _records(tmp_path / "node-a_trace_3")} == {3}
    code, _, err = cli("merge", tmp_path / "dump.pkl")
    assert code == 2 and "--rank-of" in err and err.count("\n") == 1
    code, out, _ = cli("merge", "--rank-of", "dump.pkl=5", tmp_path / "dump.pkl")
    assert code == 0 and "[rank 5] fr enqueued" in out


def test_newer_version_read_with_one_warning(job, tmp_path, cli):
    dump = json.loads((job / "fr" / "healthy-json" / "nccl_trace_rank_0").read_bytes())
    dump["version"] = "9.1"
    for entry in dump["entries"]:
        entry["a_field_of_the_future"] = 1
    (tmp_path / "trace_0").write_text(json.dumps(dump))
    code, out, err = cli("merge", tmp_path / "trace_0")
    assert code == 0 and out.count("fr enqueued") == 5
    assert err.count("'9.1' is newer") == 1


def test_trace_draws_collectives_on_their_track(job, tmp_path, cli):
    """Each entry a slice on the rank's Flight Recorder track; gloo knows no completion: a slice ends where the
    rank issued its next collective, its last one at the rank's last record (the dump)."""
    code, _, err = cli("trace", job / "fr" / "skip", "-o", tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    slices = [e for e in events if e.get("cat") == "collective"]
    assert code == 0 and len(slices) == 11 and {e["ph"] for e in slices} == {"X"}
    rank2 = sorted((e for e in slices if e["pid"] == 2), key=lambda e: e["ts"])
    assert [e["name"] for e in rank2] == ["all_reduce #1 group 0", "all_reduce #2 group 0"]
    assert rank2[0]["ts"] + rank2[0]["dur"] == rank2[1]["ts"] and rank2[1]["args"]["ends"].startswith("unfinished")
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name" and e["pid"] == 2}
    assert tracks == {"thread Flight Recorder"}


def test_cut_json_dump_and_garbage(job, tmp_path, cli):
    """A JSON dump cut short keeps its whole entries; a file that only starts like a pickle is refused in
    one line."""
    data = (job / "fr" / "healthy-json" / "nccl_trace_rank_0").read_bytes()
    second = data.index(b'"collective_seq_id":3')  # inside the third entry
    (tmp_path / "trace_0").write_bytes(data[:second])
    code, out, err = cli("merge", "--format", "jsonl", tmp_path / "trace_0")
    seqs = [json.loads(line).get("seq") for line in out.splitlines()]
    assert code == 0 and seqs == [1, 2, None] and err.count("cut short") == 1
    (tmp_path / "garbage_1").write_bytes(b"\x80\x04" + b'"pg_config" "entries"' + bytes(range(256)))
    code, _, err = cli("merge", tmp_path / "garbage_1")
    assert code == 2 and err.count("\n") == 1 and "garbage_1" in err


def test_dump_text_is_its_records_text(job, tmp_path, cli):
    """merge writes a dump's records from each shape's text with the ids put in: the same lines as the
    records' own text (their JSON lines merged again), with starts, completions, durations and missing ids."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for rank in range(2):
        dump = json.loads((job / "fr" / "healthy-json" / f"nccl_trace_rank_{rank}").read_bytes())
        for i, entry in enumerate(dump["entries"]):
            entry["time_discovered_started_ns"] = entry["time_created_ns"] + 1000
            entry["time_discovered_completed_ns"] = entry["time_created_ns"] + 2000 if i % 2 else 0
            if i % 3 == 0:
                entry["duration_ms"] = 0.5 * i
        dump["entries"][1]["record_id"] = None
        dump["entries"][2]["collective_seq_id"] = "²"
        (dumps / f"trace_{rank}").write_text(json.dumps(dump))
    code, direct, _ = cli("merge", dumps)
    code2, jsonl, _ = cli("merge", "--format", "jsonl", dumps)
    (tmp_path / "merged.jsonl").write_text(jsonl)
    code3, again, _ = cli("merge", tmp_path / "merged.jsonl")
    records = [line for line in direct.splitlines() if "[rank " in line]
    assert code == code2 == code3 == 0 and len(records) > 20
    assert any("seq=None" in line for line in records) and any("duration_ms=" in line for line in records)
    assert records == [line for line in again.splitlines() if "[rank " in line]
