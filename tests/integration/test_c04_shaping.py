"""C04: shaping is really applied: 20 Mbit/s of UDP offered on a 10 Mbit/s link."""
import json
import time


def test_udp_over_shaped_link(make_fabric):
    fab = make_fabric(spines=1, leaves=2, hosts_per_leaf=1, host_link_bps=10e6, fabric_link_bps=10e6)
    # start-up self-check: every shaped egress read back within 1% of its configured rate
    assert len(fab.readback) == len(fab.port_rate_bps) == 2 + 2 + 2 + 2  # host NICs, leaf-host, leaf-up, spine-down
    for ifname, rate in fab.port_rate_bps.items():
        assert abs(fab.readback[ifname].rate_bps - rate) <= 0.01 * rate, ifname
    a, b = fab.host(0), fab.host(1)
    ip_b = fab.layout.hosts[1].ip
    server = b.popen(["iperf3", "-s", "-1", "-B", ip_b, "-J"])
    time.sleep(1.0)
    a.cmd(f"iperf3 -c {ip_b} -u -b 20M -l 1400 -t 10 -J")
    out, _ = server.communicate(timeout=30)
    res = json.loads(out)
    rx = res["end"]["sum_received"]
    goodput_bps = rx["bits_per_second"]
    print(f"C04 receiver goodput {goodput_bps / 1e6:.2f} Mbit/s, loss {rx['lost_percent']:.1f}%")
    assert 9.0e6 <= goodput_bps <= 10.2e6, f"receiver goodput {goodput_bps / 1e6:.2f} Mbit/s"
    assert 45.0 <= rx["lost_percent"] <= 55.0, f"loss {rx['lost_percent']:.1f}%"
