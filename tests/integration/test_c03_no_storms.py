"""C03: no storms in a multipath fabric; LLDP never leaves host ports; fail-secure without controller."""
import time
from pathlib import Path

from scapy.all import rdpcap


def _counter(ifname: str, name: str) -> int:
    return int(Path(f"/sys/class/net/{ifname}/statistics/{name}").read_text())


def test_no_storms(make_fabric, tmp_path):
    fab = make_fabric(spines=2, leaves=2, hosts_per_leaf=2)
    fab.net.pingAll(timeout=1)
    loss = fab.net.pingAll(timeout=1)
    assert loss == 0.0, f"second all-pairs ping round lost {loss}%"

    spine_ports = [p for p in fab.switch_ports if p.startswith(fab.run_id + "s")]
    assert len(spine_ports) == 4
    caps = []
    for h in fab.layout.hosts:
        f = tmp_path / f"{h.name}-lldp.pcap"
        caps.append((f, fab.net.get(h.name).popen(["tcpdump", "-i", h.intf, "-w", str(f), "--immediate-mode", "ether proto 0x88cc"])))
    before = sum(_counter(p, "rx_packets") for p in spine_ports)
    time.sleep(10)
    spine_rx = sum(_counter(p, "rx_packets") for p in spine_ports) - before
    for f, proc in caps:
        proc.terminate()
        proc.wait(timeout=10)
    assert spine_rx < 50, f"spine ports received {spine_rx} packets in 10 idle seconds"
    for f, _ in caps:
        assert len(rdpcap(str(f))) == 0, f"LLDP reached a host: {f}"

    # controller gone: bridges stay fail-secure, nothing floods
    fab.controller.stop()
    for sw in fab.layout.switches:
        assert fab.net.get(sw.name).vsctl("get-fail-mode", sw.name).strip() == "secure"
    ports = [i.name for sw in fab.layout.switches for i in fab.net.get(sw.name).intfList() if i.name != "lo"]
    c0 = {p: _counter(p, "rx_packets") + _counter(p, "tx_packets") for p in ports}
    time.sleep(10)
    grew = {p: _counter(p, "rx_packets") + _counter(p, "tx_packets") - c0[p] for p in ports}
    assert max(grew.values()) <= 10, {p: g for p, g in grew.items() if g > 10}
