"""C01: ECMP select groups hash the UDP source port, so RoCEv2 QPs spread over the spines."""
import json
import sys
from pathlib import Path


FLOWS = 64
SIZE_BYTES = 128 * 1024  # 1 MB in the report, scaled with the link rate (time dilation)


def _tx_bytes(ifname: str) -> int:
    return int(Path(f"/sys/class/net/{ifname}/statistics/tx_bytes").read_text())


def _run_flows(fab, sports: str) -> tuple[list[float], dict, dict]:
    a, b = fab.host(0), fab.host(1)
    ha, hb = fab.layout.hosts[0], fab.layout.hosts[1]
    leaf = fab.layout.attachment(ha.name).node
    uplinks = [ln.a.intf for ln in fab.layout.links if ln.a.node == leaf]  # leaf -> spine links
    assert len(uplinks) == 2
    before = [_tx_bytes(u) for u in uplinks]
    common = [sys.executable, "-m", "benchmarks.instruments.flows", "--run-id", fab.run_id, "--timeout-s", "120"]
    rx = b.popen(common + ["recv", "--ip", hb.ip, "--peer", ha.ip, "--flows", str(FLOWS),
                           "--size-bytes", str(SIZE_BYTES)], stdin=-1, text=True)
    assert json.loads(rx.stdout.readline())["event"] == "ready"
    tx = a.popen(common + ["send", "--ip", ha.ip, "--peer", hb.ip, "--sports", sports,
                           "--size-bytes", str(SIZE_BYTES)], stdin=-1, text=True)
    assert json.loads(tx.stdout.readline())["event"] == "ready"
    tx.stdin.write("go\n")
    tx.stdin.flush()
    sent = json.loads(tx.stdout.readline())
    got = json.loads(rx.stdout.readline())
    tx.wait(timeout=30)
    rx.wait(timeout=30)
    moved = [_tx_bytes(u) - b0 for u, b0 in zip(uplinks, before)]
    return [m / sum(moved) for m in moved], sent, got


def test_udp_source_port_spreads_flows(make_fabric):
    # 1 MB buffers: the two spines merge into the receiver's leaf port, and a CPU stall of this shared machine
    # releases a burst there; a tail drop would show as a PSN gap (out_of_order_pkts) that is loss, not the
    # reordering this case is about (fresh-user review 2026-12-01, a loaded machine: 3-5 gaps per flow)
    fab = make_fabric(spines=2, leaves=2, hosts_per_leaf=1, host_link_bps=20e6, fabric_link_bps=20e6,
                      buffer_bytes=1_000_000)
    shares, sent, got = _run_flows(fab, "49152-49215")
    assert sent["ok"] and got["ok"]
    assert all(f["delivered_bytes"] == SIZE_BYTES for f in got["flows"])
    # ECMP keeps each flow on one path: PSNs arrive in order, nothing out of order or duplicated
    bad = [(i, f) for i, f in enumerate(got["flows"]) if f["out_of_order_pkts"] or f["order_errors"] or f["dup_pkts"]]
    assert not bad, (bad[:3], sent["flows"][:2])
    print(f"C01 uplink byte shares with 64 source ports: {[round(s, 3) for s in shares]}")
    assert all(0.30 <= s <= 0.70 for s in shares), f"uplink byte shares {shares}"

    # control: one shared source port -> one hash value -> one uplink carries everything
    shares, sent, got = _run_flows(fab, f"50000x{FLOWS}")
    assert sent["ok"] and got["ok"]
    print(f"C01 uplink byte shares with one shared source port: {[round(s, 3) for s in shares]}")
    assert max(shares) >= 0.99, f"uplink byte shares with one source port {shares}"
