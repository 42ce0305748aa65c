"""``testbed nccl``: options mapped onto a scenario's workload (nccl-tests' -b -e -f -n -w -g, and -c -a),
bad options refused naming the option's key before anything is built, ``workload.ranks``, and the
nccl-tests table's columns and worked values."""
import pandas as pd
from pathlib import Path

import pytest

from testbed.cli import build_parser, main
from testbed import nccl
from testbed.workloads import plan_workload
from testbed.results.nccl_table import format_nccl_table
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
    assert spec.output.table == "nccl" and spec.name == "nccl-allgather-ring"
    assert spec.fabric.mtu_bytes == 4200 and spec.transport.payload_bytes == 4096   # the quickstart's fabric
    ops = plan_workload(spec).ops
    assert {o.groups for o in ops} == {((0, 1, 2, 3),)} and len(ops) == 5 * (2 + 3)


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
    (["-b", "1M", "-e", "4K"], "max_bytes = 4096 is below min_bytes = 1048576"),
    (["-b", "lots"], "'lots' is not a size"),
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


def test_nccl_table_worked_values():
    """1 MiB ring all-gather on 4 ranks: ranks' own times 1.0 s each, span 1.2 s. nccl-tests' time is the
    per-rank mean 1e6 us: algbw = 1048576 x 8 / 1 s = 8.389 Mbit/s, busbw = x 3/4 = 6.291 Mbit/s, times the
    scale factor 40000 / 8e9 = 31.46 GB/s equivalent; busbw/link from the span: 8.389 / 1.2 x 0.75 / 5 = 1.049."""
    rows = [{"op_id": 0, "rank": r, "t_start_ns": 0 if r else 200_000_000,
             "t_end_ns": 1_000_000_000 if r else 1_200_000_000} for r in range(4)]
    ops = ops_table(rows, {0: {"size_bytes": 1 << 20, "iteration": 0, "warmup": False, "group_size": 4,
                               "collective": "allgather", "algorithm": "ring"}}, 4)
    sizes = size_table(ops, 4, 5e6)
    text = format_nccl_table(sizes, 40000)
    lines = text.splitlines()
    assert lines[0] == ("# ring all-gather, 4 ranks: S = each rank's output; each rank contributes S/n; "
                        "busbw = algbw x (n-1)/n")
    row = lines[3].split()
    assert row[:5] == ["1048576", "262144", "float", "none", "-1"]
    assert row[5:] == ["1000000", "8.389", "6.291", "31.46", "N/A", "1200000", "1.049"]
    assert lines[-1].startswith("# Avg bus bandwidth    : 6.291 Mbit/s (31.46 GB/s")
    bc = sizes.assign(collective="broadcast", algorithm="ring")
    assert format_nccl_table(pd.DataFrame(bc), 1).splitlines()[3].split()[3:5] == ["none", "0"]


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
    sizes = size_table(ops_table(kept, meta, 8), 8, 10e6)
    lines = format_nccl_table(sizes, 40000).splitlines()
    assert lines[0].startswith(f"# ring all-reduce, {ranks} ranks: ") and "busbw = algbw x 2(n-1)/n" in lines[0]
    row = lines[3].split()
    assert row[5:8] == ["1000000", "8.389", f"{want_busbw / 1e6:.3f}"]


def test_an_op_of_idle_records_only_is_left_out():
    idle = [r for r in _op_records(8, 2) if r.group_size == 0]
    ops = ops_table(idle, {0: {"size_bytes": 4096, "iteration": 0, "warmup": False}}, 8)
    assert ops.empty and list(ops.columns) == OPS_COLUMNS
