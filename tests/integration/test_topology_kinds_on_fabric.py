"""Fat-tree k=4 (20 switches, 16 hosts) and rail-optimized 2 servers x 4 GPUs on real fabrics.

The fat-tree: every host pair pings with no loss, the second all-pairs round puts
exactly the packets its shortest paths say on the switch ports (no loop, no storm),
every bucket of every ECMP group carries traffic, and a 16-rank ring all-reduce
runs at the host links' goodput, faithfully. Links run at 4 Mbit/s with the RoCE
path MTU 4096: at 5 Mbit/s Open vSwitch's forwarding thread already kept one of the
2 cores near 90% busy (scenarios/fat_tree_k4.yaml). The rail fabric builds and runs
its all-reduce with every byte delivered exactly once.
"""
import re
import subprocess
import time
from pathlib import Path

import networkx as nx

from conftest import run_scenario_file

TRANSPORT = "transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}\n"
SIZE_BYTES = 512 * 1024


def _tx_packets(ports) -> int:
    return sum(int(Path(f"/sys/class/net/{p}/statistics/tx_packets").read_text()) for p in ports)


def _bucket_packets(switch: str) -> dict:
    """{(group id, bucket id): packets} from the switch's OpenFlow 1.5 group statistics."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-group-stats", switch], capture_output=True,
                         text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        gid = re.search(r"group_id=(\d+)", line)
        for bucket, packets in re.findall(r"bucket(\d+):packet_count=(\d+)", line):
            found[(int(gid.group(1)), int(bucket))] = int(packets)
    return found


def test_fat_tree_k4_routes_every_pair_without_loops_on_every_equal_cost_hop(make_fabric):
    t0 = time.monotonic()
    fab = make_fabric(kind="fat_tree", k=4, host_link_bps="4M", mtu_bytes=4200)
    build_s = time.monotonic() - t0
    layout = fab.layout
    assert len(fab.ready.dpids) == 20 and fab.ready.groups == 16 and not fab.ready.errors
    assert fab.net.pingAll(timeout=1) == 0.0          # ARP answered by the controller on the way
    before = _tx_packets(fab.switch_ports)
    assert fab.net.pingAll(timeout=1) == 0.0
    sent = _tx_packets(fab.switch_ports) - before
    # each echo request and reply leaves one switch port per switch on its shortest path
    g = nx.Graph((ln.a.node, ln.b.node) for ln in layout.links)
    expected = sum(2 * (nx.shortest_path_length(g, a.name, b.name) - 1)
                   for a in layout.hosts for b in layout.hosts if a is not b)
    print(f"fat-tree k=4 built and confirmed in {build_s:.1f} s; 240 pings, {sent} switch-port packets "
          f"(shortest paths: {expected})")
    assert expected == 240 * 2 * 67 / 15             # per host: 1 x 1 switch, 2 x 3, 12 x 5
    assert expected <= sent <= expected + 40, f"{sent} packets on switch ports, paths explain {expected}"
    for sw in layout.switches:                        # every equal-cost next hop carried traffic
        buckets = _bucket_packets(sw.name)
        assert len(buckets) == (2 if sw.role in ("edge", "aggregation") else 0), (sw.name, buckets)
        assert all(n > 0 for n in buckets.values()), (sw.name, buckets)


def test_fat_tree_k4_ring_allreduce_is_faithful(tmp_path):
    # 2 Mbit/s: 16 hosts and 20 switches at 4 Mbit/s keep one of this machine's 2 cores saturated in 2-4 of
    # the 5 s (the fidelity monitor rightly fails those runs); at 2 Mbit/s busbw/link 0.998, faithful
    res, s = run_scenario_file(tmp_path, (
        "name: fat-tree-itest\n"
        "fabric: {kind: fat_tree, k: 4, host_link_bps: 2M, buffer_bytes: 100KB, mtu_bytes: 4200}\n" + TRANSPORT +
        "workload: {collective: allreduce, algorithm: ring, sizes: {min_bytes: 512KiB, max_bytes: 512KiB},"
        " iterations: 2, warmup_iterations: 0}\n"), timeout=120)
    ratio = s["sizes"][0]["busbw_ratio"]
    print(f"fat-tree k=4 ring all-reduce 512 KiB over 16 ranks: busbw/link {ratio:.3f}")
    assert 0.95 <= ratio <= 1.03, ratio
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 2 * 16 * 15 * SIZE_BYTES // 8
    assert t["retx_pkts"] == 0
    assert s["faithful"] is True, s["violations"]


def test_fat_tree_k4_with_four_qps_per_host_is_faithful_and_counts_host_retries(tmp_path):
    # issue 16: 4 channels give every host 4 requester QPs into one 64 KiB NIC queue; a full queue makes
    # the sends wait and retry (backpressure, counted once per host as host_nic_retries), never a loss.
    # At 4 Mbit/s the 2 cores saturate (CPU check fails 14 of 62 s); 2 Mbit/s is faithful here.
    res, s = run_scenario_file(tmp_path, (
        "name: fat-tree-4qp-itest\n"
        "fabric: {kind: fat_tree, k: 4, host_link_bps: 2M, buffer_bytes: 100KB, mtu_bytes: 4200}\n" + TRANSPORT +
        "workload: {collective: allreduce, algorithm: ring, channels: 4, sizes: {min_bytes: 1MiB, max_bytes: 1MiB},"
        " iterations: 1, warmup_iterations: 0}\n"), timeout=150)
    t = s["transport"]
    size = 1024 * 1024
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 2 * 16 * 15 * size // 16
    assert t["retx_pkts"] == 0 and t["unexplained_lost_pkts"] == 0
    retries = s["fidelity"]["drops"]["host_nic_retries"]
    assert t["host_nic_retries"] == sum(retries.values())
    print(f"fat-tree k=4, 4 QPs per host: busbw/link {s['sizes'][0]['busbw_ratio']:.3f}, "
          f"host NIC retries {t['host_nic_retries']} ({retries})")
    assert 0.9 <= s["sizes"][0]["busbw_ratio"] <= 1.03
    assert s["faithful"] is True, s["violations"]


def test_rail_2x4_builds_and_runs_allreduce(tmp_path):
    res, s = run_scenario_file(tmp_path, (
        "name: rail-itest\n"
        "fabric: {kind: rail_optimized, servers: 2, gpus_per_server: 4, spines: 2, host_link_bps: 5M,"
        " buffer_bytes: 100KB, mtu_bytes: 4200}\n" + TRANSPORT +
        "workload: {collective: allreduce, algorithm: ring, sizes: {min_bytes: 512KiB, max_bytes: 512KiB},"
        " iterations: 2, warmup_iterations: 0}\n"), timeout=120, expect_rc=None)
    assert "rail_optimized (servers 2, gpus_per_server 4, spines 2): 6 switches" in res.stderr
    ratio = s["sizes"][0]["busbw_ratio"]
    print(f"rail 2x4 ring all-reduce 512 KiB over 8 ranks: busbw/link {ratio:.3f}")
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 2 * 8 * 7 * SIZE_BYTES // 4
    # every ring hop changes rail; two flows leave each rail leaf over two uplinks, so an ECMP
    # collision (C01) can halve a ring's rate but never stop it
    assert 0.45 <= ratio <= 1.03, ratio
