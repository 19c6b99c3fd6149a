"""`distvlog diff` on the Flight Recorder dumps of a real torchrun job with planted faults, and beside
torch's own analyzer (fr_trace) where that one runs."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The lines of fr_jobs.py that issue the collectives (marked `# line: NAME` there), as `fr_jobs.py:N`.
AT = {
    line.rpartition("# line: ")[2]: f"fr_jobs.py:{i}"
    for i, line in enumerate((Path(__file__).parent / "fr_jobs.py").read_text().splitlines(), 1)
    if "# line: " in line
}
VERDICTS = {
    "skip": f"rank 2 is one collective short in group 0: never issued all_reduce #3, which ranks 0,1,3 issued at "
    f"{AT['third']} and wait in; its #2 came from {AT['third']}, the others' from {AT['second']}",
    "extra": f"rank 1 is one collective ahead in group 0: issued all_reduce #4 at {AT['extra']}, which ranks 0,2,3 "
    "never did; waiting for them",
    "late": f"rank 3 issued all_reduce #2 of group 0 ({AT['second']}) ",
    "order": f"rank 0 used the process groups in another order: waiting at all_reduce #1 of group 1 ({AT['order']}) "
    f"for ranks 1-3, which wait at all_reduce #1 of group 2 ({AT['order']}) for it",
}


@pytest.mark.parametrize("fault", sorted(VERDICTS))
def test_each_fault_names_its_culprit_first(job, cli, fault):
    code, out, err = cli("diff", job / "fr" / fault)
    assert code == 1, out + err
    assert out.splitlines()[1].startswith(VERDICTS[fault]), out


def test_late_rank_is_timed_against_the_timeout(job, cli):
    code, out, _ = cli("diff", "--json", job / "fr" / "late")
    (late,) = json.loads(out)["errors"]
    assert late["kind"] == "fr_late" and late["rank"] == 3 and late["others"] == [0, 1, 2]
    assert late["late_s"] > late["timeout_s"] == 5


def test_healthy_dumps_pass_in_both_forms(job, cli):
    for form in ("healthy", "healthy-json"):
        code, out, _ = cli("diff", job / "fr" / form)
        assert code == 0 and out.startswith(
            "4 ranks: 20 Flight Recorder entries (aligned by process group and sequence"
        )
        assert "no divergence found by the checks that could run" in out


def test_json_dumps_give_the_same_verdict_without_frames(job, cli):
    code, out, _ = cli("diff", job / "fr" / "skip-json")
    assert code == 1 and out.splitlines()[1] == (
        "rank 2 is one collective short in group 0: never issued all_reduce #3, which ranks 0,1,3 issued and wait in"
    )


def test_the_missing_dump_is_the_culprit(job, tmp_path, cli):
    """The hung rank often leaves no dump: the others' dumps still say where they stopped. Gloo's dumps do
    not say what completed: a healthy job's dumps less one read the same way, so the verdict says 'may'."""
    for rank in (0, 1, 3):
        shutil.copy(job / "fr" / "skip" / f"nccl_trace_rank_{rank}", tmp_path)
    code, out, _ = cli("diff", tmp_path)
    assert code == 1 and out.splitlines()[1] == (
        f"rank 2 left no Flight Recorder dump; ranks 0,1,3 stopped at all_reduce #3 of group 0 ({AT['third']}), "
        "which it may not have reached (their dumps do not say what completed)"
    )
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    for rank in (0, 1, 2):
        shutil.copy(job / "fr" / "healthy" / f"nccl_trace_rank_{rank}", tmp_path)
    code, out, _ = cli("diff", tmp_path)
    assert code == 1 and "rank 3 left no Flight Recorder dump; ranks 0-2 stopped at barrier #5 of group 0" in out
    (tmp_path / "nccl_trace_rank_2").unlink()
    dump = pickle.loads((job / "fr" / "healthy" / "nccl_trace_rank_2").read_bytes())
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps({**dump, "entries": dump["entries"][:3]}))
    code, out, _ = cli("diff", tmp_path)  # rank 2's dump is behind: the ranks waiting for it are the culprits' peers
    assert code == 1 and out.splitlines()[1].startswith("rank 2 is 2 collectives short in group 0"), out


def test_mismatch_names_the_minority(job, tmp_path, cli):
    """Gloo aborts the receiving process on a size mismatch, leaving no dump: the healthy job's JSON dumps,
    with rank 2's third collective made a broadcast of 4 int64, stand for one."""
    for rank in range(4):
        dump = json.loads((job / "fr" / "healthy-json" / f"nccl_trace_rank_{rank}").read_bytes())
        if rank == 2:
            dump["entries"][2].update(profiling_name="gloo:broadcast", input_sizes=[[4]], input_dtypes=["Long"])
        (tmp_path / f"trace_{rank}").write_text(json.dumps(dump))
    code, out, _ = cli("diff", tmp_path)
    assert code == 1 and out.splitlines()[1].startswith(
        "rank 2 ran broadcast [[4]] ['Long'] as collective #3 of group 0 (flight_recorder:0), "
        "ranks 0,1,3 all_reduce [[8]] ['Float']"
    ), out


def _fr_trace(*directories: Path) -> list[subprocess.CompletedProcess]:
    """torch's analyzer on each directory, all at once (each run starts torch: seconds)."""
    command = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    runs = [
        subprocess.Popen([*command, str(d)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for d in directories
    ]
    out = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=240)
        out.append(subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr))
    return out


def test_beside_torchs_analyzer(job, tmp_path, cli):
    """fr_trace dies on gloo dumps (their pg_config names the default group "", its entries "0"); with the
    group keyed as NCCL keys it, it agrees on the skipped collective, names the three waiting ranks as
    'missing' where one rank ran ahead, and says nothing of the late rank."""
    faults = ("skip", "extra", "late")
    for fault in faults:
        shaped = tmp_path / fault
        shaped.mkdir()
        for path in (job / "fr" / fault).iterdir():
            dump = pickle.loads(path.read_bytes())  # our own job's dump: trusted
            dump["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
            (shaped / path.name).write_bytes(pickle.dumps(dump))
        assert cli("diff", shaped)[1].splitlines()[1].startswith(VERDICTS[fault])
    gloo, *shaped_runs = _fr_trace(job / "fr" / "skip", *(tmp_path / f for f in faults))
    assert "KeyError: ('0', 0)" in gloo.stderr
    said = dict(zip(faults, (run.stderr for run in shaped_runs)))  # it reports through logging, on stderr
    assert "missing ranks: {2}" in said["skip"]
    assert "missing ranks: {0, 2, 3}" in said["extra"]
    assert "missing ranks" not in said["late"]


def test_completions_place_each_rank_at_its_first_open_collective(job, tmp_path, cli):
    """Where dumps know completions (NCCL with timing), a rank is at its first collective not completed. No
    NCCL here: the healthy job's JSON dumps are given NCCL's states and times — ranks 0,1,3 completed #1-#4
    and started the barrier #5, rank 2 completed #1-#4 and never issued #5."""
    for rank in range(4):
        dump = json.loads((job / "fr" / "healthy-json" / f"nccl_trace_rank_{rank}").read_bytes())
        entries = dump["entries"][:4] if rank == 2 else dump["entries"]
        for entry in entries:
            done = entry["collective_seq_id"] < 5
            entry.update(state="completed" if done else "started", profiling_name="nccl:" + entry["profiling_name"][5:])
            entry["time_discovered_started_ns"] = entry["time_created_ns"] + 1000
            entry["time_discovered_completed_ns"] = entry["time_created_ns"] + 2000 if done else 0
        (tmp_path / f"trace_{rank}").write_text(json.dumps({**dump, "entries": entries}))
    code, out, _ = cli("diff", tmp_path)
    assert code == 1 and out.splitlines()[1] == (
        "rank 2 is one collective short in group 0: never issued barrier #5, which ranks 0,1,3 issued and wait in"
    ), out
    (tmp_path / "trace_2").unlink()
    code, out, _ = cli("diff", tmp_path)
    assert out.splitlines()[1] == (
        "rank 2 left no Flight Recorder dump; ranks 0,1,3 wait for it at barrier #5 of group 0 (flight_recorder:0)"
    )
    code, out, _ = cli("merge", "--format", "jsonl", tmp_path / "trace_0")
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events.count("fr started") == 5 and events.count("fr completed") == 4
    code, _, _ = cli("trace", tmp_path / "trace_0", "-o", tmp_path / "t.json")
    slices = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e.get("cat") == "collective"]
    assert [e["dur"] for e in sorted(slices, key=lambda e: e["ts"])][:4] == [2, 2, 2, 2]  # enqueue to completion
    assert sorted(slices, key=lambda e: e["ts"])[-1]["args"]["ends"].startswith("unfinished")


def test_dumps_and_their_merged_records_give_one_verdict(job, tmp_path, cli):
    """diff reads a dump's entries as they are, and the same entries as records (merge's JSON lines of the
    dumps): one verdict both ways, also where a rank's dump was cut short (it still counts as a dump)."""
    dumps = tmp_path / "skip"
    shutil.copytree(job / "fr" / "skip", dumps)
    data = (dumps / "nccl_trace_rank_0").read_bytes()
    (dumps / "nccl_trace_rank_0").write_bytes(data[: len(data) - 1])  # every entry whole, the pickle's end lost
    code, merged, err = cli("merge", "--format", "jsonl", dumps)
    assert code == 0 and "cut short" in err
    (tmp_path / "merged.jsonl").write_text(merged)
    verdicts = []
    for path in (dumps, tmp_path / "merged.jsonl"):
        code, out, _ = cli("diff", path)
        assert code == 1 and "no Flight Recorder dump" not in out, out
        verdicts.append(out.splitlines()[1])
    assert verdicts[0] == verdicts[1] == VERDICTS["skip"]


@pytest.mark.parametrize("cut", ["the culprit's", "every"])
def test_a_dump_cut_short_is_not_blamed_for_what_it_lost(job, tmp_path, cli, cut):
    """A dump cut short lost its last entries: the rank is not named for collectives past its cut where its
    group status (a pickle writes it before the entries) says it issued them, and is named where it says it
    did not, even when the cut took the entries that show it."""
    for rank in range(4):
        data = (job / "fr" / "skip" / f"nccl_trace_rank_{rank}").read_bytes()
        if rank == 2 or cut == "every":
            data = _cut_after_first_entry(data)
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(data)
    code, out, err = cli("diff", tmp_path)
    assert code == 1 and "cut short" in err, out + err
    assert out.splitlines()[1].startswith("rank 2 is one collective short in group 0: never issued "), out
    assert "#3, which ranks 0,1,3 issued" in out.splitlines()[1], out


def test_every_group_gets_its_verdict(job, tmp_path, cli):
    """A mismatch, and a late rank, in each of two process groups: both named, the first group's first."""
    for rank in range(4):
        dump = json.loads((job / "fr" / "healthy-json" / f"nccl_trace_rank_{rank}").read_bytes())
        second = [dict(e, pg_id=1, process_group=["1", "other"]) for e in dump["entries"]]
        for entry in second:
            entry["time_created_ns"] += 100 * 10**9 if (rank, entry["collective_seq_id"]) == (2, 1) else 0
        if rank == 3:
            dump["entries"][1]["input_sizes"] = [[9]]
        if rank == 1:
            second[2]["input_sizes"] = [[7]]
        dump["entries"] += second
        dump["pg_config"]["1"] = {"name": "1", "desc": "other", "ranks": "[0, 1, 2, 3]"}
        (tmp_path / f"trace_{rank}").write_text(json.dumps(dump))
    code, out, _ = cli("diff", "--json", tmp_path)
    errors = [(e["kind"], e.get("ranks") or [e.get("rank")], e["pg"]) for e in json.loads(out)["errors"]]
    assert code == 1 and errors == [
        ("fr_mismatch", [3], "0"),
        ("fr_mismatch", [1], "1"),
        ("fr_late", [2], "1"),
    ], out


def test_values_no_column_holds_are_read_as_absent(tmp_path, cli):
    """An untrusted dump's ids and times past 64 bits, digits of other scripts, lists where strings go: each
    value read as absent or as text, one line of verdict, no traceback."""

    def entry(seq, **odd):
        return {"collective_seq_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"], "record_id": seq,
                "profiling_name": "gloo:all_reduce", "time_created_ns": 1_796_004_674_000_000_000 + seq * 1000,
                "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
                "state": "scheduled", "timeout_ms": 5000, **odd}  # fmt: skip

    odd = [
        {"input_sizes": "DEEP"},  # (nested 1,000 deep: skipped, with a warning)
        {"timeout_ms": 60000.0},
        {"record_id": 10**30},
        {"collective_seq_id": "²"},
        {"time_created_ns": "9" * 5000},
        {"thread_id": ["not", "a", "tid"], "state": {"a": 1}},
        {"timeout_ms": -(2**70)},
    ]
    for rank in range(2):
        entries = [entry(seq) for seq in range(1, 4)] + [entry(4 + i, **o) for i, o in enumerate(odd) if rank == 1]
        if rank == 0:  # (orjson reads no integer past 64 bits: the file is read by json, whole)
            entries[2] |= {"duration_ms": 10**400, "time_discovered_completed_ns": entries[2]["time_created_ns"] + 5}
        dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}}
        text = json.dumps({**dump, "entries": entries})
        (tmp_path / f"trace_{rank}").write_text(text.replace('"DEEP"', "[" * 1000 + "]" * 1000))
    code, merged, err = cli("merge", "--format", "jsonl", tmp_path)
    assert code == 0 and "Traceback" not in err and "1 Flight Recorder entries nested too deep" in err, err
    assert "cut short" not in err
    enqueued = [json.loads(line) for line in merged.splitlines() if '"fr enqueued"' in line]
    assert len(enqueued) == 3 + 3 + len(odd) - 2  # (not placed: the one without a creation time, the deep one)
    assert any(r["record_id"] is None for r in enqueued) and any(r["seq"] is None for r in enqueued)
    assert [r["timeout_ms"] for r in enqueued if r["seq"] == 5] == [None]  # (60000.0: not an integer)
    code, out, err = cli("diff", tmp_path)
    assert code == 1 and "Traceback" not in err, out + err
    assert out.splitlines()[1] == (  # (#8 had no creation time; of two, neither side is the minority)
        "rank 0 is 7 collectives short in group 0: never issued all_reduce #10, which rank 1 issued and wait in"
    )


def _cut_after_first_entry(data: bytes) -> bytes:
    """The pickle cut where it holds one whole entry."""
    from distvlog.tools.read._flight import load

    return data[: next(n for n in range(64, len(data), 16) if load(data[:n])[0].get("entries"))]
