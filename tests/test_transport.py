"""The RC transport over loopback (no root): delivery, go-back-N under loss, exactly-once."""
import random

import pytest

from traffic.transport import Endpoint, RequesterQP, ResponderQP, TransportParams


def _pair(params, a="127.0.0.1", b="127.0.0.2", sport=50000):
    ep_a, ep_b = Endpoint(a), Endpoint(b)
    req = RequesterQP(0x10001, 0x20000, a, b, sport, params)
    resp = ResponderQP(0x20000, 0x10001, b, a, sport + 1, params)
    ep_a.requesters[req.qpn] = req
    ep_b.responders[resp.qpn] = resp
    ep_a.start()
    ep_b.start()
    return ep_a, ep_b, req, resp


def _lossy(sock, p_drop, rng):
    real = sock.sendto

    def sendto(data, addr):
        if rng.random() < p_drop:
            return len(data)
        return real(data, addr)
    return sendto


@pytest.mark.parametrize("p_drop", [0.0, 0.05])
def test_messages_delivered_exactly_once(p_drop):
    params = TransportParams(payload_bytes=1024, window_pkts=32, ack_every_pkts=4, rto_us=20_000)
    ep_a, ep_b, req, resp = _pair(params)
    rng = random.Random(7)
    if p_drop:  # socket methods are read-only: drop packets through a proxy
        class Proxy:
            def __init__(self, s):
                self._s = s
                self.sendto = _lossy(s, p_drop, rng)

            def __getattr__(self, k):
                return getattr(self._s, k)
        req.sock = Proxy(req.sock)
        resp.sock = Proxy(resp.sock)
    try:
        sizes = [1, 1000, 1024, 5000, 64 * 1024, 300_000]
        seqs = [req.post_send(s) for s in sizes]
        assert req.wait_acked(seqs[-1], timeout_s=30)
        assert resp.wait_messages(len(sizes), timeout_s=5)
        c, rc = req.counters, resp.counters
        assert rc.delivered_bytes == sum(sizes) == c.acked_bytes
        assert resp.msg_bytes == sizes
        assert rc.order_errors == 0
        if p_drop:
            assert c.retx_pkts > 0 and (c.naks_rx > 0 or c.timeouts > 0)
            assert rc.dup_pkts + rc.out_of_order_pkts > 0
        else:
            assert c.retx_pkts == 0 and rc.dup_pkts == 0
    finally:
        ep_a.stop()
        ep_b.stop()
