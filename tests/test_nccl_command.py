"""``testbed nccl``: options mapped onto a scenario's workload (nccl-tests' -b -e -f -i -n -w -g -d -o -I -K -J,
and -c -a), bad options refused naming the option's key before anything is built, ``workload.ranks``, and
nccl-tests' table (read by position, as a script reads nccl-tests' output) and JSON (the keys
tools/analyze_perf_json.py reads) with worked values."""
import json
import math
from pathlib import Path

import pandas as pd

import pytest

from testbed.cli import CliError, build_parser, main
from testbed.workloads.sweep import nccl
from testbed.workloads import plan_workload
from testbed.results.nccl_table import (float_cell, format_nccl_table, iter_stats, nccl_count, nccl_json,
                                        nccl_rows, nccl_size, write_nccl_json)
from testbed.emulation.agents import taking_part
from testbed.results.tables import OPS_COLUMNS, ops_table, size_table
from testbed.spec.scenario import ScenarioError, parse_scenario
from traffic.protocol import OpDone


def _spec(*argv):
    return nccl.build_spec(build_parser().parse_args(["nccl", *argv]))


def test_options_replace_the_workload_of_the_default_scenario():
    spec = _spec("-b", "4K", "-e", "1M", "-f", "4", "-n", "3", "-w", "2", "-g", "4", "-c", "allgather")
    w = spec.workload
    assert (w.collective, w.algorithm, w.ranks, w.iterations, w.warmup_iterations) == ("allgather", "ring", 4, 3, 2)
    assert w.sizes.sizes() == [4096, 16384, 65536, 262144, 1048576] and w.max_bytes_per_size is None
    assert spec.output.table == "nccl" and spec.name == "nccl-allgather-ring" and w.in_place
    assert spec.fabric.mtu_bytes == 4200 and spec.transport.payload_bytes == 4096   # the quickstart's fabric
    ops = plan_workload(spec).ops
    # per size: 2 warm-ups, 3 timed out-of-place, then 3 timed in-place (nccl-tests' two BenchTime calls)
    assert {o.groups for o in ops} == {((0, 1, 2, 3),)} and len(ops) == 5 * (2 + 3 + 3)
    first = ops[:8]
    assert [(o.warmup, o.in_place, o.iteration) for o in first] == [
        (True, False, -2), (True, False, -1), (False, False, 0), (False, False, 1), (False, False, 2),
        (False, True, 0), (False, True, 1), (False, True, 2)]
    assert first[5].meta()["in_place"] is True and "in_place" not in first[2].meta()


def test_nccl_tests_options_go_to_output_nccl(tmp_path):
    spec = _spec("-d", "half", "-o", "max", "-I", "1", "-K", "1", "-J", str(tmp_path / "r.json"))
    o = spec.output.nccl
    assert (o.datatype, o.op, o.per_iter, o.per_iter_skip, o.json_path) == ("half", "max", True, 1,
                                                                             str(tmp_path / "r.json"))
    assert _spec().output.nccl.json_path is None and _spec().output.nccl.datatype == "float"


@pytest.mark.parametrize("collective, n, elt, nbytes, want", [
    # all-gather/reduce-scatter/all-to-all: each rank's share rounded down to 16 B (GetCollByteCount's base)
    ("allgather", 3, 4, 65536, 65520), ("allgather", 4, 4, 65536, 65536), ("reducescatter", 3, 4, 65536, 65520),
    ("alltoall", 6, 8, 1 << 20, 1048512), ("allgather", 4, 1, 100, 64),
    # the others: whole elements
    ("allreduce", 3, 4, 65536, 65536), ("allreduce", 3, 8, 1001, 1000), ("broadcast", 8, 2, 4097, 4096),
    ("sendrecv", 2, 4, 64, 64), ("allgather", 4, 4, 32, 0),
])
def test_nccl_size_is_what_nccl_tests_runs(collective, n, elt, nbytes, want):
    assert nccl_size(collective, nbytes, n, elt) == want


@pytest.mark.parametrize("collective, n, elt, size, want", [
    ("allreduce", 4, 4, 1 << 20, 262144), ("broadcast", 4, 4, 1 << 20, 262144), ("sendrecv", 4, 2, 1 << 20, 524288),
    ("allgather", 4, 4, 1 << 20, 65536), ("reducescatter", 4, 4, 1 << 20, 65536), ("alltoall", 4, 4, 1 << 20, 65536),
    ("allgather", 3, 4, 65520, 5460),
])
def test_count_is_nccl_tests_count_per_collective(collective, n, elt, size, want):
    """The count argument of the NCCL call (src/*.cu GetCollByteCount's paramcount): all-gather's is each
    rank's sendcount, S / (n x 4) for float, not S / 4."""
    assert nccl_count(collective, size, n, elt) == want


def test_sizes_follow_nccl_tests_steps():
    assert _spec("-c", "allgather", "-g", "3", "-b", "64K", "-e", "256K").workload.sizes.sizes() == [
        65520, 131040, 262128]
    assert _spec("-b", "64k", "-e", "200K", "-f", "1", "-i", "64K").workload.sizes.sizes() == [65536, 131072, 196608]
    assert _spec("-b", "1000", "-e", "1000", "-d", "double", "-g", "3").workload.sizes.sizes() == [1000]


@pytest.mark.parametrize("argv, words", [
    (["--check", "1"], "--check 1: the emulated transport moves payload bytes"),
    (["-c", "0"], "-c 0: -c is the collective here (nccl-tests has a binary per collective: allgather, allreduce"),
    (["-r", "2"], "-r 2: a broadcast here roots at the first rank"),
    (["-c", "allgather", "-g", "4", "-b", "32", "-e", "64"], "-b 32: allgather on 4 ranks moves 0 bytes below 64 B"),
    (["-b", "1M", "-e", "4K"], "invalid sizes for 'minbytes' and 'maxbytes': 1048576 > 4096"),
    (["-n", "2", "-K", "2"], "-K 2: per-iteration skip must be between 0 and 1"),
    (["-b", "lots"], "-b lots: 'lots' is not a size"),
])
def test_nccl_tests_options_refused_clearly(argv, words):
    with pytest.raises(ScenarioError) as info:
        _spec(*argv)
    assert words in str(info.value)


@pytest.mark.parametrize("argv, words", [(["-d", "complex"], "argument -d/--datatype: invalid choice: 'complex'"),
                                         (["-o", "all"], "argument -o/--op: invalid choice: 'all'"),
                                         (["-I", "2"], "argument -I/--per_iter_timing: invalid choice: 2")])
def test_datatype_op_and_per_iter_outside_their_values_are_refused(argv, words):
    with pytest.raises(CliError) as info:
        build_parser().parse_args(["nccl", *argv])
    assert words in str(info.value)


def test_channels_come_from_the_option_else_the_scenario():
    assert _spec().workload.channels == 1
    assert _spec("--channels", "4").workload.channels == 4
    dual = Path(__file__).resolve().parents[1] / "scenarios" / "dual_plane.yaml"
    assert _spec(str(dual)).workload.channels == 2
    with pytest.raises(ScenarioError, match="workload.channels"):
        _spec("--channels", "33")


def test_default_algorithm_is_ring_else_the_first_registered():
    assert _spec("-c", "alltoall").workload.algorithm == "direct"
    assert _spec("-c", "broadcast").workload.algorithm == "ring"
    assert _spec("-c", "allreduce", "-a", "halving_doubling").workload.algorithm == "halving_doubling"


@pytest.mark.parametrize("argv, words", [
    (["-c", "allreduce", "-a", "bruck"], "workload.algorithm = 'bruck' is not registered"),
    (["-g", "9"], "workload.ranks: 9 is above the fabric's 8 hosts"),
    (["-g", "1"], "workload.ranks"),
])
def test_bad_options_name_the_workload_key(argv, words):
    with pytest.raises(ScenarioError) as info:
        _spec(*argv)
    assert words in str(info.value) and "-g = workload.ranks" in str(info.value)


def test_ranks_only_for_a_size_sweep():
    with pytest.raises(ScenarioError, match="workload.ranks = 4 applies to a size sweep"):
        parse_scenario({"workload": {"ranks": 4, "simai": {"path": "w.txt"}}})


def test_nccl_needs_root_and_says_so(capsys, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["nccl", "-c", "allreduce"]) == 2
    assert "'testbed nccl' needs root" in capsys.readouterr().err


def _run_tables(collective: str, n: int, size: int, rank_s, algorithm: str = "ring", iters: int = 2,
                in_place: bool = True, warmup: int = 1):
    """ops and rank_ops of a sweep of one ``size``: ``warmup`` warm-ups, ``iters`` out-of-place, then
    ``iters`` in-place ops (when ``in_place``); rank r of the k-th timed op took ``rank_s(k, r)`` s, all ranks
    starting together."""
    meta, rows, k, t0 = {}, [], 0, 1_700_000_000 * 10**9
    plan = [(True, False)] * warmup + [(False, False)] * iters + ([(False, True)] * iters if in_place else [])
    timed = 0
    for op_id, (wu, ip) in enumerate(plan):
        meta[op_id] = {"size_bytes": size, "iteration": 0, "warmup": wu, "group_size": n, "collective": collective,
                       "algorithm": algorithm, **({"in_place": True} if ip else {})}
        for r in range(n):
            t = 1.0 if wu else rank_s(timed, r)
            rows.append({"op_id": op_id, "rank": r, "group_size": n, "t_start_ns": t0, "t_end_ns": t0 + int(t * 1e9)})
        t0 += 10**10
        timed += 0 if wu else 1
    return ops_table(rows, meta, n), pd.DataFrame(rows)


def _fields(text: str) -> list[list[str]]:
    """The rows of nccl-tests' table as a script reads them: every line not starting with '#', split."""
    return [ln.split() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


#: (collective, algorithm, n, size, count, busbw factor): nccl-tests' *GetCollByteCount and *GetBw
CASES = [("allreduce", "ring", 4, 1 << 20, 262144, 1.5), ("allgather", "ring", 4, 1 << 20, 65536, 0.75),
         ("reducescatter", "ring", 4, 1 << 20, 65536, 0.75), ("alltoall", "direct", 4, 1 << 20, 65536, 0.75),
         ("broadcast", "ring", 4, 1 << 20, 262144, 1.0), ("sendrecv", "ring", 2, 1 << 20, 262144, 1.0),
         ("allreduce", "ring", 8, 1 << 20, 262144, 1.75)]


@pytest.mark.parametrize("collective, algorithm, n, size, count, factor", CASES)
def test_nccl_table_rows_read_by_position(collective, algorithm, n, size, count, factor):
    """A 1 MiB op on n ranks, out-of-place ranks 1.0 s each, in-place 2.0 s, scale factor 40000: nccl-tests'
    time is 1e6 / 40000 = 25 us (reference system), algbw = 1048576 B / 25 us = 41.94 GB/s, busbw = algbw x the
    collective's factor; in-place 50 us, half of those. Columns by position: size count type redop root |
    time algbw busbw #wrong | time algbw busbw #wrong."""
    ops, rank_ops = _run_tables(collective, n, size, lambda k, r: 1.0 if k < 2 else 2.0, algorithm)
    rows = nccl_rows(ops, rank_ops, 40000)
    text = format_nccl_table(rows, scale_factor=40000, host_link_bps=10e6, goodput_bps=9.5e6)
    (f,) = _fields(text)
    assert len(f) == 13
    redop = "sum" if collective in ("allreduce", "reducescatter", "sendrecv") else "none"
    assert f[:5] == [str(size), str(count), "float", redop, "0" if collective == "broadcast" else "-1"]
    algbw = size / 25e-6 / 1e9
    assert f[5:9] == ["25.00", f"{algbw:.2f}", f"{algbw * factor:.2f}", "N/A"]
    assert f[9:13] == ["50.00", f"{algbw / 2:.2f}", f"{algbw * factor / 2:.2f}", "N/A"]
    avg = (algbw * factor + algbw * factor / 2) / 2     # over sizes and both halves, as common.cu
    (line,) = [ln for ln in text.splitlines() if ln.startswith("# Avg bus bandwidth")]
    assert line == "# Avg bus bandwidth    : %g " % avg
    assert "# Out of bounds values : 0 OK" in text.splitlines()
    emulated = [ln for ln in text.splitlines() if ln.startswith("# testbed: emulated") and "size" not in ln]
    assert [ln.split()[3:8] for ln in emulated] == [
        [str(size), "oop", "1000000", "1000000", f"{size * 8 * factor / 1e6:.3f}"],
        [str(size), "ip", "2000000", "2000000", f"{size * 8 * factor / 2e6:.3f}"]]


def test_nccl_table_layout_is_nccl_tests_own():
    """Field widths of util.cu: %12li  %12li  %8s  %6s  %6s, then per half  %7s  %6s  %6s and #wrong; the
    header lines as writeResultHeader prints them (column names at the same positions as the fields)."""
    ops, rank_ops = _run_tables("allgather", 4, 1 << 20, lambda k, r: 1.0)
    rows = nccl_rows(ops, rank_ops, 40000, datatype="half")
    lines = format_nccl_table(rows, scale_factor=40000, host_link_bps=10e6, goodput_bps=9.5e6,
                              hosts={0: "h1", 1: "h2", 2: "h3", 3: "h4"}).splitlines()
    row = next(ln for ln in lines if not ln.startswith("#"))
    assert row == ("     1048576        131072      half    none      -1" + "    25.00   41.94   31.46    N/A" * 2)
    names = next(ln for ln in lines if ln.startswith("#       size"))
    assert names.split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                             "time", "algbw", "busbw", "#wrong"]
    for col, field in (("size", "1048576"), ("count", "131072"), ("root", "-1")):   # right-aligned alike
        assert names.index(col) + len(col) == row.index(field) + len(field)
    assert "#  Rank  2 Group  0 Pid      0 on         h3 device  0 [0000:00:00] emulated host (testbed)" in lines
    assert "# Collective test starting: all_gather_perf" in lines


def test_float_cells_as_nccl_tests_getfloatstr():
    assert [float_cell(v, 7) for v in (25.0, 12345.678, 1234567.8, 123456789.0)] == [
        "  25.00", "12345.7", "1234568", "1.2e+08"]
    assert [float_cell(v, 6) for v in (0.004, 999.999, 12345.6, 1234567.0)] == ["  0.00", "1000.0", " 12346", " 1e+06"]


def test_per_iteration_columns_and_stats():
    """-I 1: per half i_min i_max i_p99 i_cv% over the iterations, each the slowest rank's own time (max over
    ranks, util.cu); 4 timed iterations whose slowest ranks took 1, 2, 3, 4 s -> 25, 50, 75, 100 us."""
    ops, rank_ops = _run_tables("allreduce", 2, 1 << 20, lambda k, r: (k % 4 + 1) * (1.0 if r else 0.5), iters=4)
    rows = nccl_rows(ops, rank_ops, 40000)
    assert rows[0].out_of_place.times_us == pytest.approx([25, 50, 75, 100])
    r0, r1 = rows[0].out_of_place.rank_times_us
    assert r0 == pytest.approx([12.5, 25, 37.5, 50]) and r1 == pytest.approx([25, 50, 75, 100])
    st = iter_stats([25.0, 50.0, 75.0, 100.0])
    sd = math.sqrt(sum((x - 62.5) ** 2 for x in (25, 50, 75, 100)) / 4)
    assert st == pytest.approx({"skipped_iterations": 0, "min_us": 25, "max_us": 100, "avg_us": 62.5, "p50_us": 75,
                                "p95_us": 100, "p99_us": 100, "stdev_us": sd, "cv_pct": sd / 62.5 * 100})
    text = format_nccl_table(rows, scale_factor=40000, host_link_bps=10e6, goodput_bps=9.5e6, per_iter=True)
    (f,) = _fields(text)
    assert len(f) == 21
    # time = mean over ranks and iterations of each rank's own time: (0.75 x 62.5) us
    assert f[5] == "46.88" and f[9:13] == ["25.00", "100.00", "100.00", f"{sd / 62.5 * 100:.2f}"]
    assert f[17:21] == f[9:13]
    names = next(ln for ln in text.splitlines() if ln.startswith("#       size")).split()
    assert names[10:14] == ["i_min", "i_max", "i_p99", "i_cv%"] and len(names) == 22


def test_without_in_place_ops_the_in_place_half_reads_na():
    ops, rank_ops = _run_tables("allreduce", 4, 65536, lambda k, r: 1.0, in_place=False)
    (f,) = _fields(format_nccl_table(nccl_rows(ops, rank_ops, 1.0), scale_factor=1.0, host_link_bps=10e6,
                                     goodput_bps=9.5e6))
    assert len(f) == 13 and f[9:] == ["N/A"] * 4


def _analyze_perf_json_reads(data: dict, in_place: bool) -> None:
    """Every key nccl-tests' tools/analyze_perf_json.py reads, as it reads them (print_overview, print_stats_table,
    print_straggler, print_spikes, print_iter0, node_groups/print_nodes, print_consistency, default_sizes)."""
    key = "in_place_per_iter" if in_place else "out_of_place_per_iter"
    assert isinstance(data["version"], int) and isinstance(data["results"], list)
    cfg = data["config"]
    assert isinstance(cfg["iterations"], int) and isinstance(cfg.get("aggregated_iterations", 1), int)
    assert isinstance(cfg.get("per_iter_skip", 0), int)
    for r in data["results"]:
        assert isinstance(r["size"], int)
        pi = r[key]
        for k in ("max_us", "avg_us", "min_us", "p99_us", "cv_pct"):
            assert isinstance(pi[k], float)
        times, rows = pi["times_us"], pi["per_process_max_times_us"]
        assert len(rows) == len(cfg["devices"]) and all(len(t) == len(times) for t in rows)
        # print_consistency: times_us == max over the process rows, per iteration
        assert all(abs(t - max(row[i] for row in rows)) < 0.001 for i, t in enumerate(times))
    assert all("hostname" in d for d in cfg["devices"])


def test_json_has_nccl_tests_layout(tmp_path):
    """util.cu's keys and nesting (version 3), -I 1 per-iteration blocks for both halves, read back from the
    file as analyze_perf_json.py reads it; an existing file is not replaced (FILE.0, as util.cu)."""
    ops, rank_ops = _run_tables("allgather", 4, 1 << 20, lambda k, r: 1.0 + 0.1 * r + 0.01 * k, iters=3)
    rows = nccl_rows(ops, rank_ops, 40000)
    doc = nccl_json(rows, scale_factor=40000, host_link_bps=10e6, argv=["testbed", "nccl", "-I", "1"],
                    hosts={r: f"h{r + 1}" for r in range(4)}, warmup_iters=1, per_iter=True)
    path = write_nccl_json(tmp_path / "r.json", doc)
    assert path == tmp_path / "r.json" and write_nccl_json(tmp_path / "r.json", doc) == tmp_path / "r.json.0"
    data = json.loads(path.read_text())
    assert list(data)[:9] == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                              "out_of_bounds", "average_bus_bandwidth"]
    assert data["version"] == 3 and data["args"] == ["testbed", "nccl", "-I", "1"]
    cfg = data["config"]
    assert {k: cfg[k] for k in ("nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "warmup_iters", "iterations",
                                "aggregated_iterations", "validation", "per_iter_timing", "per_iter_skip")} == {
        "nthreads": 1, "ngpus": 1, "minimum_bytes": 1 << 20, "maximum_bytes": 1 << 20, "warmup_iters": 1,
        "iterations": 3, "aggregated_iterations": 1, "validation": 0, "per_iter_timing": "true", "per_iter_skip": 0}
    assert [d["hostname"] for d in cfg["devices"]] == ["h1", "h2", "h3", "h4"]
    (r,) = data["results"]
    assert list(r) == ["size", "count", "type", "redop", "root", "out_of_place", "out_of_place_per_iter", "in_place",
                       "in_place_per_iter", "actual_iterations", "experiment_name"]
    assert (r["size"], r["count"], r["type"], r["redop"], r["root"]) == (1 << 20, 65536, "float", "none", "    -1")
    assert r["out_of_place"]["nwrong"] is None and r["actual_iterations"] == 3
    # rank 3 is the slowest: 1.3 + 0.01 k s -> / 40000 = 32.5, 32.75, 33.0 us
    assert r["out_of_place_per_iter"]["times_us"] == pytest.approx([32.5, 32.75, 33.0])
    assert r["in_place_per_iter"]["times_us"] == pytest.approx([33.25, 33.5, 33.75])
    assert r["out_of_place"]["time"] == pytest.approx((1.15 + 0.01) / 40000 * 1e6)
    assert r["out_of_place"]["bus_bw"] == pytest.approx(r["out_of_place"]["alg_bw"] * 0.75)
    assert data["average_bus_bandwidth"]["bandwidth"] == pytest.approx(
        (r["out_of_place"]["bus_bw"] + r["in_place"]["bus_bw"]) / 2)
    assert data["out_of_bounds"] == {"count": 0, "okay": "true"}
    _analyze_perf_json_reads(data, in_place=False)
    _analyze_perf_json_reads(data, in_place=True)


def _op_records(n_hosts: int, ranks: int, rank_s: float = 1.0) -> list:
    """op 0 as the agents answer it with ``-g ranks`` on ``n_hosts``: ranks 0..ranks-1 ran ``rank_s`` each
    (rank r starting r ms late), the other hosts answered at once with an idle record (group_size 0)."""
    t0 = 1_700_000_000 * 10**9
    out = []
    for r in range(n_hosts):
        start = t0 + r * 1_000_000
        if r < ranks:
            out.append(OpDone(op_id=0, rank=r, group_index=0, group_size=ranks, t_start_ns=start,
                              t_end_ns=start + int(rank_s * 1e9), sent_bytes=1, rx_msgs=1, t_rx_done_ns=start))
        else:
            out.append(OpDone(op_id=0, rank=r, group_index=None, group_size=0, t_start_ns=start, t_end_ns=start,
                              sent_bytes=0, rx_msgs=0, t_rx_done_ns=start))
    return out


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_ranks_below_the_host_count_report_over_those_ranks_only(ranks):
    """``-g N`` on 8 hosts, 1 MiB all-reduce, each of the N ranks took 1.0 s: nccl-tests' time is 1.0 s (the
    mean over the N ranks; the idle hosts' 0 s records are no ranks), algbw = 8.389 Mbit/s, busbw = algbw x
    2(N-1)/N (N = 2: 8.389, 4: 12.583, 8: 14.680 Mbit/s). Counting the 8 - N idle hosts as 0 s (the bug) would
    have made the time N/8 s and busbw 8/N times too high (19.7 Mbit/s on a 10 Mbit/s link at N = 4)."""
    meta = {0: {"size_bytes": 1 << 20, "iteration": 0, "warmup": False, "group_size": ranks}}
    recs = _op_records(8, ranks)
    kept = taking_part(recs, [tuple(range(ranks))])
    assert [r.rank for r in kept] == list(range(ranks))
    want_busbw = (1 << 20) * 8 / 1.0 * 2 * (ranks - 1) / ranks
    for rows in (kept, recs):  # at the source, and the table's own guard against idle records
        ops = ops_table(rows, meta, 8)
        r = ops.iloc[0]
        assert r["group_size"] == ranks and r["time_rank_avg_us"] == pytest.approx(1e6)
        assert r["busbw_rank_avg_bps"] == pytest.approx(want_busbw)
        # span: first rank's start to the last rank's end, ranks only (rank N-1 started N-1 ms late)
        assert r["time_us"] == pytest.approx(1e6 + (ranks - 1) * 1e3)
    text = format_nccl_table(nccl_rows(ops_table(kept, meta, 8), pd.DataFrame(kept), 40000), scale_factor=40000,
                             host_link_bps=10e6, goodput_bps=9.5e6)
    assert f"# testbed: ring all-reduce, {ranks} ranks: " in text and "busbw = algbw x 2(n-1)/n" in text
    (row,) = _fields(text)
    assert row[5:8] == ["25.00", f"{(1 << 20) / 25e-6 / 1e9:.2f}", f"{want_busbw * 40000 / 8e9:.2f}"]
    assert len([ln for ln in text.splitlines() if ln.startswith("#  Rank")]) == ranks


def test_an_op_of_idle_records_only_is_left_out():
    idle = [r for r in _op_records(8, 2) if r.group_size == 0]
    ops = ops_table(idle, {0: {"size_bytes": 4096, "iteration": 0, "warmup": False}}, 8)
    assert ops.empty and list(ops.columns) == OPS_COLUMNS


# ------------------------------------------------------------------ -J checked before anything is built

def _no_build(monkeypatch):
    """Root as far as the CLI asks, and a run that gets past its checks fails at once (exit 4) instead of
    building anything: the first step after the checks (removing dead runs' leftovers) raises."""
    monkeypatch.setattr("os.geteuid", lambda: 0)

    def built(*a, **k):
        raise AssertionError("the run went past its checks")
    monkeypatch.setattr("testbed.pipeline.runner.cleanup.clean", built)


@pytest.mark.parametrize("where, reason", [
    ("nodir/out.json", "directory {tmp}/nodir does not exist"),
    ("a_file/out.json", "{tmp}/a_file is not a directory"),
    ("/proc/nope.json", "/proc is not writable: "),
    ("/tmp", "is a directory; give a file name"),
])
def test_json_path_refused_before_anything_is_built(tmp_path, monkeypatch, capsys, where, reason):
    """-J into a missing directory, under a file, or where nothing can be written (/proc): exit 2 with one line
    naming the key (and -J), the absolute path and the reason, before the estimate; no results directory."""
    _no_build(monkeypatch)
    (tmp_path / "a_file").write_text("x")
    monkeypatch.chdir(tmp_path)  # a relative -J is relative to the current directory
    want = Path(where) if where.startswith("/") else tmp_path / where
    assert main(["nccl", "-b", "64K", "-e", "64K", "-J", where, "--results", str(tmp_path / "r")]) == 2
    out, err = capsys.readouterr()
    assert err == f"testbed: error: output.nccl.json_path (-J) {want}: {reason.format(tmp=tmp_path)}" + (
        "No such file or directory\n" if where.startswith("/proc") else "\n")
    assert out == "" and not (tmp_path / "r").exists() and not (tmp_path / "nodir").exists()


def test_scenario_json_path_refused_by_testbed_run(tmp_path, monkeypatch, capsys):
    """``output.nccl.json_path`` in a scenario run by ``testbed run``: the same check, the same line."""
    _no_build(monkeypatch)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("fabric: {spines: 1, leaves: 2, hosts_per_leaf: 2}\n"
                        "workload: {sizes: {min_bytes: 64KiB, max_bytes: 64KiB}}\n"
                        f"output: {{table: nccl, nccl: {{json_path: {tmp_path}/gone/out.json}}}}\n")
    assert main(["run", str(scenario), "--results", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (f"testbed: error: output.nccl.json_path (-J) {tmp_path}/gone/out.json: "
                                       f"directory {tmp_path}/gone does not exist\n")
    assert not (tmp_path / "r").exists()


def test_writable_json_path_passes_the_check_and_creates_nothing(tmp_path, monkeypatch):
    from testbed.workloads import workload_for

    monkeypatch.chdir(tmp_path)
    spec = _spec("-b", "64K", "-e", "64K", "-J", "out.json")
    assert spec.output.nccl.json_path == str(tmp_path / "out.json")   # -J: made absolute at once
    workload_for(spec).check_machine()
    spec = parse_scenario({"workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}},
                           "output": {"table": "nccl", "nccl": {"json_path": "sub/out.json"}}})
    with pytest.raises(ScenarioError, match=f"output.nccl.json_path \\(-J\\) {tmp_path}/sub/out.json: directory"):
        workload_for(spec).check_machine()   # a scenario's relative path: the current directory too
    (tmp_path / "sub").mkdir()
    workload_for(spec).check_machine()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"] and not list((tmp_path / "sub").iterdir())


# ------------------------------------------------------------------ the preamble: the options as given

def _preamble(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith("# nThread"))


@pytest.mark.parametrize("argv, sizes, line, step_key", [
    # -f 1: steps of -i bytes (default 1 MiB, nccl-tests'); only -b fits below -e, -b and -e are printed
    (["-f", "1", "-b", "64K", "-e", "128K"], [65536], "minBytes 65536 maxBytes 131072 step: 1048576(bytes)",
     ("step_bytes", 1048576)),
    (["-f", "1", "-i", "64K", "-b", "64K", "-e", "128K"], [65536, 131072],
     "minBytes 65536 maxBytes 131072 step: 65536(bytes)", ("step_bytes", 65536)),
    # the default -f 2: the factor; -e 200K stops at 128K but prints 204800
    (["-b", "64K", "-e", "200K"], [65536, 131072], "minBytes 65536 maxBytes 204800 step: 2(factor)",
     ("step_factor", 2)),
    # all-gather on 3 ranks runs 65520 and 262128 B (16-byte shares) but nccl-tests prints -b and -e
    (["-c", "allgather", "-g", "3", "-b", "64K", "-e", "256K", "-f", "4"], [65520, 262128],
     "minBytes 65536 maxBytes 262144 step: 4(factor)", ("step_factor", 4)),
])
def test_preamble_and_json_config_report_the_options_given(argv, sizes, line, step_key):
    """src/util.cu writeDeviceReport: ``minBytes %ld maxBytes %ld step: %ld(%s)`` with -b, -e and
    ``(stepFactor > 1) ? stepFactor : stepBytes``, "factor"/"bytes"; the JSON config's minimum_bytes,
    maximum_bytes and step_factor or step_bytes alike."""
    spec = _spec(*argv)
    assert spec.workload.sizes.sizes() == sizes
    o = spec.output.nccl
    n = spec.workload.ranks or spec.fabric.n_hosts
    collective = spec.workload.collective
    ops = pd.concat([_run_tables(collective, n, s, lambda k, r: 1.0, iters=5)[0].assign(op_id=lambda d, s=s: d.op_id
                     + s) for s in sizes])
    rows = nccl_rows(ops, None, 40000)
    text = format_nccl_table(rows, scale_factor=40000, host_link_bps=10e6, goodput_bps=9.5e6, warmup_iters=1,
                             given=o)
    assert _preamble(text) == (f"# nThread 1 nGpus 1 {line} warmup iters: 1 iters: 5 agg iters: 1 validation: 0 "
                               "graph: 0 unalign: 0")
    cfg = nccl_json(rows, scale_factor=40000, host_link_bps=10e6, given=o)["config"]
    lo, hi = (int(w) for w in line.split()[1:4:2])
    assert (cfg["minimum_bytes"], cfg["maximum_bytes"]) == (lo, hi)
    assert cfg[step_key[0]] == step_key[1] and ({"step_bytes", "step_factor"} - {step_key[0]}).isdisjoint(cfg)


def test_preamble_without_the_options_reports_the_sizes_run():
    """``output.table: nccl`` in a scenario of workload.sizes (no -b/-e/-f/-i): the smallest and largest size
    run and their ratio; with only -f 1 given, nccl-tests' default -i of 1 MiB."""
    from testbed.spec.controller import NcclOutputSpec

    ops = pd.concat([_run_tables("allreduce", 4, s, lambda k, r: 1.0)[0].assign(op_id=lambda d, s=s: d.op_id + s)
                     for s in (4096, 16384, 65536)])
    rows = nccl_rows(ops, None, 40000)
    for given, want in ((None, "minBytes 4096 maxBytes 65536 step: 4(factor)"),
                        (NcclOutputSpec(), "minBytes 4096 maxBytes 65536 step: 4(factor)"),
                        (NcclOutputSpec(step_factor=1), "minBytes 4096 maxBytes 65536 step: 1048576(bytes)")):
        text = format_nccl_table(rows, scale_factor=40000, host_link_bps=10e6, goodput_bps=9.5e6, given=given)
        assert want in _preamble(text)


# ------------------------------------------------------------------ errors name the subcommand; the version line

@pytest.mark.parametrize("argv, words", [
    (["nccl", "-z", "1"], "unrecognized arguments: -z (see 'testbed nccl --help')"),
    (["perf", "-b", "4K", "--blocking"], "unrecognized arguments: --blocking (see 'testbed nccl --help')"),
    (["run", "s.yaml", "-z"], "unrecognized arguments: -z (see 'testbed run --help')"),
    (["--bogus"], "unrecognized arguments: --bogus (see 'testbed --help')"),
])
def test_unknown_options_point_at_the_subcommand_help(argv, words, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err == f"testbed: error: {words}\n"


def test_first_line_says_which_nccl_tests_layout_and_that_no_nccl_ran():
    """nccl-tests 2.x's first line (util.cu writeDeviceReport) in its shape, read as a script reads it; every
    line before the rows starts with '#' so positional parsers still read the rows alone."""
    import re

    ops, rank_ops = _run_tables("allreduce", 4, 1 << 20, lambda k, r: 1.0)
    rows = nccl_rows(ops, rank_ops, 40000)
    lines = format_nccl_table(rows, scale_factor=40000, host_link_bps=10e6, goodput_bps=9.5e6).splitlines()
    assert lines[0] == ("# nccl-tests version 2.19.6 nccl-headers=0 nccl-library=0 "
                        "(testbed emulation: no NCCL library)")
    m = re.match(r"^# nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)", lines[0])
    assert m.groups() == ("2.19.6", "0", "0")
    assert lines[1] == "# Collective test starting: all_reduce_perf" and lines[2].startswith("# nThread 1 nGpus 1 ")
    assert len(_fields("\n".join(lines))) == 1
    titled = format_nccl_table(rows, scale_factor=40000, host_link_bps=10e6, goodput_bps=9.5e6,
                               title="# testbed nccl: ring all-reduce on 4 hosts").splitlines()
    assert titled[:3] == [lines[0], "# testbed nccl: ring all-reduce on 4 hosts", lines[1]]
    doc = nccl_json(rows, scale_factor=40000, host_link_bps=10e6)
    assert doc["nccl_version"] == 0 and doc["testbed"]["nccl_tests_layout"] == "2.19.6"
