"""C05 on real packets: what the transport puts on the fabric decodes as RoCEv2 with valid ICRCs.

The byte-exact C05 frame itself is checked in tests/test_wire_format.py; here a
capture at the receiver of a real transfer must show the same format.
"""
import json
import sys
import time

from traffic.roce import read_roce_pcap

SIZE_BYTES = 64 * 1024


def test_captured_transport_packets_are_rocev2(make_fabric, tmp_path):
    fab = make_fabric(spines=1, leaves=2, hosts_per_leaf=1)
    a, b = fab.host(0), fab.host(1)
    ha, hb = fab.layout.hosts[0], fab.layout.hosts[1]
    pcap = tmp_path / "rx.pcap"
    cap = b.popen(["tcpdump", "-i", hb.intf, "-w", str(pcap), "-U", "--immediate-mode", "udp port 4791"], text=True)
    assert "listening on" in cap.stderr.readline()  # capture is live before traffic starts
    common = [sys.executable, "-m", "benchmarks.instruments.flows", "--run-id", fab.run_id]
    rx = b.popen(common + ["recv", "--ip", hb.ip, "--peer", ha.ip, "--flows", "2",
                           "--size-bytes", str(SIZE_BYTES)], stdin=-1, text=True)
    assert json.loads(rx.stdout.readline())["event"] == "ready"
    tx = a.popen(common + ["send", "--ip", ha.ip, "--peer", hb.ip, "--sports", "50001,50002",
                           "--size-bytes", str(SIZE_BYTES)], stdin=-1, text=True)
    assert json.loads(tx.stdout.readline())["event"] == "ready"
    tx.stdin.write("go\n")
    tx.stdin.flush()
    assert json.loads(tx.stdout.readline())["ok"] and json.loads(rx.stdout.readline())["ok"]
    tx.wait(timeout=30)
    rx.wait(timeout=30)
    time.sleep(0.5)
    cap.terminate()
    _, cap_err = cap.communicate(timeout=10)

    df = read_roce_pcap(pcap)
    data = df[df["ip_src"] == ha.ip]
    acks = df[df["ip_src"] == hb.ip]
    assert len(data) == 2 * SIZE_BYTES // 1024, cap_err  # every data packet once: no loss on an idle fabric
    assert bool(df["icrc_ok"].all()), "a captured packet has a wrong ICRC"
    assert set(data["udp_dport"]) == {4791} and set(data["udp_sport"]) == {50001, 50002}
    assert set(data["dscp"]) == {26} and set(data["ecn"]) == {2}  # DSCP 26, ECT(0)
    assert set(data["opcode"]) == {0x00, 0x01, 0x02}  # SEND FIRST, MIDDLE, LAST
    for _, flow in data.groupby("udp_sport"):
        assert flow["psn"].tolist() == list(range(64))  # in order, consecutive
    assert len(acks) > 0 and set(acks["opcode"]) == {0x11}  # RC ACKNOWLEDGE
