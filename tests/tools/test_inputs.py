"""What merge, trace and diff say about their input: counts in words, damaged, mixed or missing files."""

from __future__ import annotations

from tools_logfiles import T0, ours

ONE_RANK = [(T0 + 10, "I grad_stats node=mul1GradNode slot=grad_out step=0 norm=1.0 nan=0 inf=0 v=5"),
            (T0 + 20, "I grad_stats node=mul1GradNode slot=grad_x step=0 norm=1.0 nan=0 inf=0 v=5"),
            (T0 + 30, "I allreduce begin step=0 bucket=0 v=1"),
            (T0 + 40, "I allreduce end step=0 bucket=0 checksum=aa v=1")]


def test_counts_of_one_are_singular(tmp_path, cli):
    (tmp_path / "rank-0.log").write_text(ours(0, [], world=1) + "cut sh")
    code, _, err = cli("merge", tmp_path)
    assert code == 0 and ("1 record from 1 file (rank 0: 1) to stdout; 3 header lines; 1 line skipped "
                          "(1 truncated last line)\n") in err
    (tmp_path / "rank-0.log").write_text(ours(0, [(T0, "E one error")], world=1))
    code, _, err = cli("trace", tmp_path, "-o", tmp_path / "t.json")
    assert code == 0 and "1 event (1 error) on 1 rank to" in err
    (tmp_path / "rank-0.log").write_text(ours(0, ONE_RANK, world=1))
    code, out, _ = cli("diff", tmp_path)
    assert code == 0 and out.startswith("1 rank, 2 gradient statistics, 1 allreduce (aligned by step)\n")
