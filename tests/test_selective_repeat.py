"""Selective repeat over loopback (no root): reordered packets are placed, not NAKed and resent;
lost ones are resent alone; everything is delivered exactly once and in order (traffic.transport.selective)."""
import random
import time
import threading

import pytest

from traffic.transport import Endpoint, TransportParams
from traffic.transport.selective import (GO_BACK_N, SELECTIVE_REPEAT, SelectiveRequesterQP, SelectiveResponderQP,
                                         qp_classes)
from traffic.transport.qp import RequesterQP
from traffic.transport.responder import ResponderQP

A, B = "127.78.0.1", "127.78.0.2"  # own addresses on lo: the other transport tests use others


class _Mangler:
    """A socket proxy that delays a fraction of packets by ``delay_s`` (they arrive behind later ones:
    reordering, as over a longer path) and drops another fraction (loss)."""

    def __init__(self, sock, p_hold: float, p_drop: float, seed: int, delay_s: float = 0.003):
        self._s, self._rng = sock, random.Random(seed)
        self.p_hold, self.p_drop, self.delay_s = p_hold, p_drop, delay_s

    def sendto(self, data, addr):
        r = self._rng.random()
        if r < self.p_drop:
            return len(data)
        if r < self.p_drop + self.p_hold:
            threading.Timer(self.delay_s, self._s.sendto, (bytes(data), addr)).start()
            return len(data)
        return self._s.sendto(data, addr)

    def __getattr__(self, k):
        return getattr(self._s, k)


def _run(p_hold: float, p_drop: float, sizes, window_pkts=32):
    params = TransportParams(payload_bytes=1024, window_pkts=window_pkts, ack_every_pkts=4, rto_us=50_000,
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=25_000)
    ep_a, ep_b = Endpoint(A), Endpoint(B)
    req = SelectiveRequesterQP(0x10001, 0x20000, A, B, 50100, params)
    resp = SelectiveResponderQP(0x20000, 0x10001, B, A, 50101, params)
    req.sock = _Mangler(req.sock, p_hold, p_drop, seed=11)
    ep_a.requesters[req.qpn], ep_b.responders[resp.qpn] = req, resp
    ep_a.start()
    ep_b.start()
    try:
        seqs = [req.post_send(s) for s in sizes]
        assert req.wait_acked(seqs[-1], timeout_s=60)
        assert resp.wait_messages(len(sizes), timeout_s=5)
        return req.counters, resp.counters, resp.msg_bytes
    finally:
        ep_a.stop()
        ep_b.stop()


SIZES = [1, 1000, 5000, 64 * 1024, 300_000]


def test_reordering_alone_is_placed_without_any_retransmission():
    c, rc, msg_bytes = _run(p_hold=0.2, p_drop=0.0, sizes=SIZES)
    assert msg_bytes == SIZES and rc.delivered_bytes == sum(SIZES) == c.acked_bytes
    assert rc.order_errors == 0 and rc.dup_pkts == 0
    assert rc.out_of_order_pkts > 20 and 1 <= rc.max_reorder_pkts <= 32  # placed ahead, within the window
    assert c.retx_pkts == 0 and c.naks_rx == 0 and rc.naks_tx == 0  # go-back-N would have NAKed each gap


def test_losses_are_resent_alone_and_delivered_exactly_once_in_order():
    c, rc, msg_bytes = _run(p_hold=0.1, p_drop=0.03, sizes=SIZES)
    assert msg_bytes == SIZES and rc.delivered_bytes == sum(SIZES) == c.acked_bytes
    assert rc.order_errors == 0
    lost = c.tx_pkts - rc.rx_pkts  # packets the mangler dropped (it never delivers more than it got)
    assert lost > 0 and c.retx_pkts >= lost
    # selective: about one resend per loss, far fewer than go-back-N's window per loss
    assert c.retx_pkts <= 4 * lost, (c.retx_pkts, lost)


def test_qp_classes_by_loss_recovery():
    assert qp_classes(GO_BACK_N) == (RequesterQP, ResponderQP)
    assert qp_classes(SELECTIVE_REPEAT) == (SelectiveRequesterQP, SelectiveResponderQP)
    with pytest.raises(ValueError, match="loss_recovery 'irn': allowed go_back_n, selective_repeat"):
        qp_classes("irn")


# ---------------------------------------------------------------- IRN: NACK per out-of-order arrival with a SACK
from traffic import wire  # noqa: E402
from traffic.transport import PSN_MASK  # noqa: E402
from traffic.wire import unpack_bth  # noqa: E402

C, D = "127.78.1.1", "127.78.1.2"


class _Tap:
    """Socket proxy that records every datagram sent and drops those ``drop(data)`` says."""

    def __init__(self, sock, drop=None):
        self._s, self.sent, self._drop = sock, [], drop

    def sendto(self, data, addr):
        data = bytes(data)
        self.sent.append(data)
        if self._drop is not None and self._drop(data):
            return len(data)
        return self._s.sendto(data, addr)

    def __getattr__(self, k):
        return getattr(self._s, k)


def _naks(datagrams):
    """(expected PSN, SACKed PSN or None) of every NAK among ``datagrams``."""
    out = []
    for d in datagrams:
        b = unpack_bth(d)
        if b.opcode == wire.Opcode.RC_ACKNOWLEDGE and wire.unpack_aeth(d, wire.BTH_BYTES).kind == wire.AethType.NAK:
            sack = wire.unpack_irn_sack(d, wire.BTH_BYTES + wire.AETH_BYTES) if len(d) == wire.NAK_SACK_BYTES else None
            out.append((b.psn, sack))
    return out


def _irn_pair(params, first_psn, drop, sport=52000):
    ep_a, ep_b = Endpoint(C), Endpoint(D)
    req = SelectiveRequesterQP(0x10001, 0x20000, C, D, sport, params, first_psn=first_psn)
    resp = SelectiveResponderQP(0x20000, 0x10001, D, C, sport + 1, params, first_psn=first_psn)
    req.sock, resp.sock = _Tap(req.sock, drop), _Tap(resp.sock)
    ep_a.requesters[req.qpn], ep_b.responders[resp.qpn] = req, resp
    ep_a.start()
    ep_b.start()
    return ep_a, ep_b, req, resp


@pytest.mark.parametrize("first_psn", [1000, PSN_MASK - 6])
def test_irn_nacks_every_out_of_order_arrival_and_resends_each_hole_once(first_psn):
    """First transmissions of packets 3, 5 and 6 (of 16) are lost, nothing reorders (per-flow):
    the responder NACKs each later arrival at once with the expected PSN and the arriving PSN (IRN's
    SACK); the requester resends exactly the three holes, once each, without any timeout; across
    the 2^24 wrap too."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=2_000_000,
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=0)
    lost = {(first_psn + i) & PSN_MASK for i in (3, 5, 6)}
    seen = set()

    def drop(data):
        psn = unpack_bth(data).psn
        first = psn not in seen
        seen.add(psn)
        return first and psn in lost
    ep_a, ep_b, req, resp = _irn_pair(params, first_psn, drop)
    try:
        seq = req.post_send(16 * 1024)
        assert req.wait_acked(seq, timeout_s=10)
        assert resp.wait_messages(1, timeout_s=2)
        c, rc = req.counters, resp.counters
        assert resp.msg_bytes == [16 * 1024] and rc.delivered_bytes == 16 * 1024 == c.acked_bytes
        assert rc.order_errors == 0 and rc.dup_pkts == 0
        assert c.retx_pkts == 3 and c.retx_bytes == 3 * 1024 and c.timeouts == 0
        sent = [unpack_bth(d) for d in req.sock.sent]
        psns = [b.psn for b in sent]
        assert {p for p in psns if psns.count(p) > 1} == lost and all(psns.count(p) == 2 for p in lost)
        assert all(b.ack_req for i, b in enumerate(sent) if b.psn in psns[:i])  # every resend asks for an ACK
        naks = _naks(resp.sock.sent)
        # the first out-of-order arrival (packet 4, hole 3) is NACKed at once with itself SACKed; every NACK
        # carries a SACK of a packet that arrived
        assert naks[0] == ((first_psn + 3) & PSN_MASK, (first_psn + 4) & PSN_MASK)
        assert all(s is not None and s not in lost for _, s in naks)
        assert len(naks) == rc.naks_tx == rc.out_of_order_pkts >= 2
    finally:
        ep_a.stop()
        ep_b.stop()


def test_irn_lost_retransmission_is_recovered_by_a_timeout():
    """Packet 2's first transmission and its first resend are lost, and nothing is sent after the
    resend (a 4-packet message): the episode resends it once, then only a timeout (IRN: timeouts
    are for lost retransmissions) resends it again."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=100_000,
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=0)
    sends = {}

    def drop(data):
        psn = unpack_bth(data).psn
        sends[psn] = sends.get(psn, 0) + 1
        return psn == 2 and sends[psn] <= 2
    ep_a, ep_b, req, resp = _irn_pair(params, 0, drop, sport=52010)
    try:
        seq = req.post_send(4 * 1024)
        assert req.wait_acked(seq, timeout_s=10)
        assert resp.wait_messages(1, timeout_s=2)
        c, rc = req.counters, resp.counters
        assert rc.delivered_bytes == 4 * 1024 and rc.order_errors == 0
        assert sends[2] == 3 and c.timeouts == 1 and c.retx_pkts == 2
    finally:
        ep_a.stop()
        ep_b.stop()


def test_irn_lost_retransmission_detected_by_a_later_sack_without_timeout():
    """Packet 2 and its first resend are lost, but new packets follow the resend (window 8 of a
    40-packet message): the SACK of one sent after the resend shows it lost, so it is resent again at
    once (no timeout; the timeout is 2 s)."""
    params = TransportParams(payload_bytes=1024, window_pkts=8, ack_every_pkts=4, rto_us=2_000_000,
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=0)
    sends = {}

    def drop(data):
        psn = unpack_bth(data).psn
        sends[psn] = sends.get(psn, 0) + 1
        return psn == 2 and sends[psn] <= 2
    ep_a, ep_b, req, resp = _irn_pair(params, 0, drop, sport=52015)
    try:
        t0 = time.monotonic()
        seq = req.post_send(40 * 1024)
        assert req.wait_acked(seq, timeout_s=10)
        assert time.monotonic() - t0 < 1.5
        c, rc = req.counters, resp.counters
        assert rc.delivered_bytes == 40 * 1024 and rc.order_errors == 0 and rc.dup_pkts == 0
        assert sends[2] == 3 and c.timeouts == 0 and c.retx_pkts == 2
    finally:
        ep_a.stop()
        ep_b.stop()


def test_irn_tail_loss_waits_only_rto_low():
    """The last two packets of a message are lost (no later arrival to NACK them): with at most
    rto_low_pkts in flight the short timeout (RTO_low, here its 50 ms floor: loopback RTTs are far
    shorter) sends a tail loss probe (the last packet), which arrives beyond the hole, is NACKed
    with its SACK, and the hole is resent: two resends, no wait for the 2 s timeout."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=2_000_000,
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=0, rto_low_us=50_000, rto_low_pkts=4)
    seen = set()

    def drop(data):
        psn = unpack_bth(data).psn
        first = psn not in seen
        seen.add(psn)
        return first and psn in (6, 7)
    ep_a, ep_b, req, resp = _irn_pair(params, 0, drop, sport=52020)
    try:
        t0 = time.monotonic()
        seq = req.post_send(8 * 1024)
        assert req.wait_acked(seq, timeout_s=10)
        took = time.monotonic() - t0
        c = req.counters
        assert c.timeouts == 1 and c.retx_pkts == 2 and 0.04 < took < 1.0, (c, took)
        assert resp.msg_bytes == [8 * 1024] and resp.counters.order_errors == 0
    finally:
        ep_a.stop()
        ep_b.stop()


def test_go_back_n_nak_stays_plain_rocev2():
    """A go-back-N responder sends one 20-byte NAK per sequence error (no IRN extension)."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=2_000_000)
    ep_a, ep_b = Endpoint(C), Endpoint(D)
    req = RequesterQP(0x10001, 0x20000, C, D, 52030, params)
    resp = ResponderQP(0x20000, 0x10001, D, C, 52031, params)
    seen = set()

    def drop(data):
        psn = unpack_bth(data).psn
        first = psn not in seen
        seen.add(psn)
        return first and psn == 3
    req.sock, resp.sock = _Tap(req.sock, drop), _Tap(resp.sock)
    ep_a.requesters[req.qpn], ep_b.responders[resp.qpn] = req, resp
    ep_a.start()
    ep_b.start()
    try:
        seq = req.post_send(10 * 1024)
        assert req.wait_acked(seq, timeout_s=10)
        naks = [d for d in resp.sock.sent if len(d) != wire.ACK_BYTES or
                wire.unpack_aeth(d, wire.BTH_BYTES).kind == wire.AethType.NAK]
        assert [len(d) for d in naks] == [wire.ACK_BYTES] and _naks(naks) == [(3, None)]
        c = req.counters
        assert 1 <= c.retx_pkts <= 7 and c.retx_bytes == c.retx_pkts * 1024 and c.timeouts == 0
        psns = [unpack_bth(d).psn for d in req.sock.sent]
        assert psns[psns.index(3, 4):] == list(range(3, 10))  # back to the NAKed PSN, then on in order
    finally:
        ep_a.stop()
        ep_b.stop()


def test_spray_nack_waits_for_the_reorder_window():
    """With a reorder window (spray), an overtaken packet is not NACKed; once the gap outlives the
    window the NACK SACKs the first PSN placed beyond it (every PSN before it is missing: lost)."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=2_000_000,
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=30_000)
    ep_b = Endpoint(D)
    resp = SelectiveResponderQP(0x20000, 0x10001, D, C, 52041, params)
    sent = []
    resp._send_ack = lambda psn24, nak, sack24=-1: sent.append((psn24, nak, sack24))
    b = wire.DataPacketBuilder(C, D, 52040, 1024)
    try:
        def deliver(psn):
            pkt = bytes(b.build(wire.Opcode.RC_SEND_MIDDLE, 0x20000, psn, False, 0, psn, 1024))
            resp.on_data(memoryview(pkt), len(pkt), wire.Opcode.RC_SEND_MIDDLE, psn, False, 0)
        deliver(0)
        deliver(2)
        deliver(3)
        assert sent == []  # within the window: overtaken, not lost
        time.sleep(0.04)
        deliver(5)
        assert sent == [(1, True, 2)]  # 2 arrived > 30 ms ago: 1 is lost; 4 may still come
        deliver(6)
        assert sent == [(1, True, 2)]  # nothing new to say
        deliver(1)  # the resend fills the gap: 0..3 delivered, the ACK jumps; 4 is missing, 5 and 6 are recent
        assert sent[-1] == (3, False, -1) and resp.epsn == 4
        deliver(7)
        assert len(sent) == 2  # the gap at 4 is younger than the window
        time.sleep(0.04)
        deliver(8)
        assert sent[-1] == (4, True, 5)
    finally:
        ep_b.sock.close()
        resp.close()


def test_irn_nack_wire_format_round_trip():
    b = wire.AckPacketBuilder(D, C, 4791)
    plain = bytes(b.build(0x11, 77, nak=True, msn=5))
    assert len(plain) == wire.ACK_BYTES == 20
    ext = bytes(b.build_nak_sack(0x11, 77, msn=5, sack_psn=PSN_MASK))
    assert len(ext) == wire.NAK_SACK_BYTES == 24 and ext[:16] == plain[:16]
    assert wire.unpack_irn_sack(ext, 16) == PSN_MASK and ext[16] == 0
    assert wire.icrc_ipv4(bytes(b.ip_packet())[:20], bytes(b.ip_packet())[20:28], ext[:-4]) == ext[-4:]
    assert len(bytes(b.build(0x11, 78))) == 20  # the next build without a SACK is plain again
    with pytest.raises(ValueError, match="sack_psn"):
        b.build_nak_sack(0x11, 1, 0, 1 << 24)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_irn_heavy_loss_both_ways_delivers_exactly_once(seed):
    """10% of data packets and 10% of ACKs/NACKs lost, per-flow selective repeat with RTO_low and a
    BDP cap: every message arrives once and in order, and the resends stay within twice the losses."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=50_000,
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=0, rto_low_us=10_000,
                             rto_low_pkts=4, bdp_cap_pkts=8)
    ep_a, ep_b = Endpoint(C), Endpoint(D)
    req = SelectiveRequesterQP(0x10001, 0x20000, C, D, 52100 + 2 * seed, params, first_psn=PSN_MASK - 50)
    resp = SelectiveResponderQP(0x20000, 0x10001, D, C, 52101 + 2 * seed, params, first_psn=PSN_MASK - 50)
    req.sock = _Mangler(req.sock, 0.0, 0.1, seed=seed)
    resp.sock = _Mangler(resp.sock, 0.0, 0.1, seed=seed + 100)
    ep_a.requesters[req.qpn], ep_b.responders[resp.qpn] = req, resp
    ep_a.start()
    ep_b.start()
    try:
        seqs = [req.post_send(s) for s in SIZES]
        assert req.wait_acked(seqs[-1], timeout_s=60)
        assert resp.wait_messages(len(SIZES), timeout_s=5)
        c, rc = req.counters, resp.counters
        assert resp.msg_bytes == SIZES and rc.delivered_bytes == sum(SIZES) == c.acked_bytes
        assert rc.order_errors == 0
        lost = c.tx_pkts - rc.rx_pkts
        assert lost > 10 and lost <= c.retx_pkts <= 2 * lost + c.timeouts, (c, rc)
    finally:
        ep_a.stop()
        ep_b.stop()
