"""ECN marking on a real fabric port: only ECT packets of the lossless class, none below Kmin, and one
point of the RED curve (benchmarks/ecn_curve.py measures the whole curve; method in
benchmarks.instruments.ecn_curve). One leaf, three hosts, h1 + h2 -> h3 overload the leaf's port toward h3."""
import sys
from pathlib import Path

import pytest

from benchmarks.instruments.ecn_curve import EcnLoop, congested_port, fabric_spec, measure_point
from dataplane.nft import leftover_tables
from testbed.emulation.fabric import Fabric
from testbed.host.runlock import RunLock
from topology.naming import new_run_id

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from ecn_curve import KMIN_BYTES, scenario  # noqa: E402  (the benchmark's scenario)

pytestmark = pytest.mark.integration


def test_marks_only_ect_none_below_kmin_and_follows_red(tmp_path, datapath):
    spec, rid = scenario(), new_run_id()
    with RunLock(rid), Fabric(fabric_spec(spec), rid, tmp_path, datapath) as fab:
        port = congested_port(fab, 2)
        loop = EcnLoop.for_run(spec, rid, fab.switch_ports, fab.queues)
        with loop:
            assert sorted(leftover_tables(rid)) == [f"{rid}ecn", f"{rid}tail"]  # the marker's, the fabric's tail drop
            below = measure_point(fab, loop, [0, 1], 2, port, 7_000, seconds=2.0)
            mid = measure_point(fab, loop, [0, 1], 2, port, 32_000, seconds=2.0)
        assert leftover_tables(rid) == [f"{rid}tail"]  # the marker removed its table; the fabric's is still up
    for p in (below, mid):
        assert sum(p["counts"]["ect"]) > 1000 and sum(p["counts"]["not_ect"]) > 400, p
        assert p["not_ect_ce"] == 0 and p["lossy_ect_ce"] == 0, p  # only ECT of the lossless class
    assert below["backlog_mean_bytes"] < KMIN_BYTES and below["ce_fraction"] == 0, below
    assert KMIN_BYTES < mid["backlog_mean_bytes"] and 0.15 < mid["red_p"] < 0.35, mid
    assert abs(mid["ce_fraction"] - mid["red_p"]) <= 0.05, mid
    lm = loop.marker.loop_ms()
    assert lm["ticks"] > 1000 and lm["p50"] < 1.0, lm


def test_a_run_with_ecn_records_marks_backend_and_loop_time(tmp_path):
    """scenarios/ecn_marking.yaml, one size: the lossless queues pass Kmin at the 2:1 uplinks."""
    from conftest import REPO, run_scenario_file
    from testbed.results.rundir import RunDir

    text = (REPO / "scenarios" / "ecn_marking.yaml").read_text().replace(
        "sizes: {min_bytes: 256KiB, max_bytes: 1MiB, factor: 4}", "sizes: {min_bytes: 1MiB, max_bytes: 1MiB}")
    _, s = run_scenario_file(tmp_path, text, expect_rc=None)  # completed; faithful or not (CPU is shared)
    c, t = s["congestion"], s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] and t["switch_drops_pkts"] == 0
    assert c["ecn_marker"].startswith("nftables") and c["kmin_bytes"] == 5 * 4214 and c["kmax_bytes"] == 20 * 4214
    assert c["ect_pkts"] > 1000 and 0 < c["ce_marked_pkts"] < c["ect_pkts"], c
    assert c["lossless_queue_p99_bytes"] > c["kmin_bytes"], c
    assert c["ecn_loop_ticks"] > 1000 and c["ecn_loop_p50_ms"] is not None, c
    run = RunDir.open(s["run_dir"])
    assert run.manifest["backends"]["ecn_marker"] == c["ecn_marker"]
    q = run.lossless_queues
    assert set(q["class"]) == {"lossless"} and q["backlog_bytes"].max() > c["kmin_bytes"]
    marks = run.ecn_marking
    assert marks["probability"].between(0, 1).all() and len(marks) > 0
    assert leftover_tables(s["run_id"]) == []


def test_clean_removes_a_dead_runs_marker_table_and_no_other():
    from dataplane.ecn_marker import table_name
    from dataplane.nft import Nft
    from testbed.host import cleanup

    rid, other = new_run_id(), new_run_id()
    nft = Nft()
    nft.run(f"add table netdev {table_name(rid)}\nadd table netdev {table_name(other)}")
    try:
        report = cleanup.clean([rid])
        assert report.runs[0].nft_tables == [table_name(rid)]
        assert leftover_tables(rid) == [] and leftover_tables(other) == [table_name(other)]
    finally:
        for t in leftover_tables(rid) + leftover_tables(other):
            nft.run(f"delete table netdev {t}")
