"""Selective repeat over loopback (no root): reordered packets are placed, not NAKed and resent;
lost ones are resent alone; everything is delivered exactly once and in order (traffic.transport.selective)."""
import random
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
                             loss_recovery=SELECTIVE_REPEAT, reorder_window_us=10_000)
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
