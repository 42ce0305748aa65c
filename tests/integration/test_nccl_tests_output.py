"""``testbed nccl`` writes nccl-tests' table and JSON (issue 29, item 3): a 4-rank ring all-gather of 64 KiB
and 128 KiB (1 warm-up, 2 iterations out of place, 2 in place) with ``-I 1 -J FILE`` on a 4-host fabric of
the quickstart's 10 Mbit/s links. The printed rows are read by position as a script reads nccl-tests'
(size count type redop root | time algbw busbw #wrong i_min i_max i_p99 i_cv% | the same in place); count
is each rank's share (src/all_gather.cu AllGatherGetCollByteCount: S / (n x 4) for float); busbw = algbw x
(n-1)/n (AllGatherGetBw), on the reference system (emulated time / scale factor); the JSON has the keys
tools/analyze_perf_json.py reads, with per-iteration times equal to the run's rank_ops.csv."""
import json
import sys
from pathlib import Path

import pytest

from conftest import EXIT_FAITHFUL, EXIT_NOT_JUDGED, REPO, run_cli
from testbed.results.rundir import RunDir

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_nccl_command import _analyze_perf_json_reads  # noqa: E402

SIZES = [65536, 131072]
N = 4


def test_nccl_prints_nccl_tests_table_and_json(tmp_path):
    scenario = tmp_path / "four.yaml"
    scenario.write_text((REPO / "scenarios" / "quickstart.yaml").read_text()
                        .replace("spines: 2", "spines: 1").replace("leaves: 4", "leaves: 2"))
    out = tmp_path / "out.json"
    res = run_cli("nccl", scenario, "-c", "allgather", "-b", "64K", "-e", "128K", "-n", "2", "-w", "1", "-I", "1",
                  "-J", out, "--results", tmp_path / "r", timeout=300)
    # a 64 KiB op moves 16 frames per rank: the throughput check may be left not judged (exit 6)
    assert res.returncode in (EXIT_FAITHFUL, EXIT_NOT_JUDGED), f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    (run_dir,) = [p.parent for p in (tmp_path / "r").glob("*/summary.json")]
    run = RunDir.open(run_dir)
    scale = run.summary["scale_factor"]
    ops, rank_ops = run.ops, run.rank_ops
    timed = ops[~ops["warmup"].astype(bool)]

    rows = [ln.split() for ln in res.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(rows) == len(SIZES) and all(len(f) == 21 for f in rows)
    for f, size in zip(rows, SIZES):
        assert f[:5] == [str(size), str(size // (N * 4)), "float", "none", "-1"]
        for half, c in ((False, 5), (True, 13)):
            mine = timed[(timed["size_bytes"] == size) & (timed["in_place"].astype(bool) == half)]
            assert len(mine) == 2
            time_us = mine["time_rank_avg_us"].mean() / scale
            algbw = size / (time_us / 1e6) / 1e9
            assert float(f[c]) == pytest.approx(time_us, abs=0.006)
            assert float(f[c + 1]) == pytest.approx(algbw, abs=0.006)
            assert float(f[c + 2]) == pytest.approx(algbw * (N - 1) / N, abs=0.006)
            assert f[c + 3] == "N/A"
            # i_min, i_max: the slowest rank's own time per iteration, min and max over the 2 iterations
            mine_ranks = rank_ops[rank_ops["op_id"].isin(mine["op_id"])]
            per_iter = ((mine_ranks["t_end_ns"] - mine_ranks["t_start_ns"]) / 1e3 / scale).groupby(
                mine_ranks["op_id"]).max()
            assert float(f[c + 4]) == pytest.approx(per_iter.min(), abs=0.006)
            assert float(f[c + 5]) == pytest.approx(per_iter.max(), abs=0.006)
        # a ring at the link's goodput: busbw near 400 Gbit/s x payload efficiency = 49.3 GB/s reference
        assert 40 < float(f[7]) < 55
    lines = res.stdout.splitlines()
    start = lines.index("# Collective test starting: all_gather_perf")
    # the table's first line: nccl-tests' version line, then the testbed's title
    assert lines[start - 2] == ("# nccl-tests version 2.19.6 nccl-headers=0 nccl-library=0 "
                                "(testbed emulation: no NCCL library)")
    assert lines[start - 1].startswith("# testbed nccl: ring all-gather on 4 hosts, host link 10 Mbit/s")
    assert lines[start + 1] == ("# nThread 1 nGpus 1 minBytes 65536 maxBytes 131072 step: 2(factor) warmup iters: 1 "
                                "iters: 2 agg iters: 1 validation: 0 graph: 0 unalign: 0")
    assert any(ln.startswith("# Avg bus bandwidth    : ") for ln in lines)
    assert f"# Writing JSON output to {out}" in res.stdout

    data = json.loads(out.read_text())
    _analyze_perf_json_reads(data, in_place=False)
    _analyze_perf_json_reads(data, in_place=True)
    assert [r["size"] for r in data["results"]] == SIZES and [r["count"] for r in data["results"]] == [4096, 8192]
    assert data["config"]["per_iter_timing"] == "true" and data["config"]["iterations"] == 2
    assert {k: data["config"][k] for k in ("minimum_bytes", "maximum_bytes", "step_factor")} == {
        "minimum_bytes": 65536, "maximum_bytes": 131072, "step_factor": 2}
    assert [d["hostname"] for d in data["config"]["devices"]] == [run.host_names[r] for r in range(N)]
    first = data["results"][0]["out_of_place_per_iter"]
    oop0 = timed[(timed["size_bytes"] == SIZES[0]) & ~timed["in_place"].astype(bool)]["op_id"].tolist()
    for rank, times in enumerate(first["per_process_max_times_us"]):
        want = rank_ops[(rank_ops["rank"] == rank) & rank_ops["op_id"].isin(oop0)].sort_values("op_id")
        assert times == pytest.approx(((want["t_end_ns"] - want["t_start_ns"]) / 1e3 / scale).tolist())
