"""The transport's rooms (no root, loopback): congestion-control and entropy registries, the
hooks a congestion control gets from a real QP (send, ACK, CNP, timeout, pacing), and
``per_flow`` giving the same seeded ports as before the registries existed."""
import socket
import time

import pytest

from traffic.transport import Endpoint, RequesterQP, TransportParams
from traffic.transport.cc import (CONGESTION_CONTROLS, CongestionControl, Dcqcn, NoCongestionControl,
                                  congestion_control)
from traffic.transport.entropy import ENTROPY_POLICIES, Flowlet, PerFlow, QpEntropy, Spray, entropy_policy
from traffic.wire import CnpPacketBuilder

from test_transport import qp_pair


def test_registries_hold_todays_policies():
    assert CONGESTION_CONTROLS == {"none": NoCongestionControl, "dcqcn": Dcqcn}
    assert ENTROPY_POLICIES == {"per_flow": PerFlow, "spray": Spray, "flowlet": Flowlet}
    cc = congestion_control("none", 10e6, 1024)
    assert isinstance(cc, NoCongestionControl) and cc.rate_bps == 10e6 and cc.next_send_ns(123) == 123


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(ValueError, match=r"transport.congestion_control: unknown congestion control 'timely'; registered: dcqcn, none"):
        congestion_control("timely", 10e6, 1024)
    with pytest.raises(ValueError, match=r"transport.entropy: unknown entropy policy 'letflow'; registered: flowlet, per_flow, spray"):
        entropy_policy("letflow", 1, 0)
    with pytest.raises(ValueError, match="line_rate_bps=0: must be > 0"):
        congestion_control("none", 0, 1024)


def test_per_flow_ports_are_the_seeded_ports_of_before():
    """Values drawn by the agent before the registry (random.Random(f"{seed}-{rank}").sample of
    49152-65535): case C01's ECMP spread depends on them staying the same for a seed."""
    assert entropy_policy("per_flow", 1, 0).host_ports(4) == [57535, 58560, 61101, 49649]
    assert entropy_policy("per_flow", 42, 3).host_ports(2) == [50852, 59869]
    qe = entropy_policy("per_flow", 1, 0).for_qp(57535)
    assert qe.ports == [57535] and qe.port_index(0) == 0
    with pytest.raises(ValueError, match="at least one UDP source port"):
        QpEntropy([])


class Recording(CongestionControl):
    """Records every hook; paces at ``pace_bps`` when given (one packet per frame-time at that rate)."""

    name = "recording"

    def __init__(self, line_rate_bps, payload_bytes, pace_bps=None):
        super().__init__(line_rate_bps, payload_bytes)
        self.sent_bytes = self.sends = self.acked_pkts = self.acked_bytes = self.cnps = self.timeouts = 0
        self.pace_bps, self.next_ns = pace_bps, 0

    def on_send(self, wire_bytes, now_ns):
        self.sends += 1
        self.sent_bytes += wire_bytes
        if self.pace_bps:
            self.next_ns = max(self.next_ns, now_ns) + int(wire_bytes * 8 / self.pace_bps * 1e9)

    def on_ack(self, acked_pkts, acked_bytes, now_ns):
        self.acked_pkts += acked_pkts
        self.acked_bytes += acked_bytes

    def on_cnp(self, now_ns):
        self.cnps += 1

    def on_timeout(self, now_ns):
        self.timeouts += 1

    def next_send_ns(self, now_ns):
        return self.next_ns if self.pace_bps else now_ns


def test_hooks_see_every_send_and_every_acked_byte():
    params = TransportParams(payload_bytes=1024, window_pkts=32, ack_every_pkts=4, rto_us=5_000_000)
    cc = Recording(10e6, 1024)
    ep_a, ep_b, req, resp = qp_pair(params, cc=cc)
    try:
        sizes = [1, 1000, 5000, 64 * 1024, 100_003]
        seqs = [req.post_send(s) for s in sizes]
        assert req.wait_acked(seqs[-1], timeout_s=20)
        c = req.counters
        assert (cc.sends, cc.sent_bytes) == (c.tx_pkts, c.tx_wire_bytes)
        assert cc.acked_pkts == sum(-(-s // 1024) for s in sizes) == c.tx_pkts  # no loss: one ACK-span per packet
        assert cc.acked_bytes == sum(sizes) == c.acked_bytes
        assert cc.timeouts == c.timeouts == 0 and cc.cnps == 0
    finally:
        ep_a.stop()
        ep_b.stop()


def test_a_cnp_reaches_the_requester_qp_and_its_cc():
    params = TransportParams(rto_us=5_000_000)
    cc = Recording(10e6, 1024)
    ep_a, ep_b, req, resp = qp_pair(params, cc=cc, sport=50110)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.2", 0))
        cnp = CnpPacketBuilder("127.0.0.2", "127.0.0.1", s.getsockname()[1])
        s.sendto(cnp.build(0x10001), ("127.0.0.1", 4791))  # to the requester QP: counted, cc told
        s.sendto(cnp.build(0x10077), ("127.0.0.1", 4791))  # to no QP: unknown
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and (req.counters.cnps_rx < 1 or ep_a.rx_unknown_pkts < 1):
            time.sleep(0.01)
        assert (req.counters.cnps_rx, cc.cnps, ep_a.rx_unknown_pkts) == (1, 1, 1)
    finally:
        s.close()
        ep_a.stop()
        ep_b.stop()


def test_timeouts_reach_the_cc():
    """A peer that never answers (a plain socket on 4791): every transmission times out (rto 20 ms)
    and the cc hears of each timeout."""
    params = TransportParams(window_pkts=4, ack_every_pkts=1, rto_us=20_000)
    cc = Recording(10e6, 1024)
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.3", 4791))
    ep_a = Endpoint("127.0.0.1")
    req = RequesterQP(0x10001, 0x20000, "127.0.0.1", "127.0.0.3", 50120, params, cc=cc)
    ep_a.requesters[req.qpn] = req
    ep_a.start()
    try:
        req.post_send(2048)
        time.sleep(0.2)
        assert req.error is None and req.counters.timeouts >= 3
        assert cc.timeouts == req.counters.timeouts
    finally:
        ep_a.stop()
        sink.close()


def test_the_pacing_decision_holds_packets_back():
    """A cc pacing at 4 Mbit/s makes 200 KB take about 0.43 s on loopback; without pacing it takes far less."""
    params = TransportParams(payload_bytes=1024, window_pkts=64, ack_every_pkts=8, rto_us=5_000_000)
    size = 200_000
    times = {}
    for label, pace_bps, sport in (("none", None, 50130), ("paced", 4e6, 50140)):
        cc = Recording(10e6, 1024, pace_bps=pace_bps)
        ep_a, ep_b, req, resp = qp_pair(params, cc=cc, sport=sport)
        try:
            t0 = time.monotonic()
            assert req.wait_acked(req.post_send(size), timeout_s=20)
            times[label] = time.monotonic() - t0
        finally:
            ep_a.stop()
            ep_b.stop()
        wire_s = cc.sent_bytes * 8 / 4e6
    assert times["paced"] == pytest.approx(wire_s, rel=0.25)
    assert times["none"] < times["paced"] / 3


def test_flowlet_keeps_the_port_in_a_burst_and_may_change_it_after_a_gap():
    from traffic.transport.entropy import Flowlet
    qe = Flowlet(5, 0, ports_per_qp=8, flowlet_gap_us=500).for_qp(50000)
    assert qe.ports[0] == 50000 and len(set(qe.ports)) == 8
    t, picks = 0, []
    for burst in range(40):
        first = qe.port_index(t)
        for k in range(1, 20):  # 19 more packets 100 us apart: one flowlet
            assert qe.port_index(t + k * 100_000) == first
        picks.append(first)
        t += 19 * 100_000 + 600_000  # idle 600 us > the 500 us gap: a new flowlet
    assert qe.flowlets == 40 and len(set(picks)) > 4  # new flowlets spread over the ports
    assert qe.port_index(t - 600_000 + 400_000) == picks[-1]  # 400 us after its last packet: same flowlet


def test_spray_picks_a_port_per_packet_from_a_seeded_set():
    qe = Spray(5, 0, ports_per_qp=16).for_qp(50000)
    again = Spray(5, 0, ports_per_qp=16).for_qp(50000)
    assert qe.ports == again.ports and len(set(qe.ports)) == 16
    picks = [qe.port_index(i) for i in range(1600)]
    assert picks == [again.port_index(i) for i in range(1600)]  # reproducible
    counts = [picks.count(i) for i in range(16)]
    assert min(counts) > 60 and max(counts) < 140  # uniform: 100 each


def test_entropy_keys_belong_to_their_policies():
    from testbed.spec.scenario import ScenarioError, parse_scenario
    w = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}
    with pytest.raises(ScenarioError, match="transport.entropy_ports is for transport.entropy: spray or flowlet, "
                                            "not 'per_flow'"):
        parse_scenario({"transport": {"entropy_ports": 8}, "workload": w})
    with pytest.raises(ScenarioError, match="transport.flowlet_gap_us is for transport.entropy: flowlet, not 'spray'"):
        parse_scenario({"transport": {"entropy": "spray", "flowlet_gap_us": 100}, "workload": w})
    from testbed.emulation.agents import transport_params
    p = transport_params(parse_scenario({"transport": {"entropy": "flowlet"}, "workload": w}), 200_000)
    assert (p.entropy_ports, p.flowlet_gap_us, p.loss_recovery) == (8, 100_000, "go_back_n")
    p = transport_params(parse_scenario({"transport": {"entropy": "spray"}, "workload": w}), 200_000)
    assert (p.entropy_ports, p.flowlet_gap_us, p.loss_recovery, p.reorder_window_us) == (
        128, 0, "selective_repeat", 100_000)
