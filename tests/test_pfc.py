"""PFC frames (IEEE 802.1Qbb) and the host NIC obeying them (no root): the frame bytes decode with scapy,
pause timers from quanta, and a real requester QP (loopback) that holds its data for the pause time."""
import time

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from traffic.transport import Endpoint, RequesterQP, ResponderQP, TransportParams
from traffic.transport.pfc_rx import PauseState
from traffic.wire.pfc import (LOSSLESS_PRIORITY, MAX_QUANTA, class_vector, parse_pfc, pfc_frame, quanta_for_s,
                              quanta_s)

MAC = bytes.fromhex("02a0b0c0d0e1")


def test_frame_decodes_with_scapy_as_class_based_flow_control():
    quanta = [0, 0, 0, 0xFFFF, 0, 0, 7, 0]
    raw = pfc_frame(MAC, class_vector([3, 6]), quanta)
    assert len(raw) == 60
    pkt = Ether(raw)
    assert pkt.dst == "01:80:c2:00:00:01" and pkt.src == "02:a0:b0:c0:d0:e1" and pkt.type == 0x8808
    pfc = pkt[MACControlClassBasedFlowControl]
    assert pfc._op_code == 0x0101
    assert [getattr(pfc, f"c{i}_enabled") for i in range(8)] == [0, 0, 0, 1, 0, 0, 1, 0]
    assert [getattr(pfc, f"c{i}_pause_time") for i in range(8)] == quanta


def test_frame_equals_scapys_and_parses_back():
    built = Ether(dst="01:80:c2:00:00:01", src="02:a0:b0:c0:d0:e1") / MACControlClassBasedFlowControl(
        c3_enabled=1, c3_pause_time=1234)
    ours = pfc_frame(MAC, 0x08, [0, 0, 0, 1234, 0, 0, 0, 0])
    assert bytes(built).ljust(60, b"\0") == ours
    assert parse_pfc(ours) == (0x08, (0, 0, 0, 1234, 0, 0, 0, 0))
    pause_8023x = bytes(ours[:14]) + b"\x00\x01" + bytes(44)  # opcode 0x0001: 802.3x PAUSE, not PFC
    assert parse_pfc(pause_8023x) is None and parse_pfc(ours[:20]) is None
    ip = ours[:12] + b"\x08\x00" + ours[14:]
    assert parse_pfc(ip) is None


def test_bad_frames_are_refused_naming_the_value():
    with pytest.raises(ValueError, match="priority 8: allowed 0..7"):
        class_vector([8])
    with pytest.raises(ValueError, match=r"class_enable_vector=256"):
        pfc_frame(MAC, 256, [0] * 8)
    with pytest.raises(ValueError, match=r"give 8 pause times, each 0..65535"):
        pfc_frame(MAC, 8, [0] * 7)
    with pytest.raises(ValueError, match=r"give 8 pause times"):
        pfc_frame(MAC, 8, [0, 0, 0, 70000, 0, 0, 0, 0])


def test_quanta_are_512_bit_times_of_the_link():
    assert quanta_s(MAX_QUANTA, 10e6) == pytest.approx(3.355392)  # 65535 x 512 / 10 Mbit/s
    assert quanta_s(1, 400e9) == pytest.approx(1.28e-9)
    assert quanta_for_s(0.5, 10e6) == 9766 and quanta_for_s(10, 10e6) == MAX_QUANTA and quanta_for_s(0, 10e6) == 1


def test_pause_state_reloads_resumes_and_sums_paused_time():
    s, ms = PauseState(10e6), 1_000_000
    q100 = quanta_for_s(0.1, 10e6)  # 1953 quanta = 99.99 ms
    s.on_frame(0, 0x08, [0, 0, 0, q100, 0, 0, 0, 0])
    assert s.paused_until_ns(50 * ms) == pytest.approx(100 * ms, abs=0.1 * ms)
    s.on_frame(60 * ms, 0x08, [0, 0, 0, q100, 0, 0, 0, 0])  # refresh: reloaded from 60 ms
    assert s.paused_until_ns(150 * ms) == pytest.approx(160 * ms, abs=0.1 * ms)
    s.on_frame(120 * ms, 0x08, [0] * 8)  # quanta 0: resume at once
    assert s.paused_until_ns(120 * ms) == 0 and s.paused_ns(500 * ms) == 120 * ms
    s.on_frame(200 * ms, 0x01, [q100] + [0] * 7)  # priority 0 only: the lossless class runs on
    assert s.paused_until_ns(210 * ms) == 0 and s.paused_until_ns(210 * ms, priority=0) > 0
    s.on_frame(300 * ms, 0x08, [0, 0, 0, q100, 0, 0, 0, 0])  # a second pause, left to expire
    assert s.paused_ns(1000 * ms) == pytest.approx(220 * ms, abs=0.1 * ms)
    assert (s.pause_frames, s.resume_frames, s.other_frames) == (3, 1, 1)
    with pytest.raises(ValueError, match="link_bps=0"):
        PauseState(0)


def test_a_paused_qp_holds_its_data_for_the_quanta_time_and_resumes_on_quanta_zero():
    """A real requester QP on loopback: nothing leaves while the lossless priority is paused (longer
    than the retransmission timeout, which must not fire), all is delivered after the pause."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=50_000,
                             line_rate_bps=10e6)
    pause = PauseState(params.line_rate_bps)
    ep_a, ep_b = Endpoint("127.0.0.1"), Endpoint("127.0.0.2")
    req = RequesterQP(0x10001, 0x20000, "127.0.0.1", "127.0.0.2", 50010, params, pause=pause)
    resp = ResponderQP(0x20000, 0x10001, "127.0.0.2", "127.0.0.1", 50011, params)
    ep_a.requesters[req.qpn], ep_b.responders[resp.qpn] = req, resp
    ep_a.start()
    ep_b.start()
    try:
        q = quanta_for_s(0.3, params.line_rate_bps)
        t0 = time.monotonic_ns()
        pause.on_frame(t0, class_vector([LOSSLESS_PRIORITY]), [0, 0, 0, q, 0, 0, 0, 0])
        seq = req.post_send(20 * 1024)
        time.sleep(0.15)
        assert req.counters.tx_pkts == 0  # paused
        assert req.wait_acked(seq, timeout_s=5)
        c = req.counters
        assert c.tx_pkts == 20 and c.retx_pkts == 0 and c.timeouts == 0
        assert 0.25e9 < c.pfc_paused_ns < 0.40e9, c  # the 300 ms pause, less the time before post_send
        # a second pause of 3.36 s, resumed after 0.1 s by a frame with quanta 0
        pause.on_frame(time.monotonic_ns(), 0x08, [0, 0, 0, MAX_QUANTA, 0, 0, 0, 0])
        seq = req.post_send(4 * 1024)
        time.sleep(0.1)
        assert req.counters.tx_pkts == 20
        t_resume = time.monotonic()
        pause.on_frame(time.monotonic_ns(), 0x08, [0] * 8)
        with req.cond:
            req.cond.notify_all()  # the agent's PfcReceiver does this after each frame
        assert req.wait_acked(seq, timeout_s=2) and time.monotonic() - t_resume < 0.5
        assert req.counters.tx_pkts == 24 and resp.counters.order_errors == 0
    finally:
        req.stop()
        ep_a.stop()
        ep_b.stop()


def test_host_pfc_counters_cross_the_agent_protocol_into_results():
    from testbed.results.pfc_hosts import pfc_hosts_block
    from traffic import protocol
    from traffic.protocol import PfcRxStats, Stats

    pfc = PfcRxStats(pause_frames=3, resume_frames=1, other_frames=0, paused_ns=1_300_000_000,
                     frames=[[10, 8, 9766], [20, 8, 3906], [30, 8, 3906], [40, 8, 0]])
    s0 = protocol.decode(protocol.encode(Stats(rank=0, requesters=[], responders=[], msgs=[], rx_pkts=0,
                                               rx_unknown_pkts=0, pfc=pfc)))
    s1 = Stats(rank=1, requesters=[], responders=[], msgs=[], rx_pkts=0, rx_unknown_pkts=0)
    assert s0.pfc == pfc and s1.pfc.frames == []
    assert s0.pfc_rows()[-1] == {"rank": 0, "time_ns": 40, "class_enable_vector": 8, "lossless_quanta": 0}
    assert pfc_hosts_block([s0, s1], ["h1", "h2"]) == {
        "pause_frames_rx": 3, "resume_frames_rx": 1, "paused_time_s": 1.3,
        "hosts": {"h1": {"pause_frames_rx": 3, "resume_frames_rx": 1, "paused_time_s": 1.3}}}
    assert pfc_hosts_block([s1], ["h1", "h2"]) is None  # no frames: no block
