"""The RC transport over loopback (no root): delivery, go-back-N under loss, exactly-once,
ACK counts for an ACK interval, seeded initial PSNs and the 2^24 PSN wrap."""
import random
import time

import pytest

from traffic.transport import PSN_MASK, Endpoint, RequesterQP, ResponderQP, TransportParams, initial_psn
from traffic.wire import unpack_bth


def qp_pair(params, a="127.0.0.1", b="127.0.0.2", sport=50000, cc=None):
    """Endpoints at ``a`` and ``b``, a requester QP at a (congestion control ``cc``, default
    ``params.congestion_control``) and its responder at b, receive threads started."""
    ep_a, ep_b = Endpoint(a), Endpoint(b)
    req = RequesterQP(0x10001, 0x20000, a, b, sport, params, cc=cc)
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
    ep_a, ep_b, req, resp = qp_pair(params)
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


# ---------------------------------------------------------------- ACK interval, initial PSN, wrap-around
# addresses of their own on lo, so a concurrent run of the tests above cannot take port 4791 from us
A, B = "127.77.0.1", "127.77.0.2"


class _Tap:
    """Socket proxy that records every datagram sent (``sent``) and can drop some (``drop(data) -> bool``)."""

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


def _qp_pair(params, first_psn, sport=51000):
    ep_a, ep_b = Endpoint(A), Endpoint(B)
    req = RequesterQP(0x10001, 0x20000, A, B, sport, params, first_psn=first_psn)
    resp = ResponderQP(0x20000, 0x10001, B, A, sport + 1, params, first_psn=first_psn)
    ep_a.requesters[req.qpn] = req
    ep_b.responders[resp.qpn] = resp
    return ep_a, ep_b, req, resp


def _psns(datagrams):
    return [unpack_bth(d).psn for d in datagrams]


@pytest.mark.parametrize("first_psn", [0, PSN_MASK - 4, 123_456])
def test_ack_every_8_on_a_20_packet_message_gives_3_acks(first_psn):
    params = TransportParams(payload_bytes=1024, window_pkts=64, ack_every_pkts=8, rto_us=5_000_000)  # no spurious timeout
    ep_a, ep_b, req, resp = _qp_pair(params, first_psn)
    req.sock, resp.sock = _Tap(req.sock), _Tap(resp.sock)
    ep_a.start()
    ep_b.start()
    try:
        seq = req.post_send(20 * 1024)
        assert req.wait_acked(seq, timeout_s=10)
        time.sleep(0.05)
        want = [(first_psn + i) & PSN_MASK for i in (7, 15, 19)]   # packets 8, 16 and the last (20th)
        assert _psns(resp.sock.sent) == want
        assert resp.counters.acks_tx == 3 and req.counters.acks_rx == 3
        sent = [unpack_bth(d) for d in req.sock.sent]
        assert [b.psn for b in sent if b.ack_req] == want
        assert req.counters.tx_pkts == 20 and req.counters.retx_pkts == 0
    finally:
        ep_a.stop()
        ep_b.stop()


def test_psn_wraps_at_2_pow_24_delivered_once_in_order():
    params = TransportParams(payload_bytes=1024, window_pkts=64, ack_every_pkts=8, rto_us=5_000_000)  # no spurious timeout
    first = (1 << 24) - 5
    ep_a, ep_b, req, resp = _qp_pair(params, first)
    req.sock = _Tap(req.sock)
    ep_a.start()
    ep_b.start()
    try:
        sizes = [3 * 1024, 10 * 1024, 7 * 1024 - 100]  # 20 packets: the 2nd message crosses the wrap
        seqs = [req.post_send(s) for s in sizes]
        assert req.wait_acked(seqs[-1], timeout_s=10)
        assert resp.wait_messages(3, timeout_s=2)
        assert _psns(req.sock.sent) == [16777211, 16777212, 16777213, 16777214, 16777215] + list(range(15))
        c = resp.counters
        assert resp.msg_bytes == sizes and c.delivered_bytes == sum(sizes) == req.counters.acked_bytes
        assert (c.order_errors, c.dup_pkts, c.out_of_order_pkts, c.naks_tx) == (0, 0, 0, 0)
        assert c.rx_pkts == 20 and req.counters.retx_pkts == 0
    finally:
        ep_a.stop()
        ep_b.stop()


def test_go_back_n_across_the_wrap_recovers_losses():
    """Every 7th first transmission is lost; NAKs and resends straddle 2^24 - 1 -> 0."""
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=20_000)
    first = (1 << 24) - 40
    ep_a, ep_b, req, resp = _qp_pair(params, first)
    seen = set()

    def drop(data):
        psn = unpack_bth(data).psn
        lose = psn % 7 == 0 and psn not in seen
        seen.add(psn)
        return lose
    req.sock = _Tap(req.sock, drop)
    ep_a.start()
    ep_b.start()
    try:
        seq = req.post_send(80 * 1024)
        assert req.wait_acked(seq, timeout_s=20)
        assert resp.wait_messages(1, timeout_s=2)
        c = resp.counters
        assert resp.msg_bytes == [80 * 1024] and c.delivered_bytes == 80 * 1024
        assert c.order_errors == 0
        lost = sum(1 for p in seen if p % 7 == 0)
        assert lost == len([i for i in range(80) if (first + i) % (1 << 24) % 7 == 0]) > 5
        assert req.counters.retx_pkts >= lost
        assert {0, PSN_MASK} <= seen
    finally:
        ep_a.stop()
        ep_b.stop()


def test_initial_psn_is_seeded_24_bit_and_per_direction():
    values = {initial_psn(1, r, q) for r in range(8) for q in range(8) if r != q}
    assert len(values) == 56 and all(0 <= v <= PSN_MASK for v in values)
    assert initial_psn(1, 0, 1) == initial_psn(1, 0, 1) != initial_psn(2, 0, 1)
    assert initial_psn(1, 0, 1) != initial_psn(1, 1, 0)


@pytest.mark.parametrize("bad", [-1, 1 << 24])
def test_first_psn_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match=f"first_psn={bad}"):
        ResponderQP(0x20000, 0x10001, A, B, 0, TransportParams(), first_psn=bad)


def test_send_error_stops_the_qp_within_a_second_naming_qp_peer_and_errno():
    """C12: a send error other than a full queue is reported at once, naming QP, peer and errno, not
    retried forever or swallowed. A real kernel error without root: sending to the limited broadcast
    address without SO_BROADCAST fails with EACCES (an MTU overflow fails the same way with EMSGSIZE)."""
    import errno
    import threading
    import time

    from traffic.transport import TransportError

    params = TransportParams(payload_bytes=1024, window_pkts=4, ack_every_pkts=1, rto_us=20_000)
    reported, when = [], threading.Event()
    req = RequesterQP(0x10001, 0x20000, "127.0.0.1", "255.255.255.255", 50010, params,
                      on_error=lambda text: (reported.append(text), when.set()))
    try:
        t0 = time.monotonic()
        seq = req.post_send(5000)
        assert when.wait(1.0), "no send error reported within 1 s"
        assert time.monotonic() - t0 < 1.0
        assert reported == [req.error]
        text = reported[0]
        assert "QP 0x10001" in text and "255.255.255.255:4791" in text
        assert f"errno {errno.EACCES} (EACCES" in text
        with pytest.raises(TransportError, match="EACCES"):
            req.wait_acked(seq, timeout_s=5)
        assert req.counters.tx_pkts == 0 and req.counters.nic_full_waits == 0
    finally:
        req.stop()


def test_agent_reports_a_send_error_at_once(capsys):
    """The agent tells the testbed (one ``error`` event on stdout) as soon as a QP's send fails,
    without waiting for the collective's timeout: the testbed then stops the run."""
    import time

    from traffic.agent import Agent
    from traffic.protocol import AgentConfig, ErrorEvent, RankAddress, decode

    cfg = AgentConfig(rank=0, seed=1, peers=[1],
                      ranks=[RankAddress(0, "127.0.0.1", "h1"), RankAddress(1, "255.255.255.255", "h2")],
                      transport=TransportParams(payload_bytes=1024, window_pkts=4, ack_every_pkts=1, rto_us=20_000))
    agent = Agent(cfg)
    try:
        t0 = time.monotonic()
        agent.send_qp[1].post_send(4096)
        events = []
        while time.monotonic() - t0 < 1.0 and not events:
            time.sleep(0.01)
            events = [decode(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
        assert events, "no error event within 1 s"
        ev = events[0]
        assert isinstance(ev, ErrorEvent)
        assert ev.error.startswith("rank 0: QP 0x10001 -> 255.255.255.255:4791") and "EACCES" in ev.error
    finally:
        agent.close()
