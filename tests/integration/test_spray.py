"""Packet spraying (issue 8): every packet of a QP takes the next of its UDP source ports, which the
testbed traced through the switches and split evenly over both spines, so its packets spread over
both paths in equal shares and overtake each other; selective repeat places them. On an uncongested
fabric every byte arrives exactly once and in order, with at most 1% retransmissions."""
from conftest import run_scenario_file
from testbed.results.rundir import RunDir

SCENARIO = """
name: spray
seed: 3
reference_link_bps: 400G
fabric: {spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M,
         buffer_bytes: 100KB, mtu_bytes: 4200}
transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4, entropy: spray, entropy_ports: 64}
workload: {collective: allreduce, algorithm: ring, sizes: {min_bytes: 1MiB, max_bytes: 1MiB},
           iterations: 2, warmup_iterations: 0}
"""


def test_spray_delivers_everything_once_in_order_with_few_retransmissions(tmp_path):
    _, s = run_scenario_file(tmp_path, SCENARIO, timeout=150, expect_rc=None)
    run = RunDir.open(s["run_dir"])
    manifest = run.manifest
    assert manifest["transport"]["entropy"] == "spray" and manifest["transport"]["entropy_ports"] == 64
    assert manifest["transport"]["loss_recovery"] == "selective_repeat"
    t = s["transport"]
    assert s["complete"] and t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0
    assert t["order_errors"] == 0
    qps = run.qps
    req, resp = qps[qps["role"] == "requester"], qps[qps["role"] == "responder"]
    tx = int(req["tx_pkts"].sum())
    print(f"spray: busbw/link {s['sizes'][-1]['busbw_ratio']:.3f}, {t['retx_pkts']} of {tx} packets resent, "
          f"{int(resp['out_of_order_pkts'].sum())} placed out of order (max {int(resp['max_reorder_pkts'].max())} "
          f"ahead), faithful {s['faithful']} {s['violations']}")
    assert t["retx_pkts"] <= 0.01 * tx
    assert s["sizes"][-1]["busbw_ratio"] >= 0.85
    # the packets really took both paths, in equal shares: each leaf's two uplinks carry the same bytes
    # (its one cross-leaf ring flow, sprayed 32/32 over the traced paths; the ACKs of the incoming flow,
    # one port, are 0.5% of the bytes). Measured 0.498 / 0.502. Random draws from 64 untraced ports
    # spread a leaf's share by +-6 points. Round robin over equal paths reorders few packets (8 of 7,168
    # measured), so reordering alone would not show the spraying.
    layout = run.layout()
    ports = run.ports.groupby("port")["tx_bytes"].max()
    for leaf in (sw for sw in layout.switches if sw.role == "leaf"):
        up = [ln.a.intf if ln.a.node == leaf.name else ln.b.intf for ln in layout.links_of(leaf.name)
              if getattr(layout.node(ln.peer(leaf.name).node), "role", "") == "spine"]
        shares = ports[up] / ports[up].sum()
        print(f"{leaf.name} uplink shares {[round(x, 4) for x in shares]}")
        assert shares.min() >= 0.48, shares
    # the traced pools: a pair on two leaves has 2 paths (one per spine) of at least 32 ports, on one leaf 1
    traced = run.read_json("entropy_paths.json")
    print(f"traced {len(traced['pairs'])} address pairs in {traced['trace_s']} s")
    for pair in traced["pairs"]:
        cross = pair["src_ip"].split(".")[2] != pair["dst_ip"].split(".")[2]  # 10.0.<leaf>.<host>
        assert len(pair["paths"]) == (2 if cross else 1) and min(map(len, pair["paths"])) >= 64 // len(pair["paths"])
