"""C02: with the userspace datapath TCP connects fast, reaches >= 80% of the bottleneck, checksums are right."""
import json
import time

from scapy.all import IP, TCP, rdpcap


def test_tcp_across_leaves(make_fabric, tmp_path, datapath):
    fab = make_fabric(spines=2, leaves=2, hosts_per_leaf=1, host_link_bps=20e6, fabric_link_bps=20e6)
    a, b = fab.host(0), fab.host(1)
    ip_b = fab.layout.hosts[1].ip
    # every veth, host side and switch side, has tx checksumming off on the userspace datapath
    if datapath == "user":
        for h in fab.layout.hosts:
            assert "tx-checksumming: off" in fab.net.get(h.name).cmd("ethtool -k", h.intf)
        for port in fab.switch_ports:
            out = fab.net.get(port.split("-")[0]).cmd("ethtool -k", port)
            assert "tx-checksumming: off" in out, port
    pcap = tmp_path / "rx.pcap"
    cap = b.popen(["tcpdump", "-i", fab.layout.hosts[1].intf, "-w", str(pcap), "-c", "300", "tcp"])
    server = b.popen(["iperf3", "-s", "-1", "-B", ip_b])
    time.sleep(1.0)
    out = a.cmd(f"iperf3 -c {ip_b} -t 5 -J --connect-timeout 1000")
    server.wait(timeout=20)
    cap.terminate()
    cap.wait(timeout=10)
    res = json.loads(out)
    # --connect-timeout 1000: iperf3 fails with an error if the TCP connection takes over 1 s
    assert "error" not in res, res.get("error")
    rx_bps = res["end"]["sum_received"]["bits_per_second"]
    print(f"C02 TCP goodput {rx_bps / 1e6:.2f} Mbit/s on a 20 Mbit/s path")
    assert rx_bps >= 0.8 * 20e6 * 1448 / 1514, f"TCP goodput {rx_bps / 1e6:.2f} Mbit/s"
    pkts = [p for p in rdpcap(str(pcap)) if TCP in p]
    assert len(pkts) >= 100
    bad = 0
    for p in pkts:
        ip = IP(bytes(p[IP]))
        seen = ip[TCP].chksum
        del ip[TCP].chksum
        bad += IP(bytes(ip))[TCP].chksum != seen
    assert bad == 0, f"{bad} of {len(pkts)} captured TCP segments have bad checksums"
