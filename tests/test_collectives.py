"""Ring all-reduce chunking and schedule: sizes not divisible by the ranks, every byte exactly once.

The schedule is checked by replaying it on contributions (which rank's data
each chunk holds); the byte counts by running it on real queue pairs over
loopback UDP (one thread per rank, no root).
"""
import threading
from collections import Counter

import pytest

from traffic.collectives import chunk_sizes, ring_allreduce, ring_allreduce_steps
from traffic.transport import Endpoint, RequesterQP, ResponderQP, TransportParams, initial_psn


@pytest.mark.parametrize("size, n, want", [
    (10, 3, [4, 3, 3]), (100_003, 8, [12501] * 3 + [12500] * 5), (2, 3, [1, 1, 0]), (0, 4, [0, 0, 0, 0]),
    (4 * 1024 * 1024, 8, [524288] * 8),
])
def test_chunk_sizes(size, n, want):
    assert chunk_sizes(size, n) == want and sum(want) == size


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_schedule_reduces_every_contribution_exactly_once(n):
    # held[r][c]: whose contributions rank r's chunk c holds (a multiset)
    held = [[Counter({r: 1}) for _ in range(n)] for r in range(n)]
    steps = [ring_allreduce_steps(r, n) for r in range(n)]
    assert all(len(s) == 2 * (n - 1) for s in steps)
    for s in range(2 * (n - 1)):
        sent = [(steps[r][s][0], Counter(held[r][steps[r][s][0]])) for r in range(n)]  # all send at once
        for r in range(n):
            chunk, data = sent[(r - 1) % n]
            assert chunk == steps[r][s][1], "a rank must receive the chunk its predecessor sends"
            held[r][chunk] = held[r][chunk] + data if s < n - 1 else data  # reduce-scatter, then all-gather
    everyone = Counter(range(n))
    assert all(held[r][c] == everyone for r in range(n) for c in range(n))


@pytest.mark.parametrize("size, n", [(100_003, 3), (2, 3), (10_000, 4)])
def test_ring_allreduce_on_real_qps_sends_each_chunk_once(size, n):
    """Each rank sends its 2(n-1) chunks (zero-byte chunks are skipped on both sides) and receives
    exactly the chunks its predecessor sent; all ranks together move 2(n-1) x size bytes."""
    params = TransportParams(payload_bytes=1024, window_pkts=32, ack_every_pkts=8, rto_us=200_000)
    ips = [f"127.78.{n}.{r + 1}" for r in range(n)]
    eps = [Endpoint(ip) for ip in ips]
    send_qp, recv_qp = {}, {}
    for r in range(n):
        q = (r + 1) % n
        req = RequesterQP(0x10000 + q, 0x20000 + r, ips[r], ips[q], 52000 + 2 * r, params,
                          first_psn=initial_psn(7, r, q))
        resp = ResponderQP(0x20000 + r, 0x10000 + q, ips[q], ips[r], 52001 + 2 * r, params,
                           first_psn=initial_psn(7, r, q))
        eps[r].requesters[req.qpn] = req
        eps[q].responders[resp.qpn] = resp
        send_qp[r], recv_qp[q] = req, resp
    for ep in eps:
        ep.start()
    out, errors = {}, []

    def rank(r):
        try:
            out[r] = ring_allreduce(r, n, size, send_qp[r], recv_qp[r], 0, timeout_s=20)
        except Exception as e:  # surfaced below
            errors.append(e)
    try:
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        chunks = chunk_sizes(size, n)
        for r in range(n):
            sends = [chunks[c] for c, _ in ring_allreduce_steps(r, n)]
            assert out[r]["sent_bytes"] == sum(sends) == 2 * size - chunks[(r + 1) % n] - chunks[(r + 2) % n]
            assert recv_qp[(r + 1) % n].msg_bytes == [b for b in sends if b]   # what r sent, in order, once
            assert out[r]["rx_msgs"] == sum(1 for _, c in ring_allreduce_steps(r, n) if chunks[c])
        assert sum(o["sent_bytes"] for o in out.values()) == 2 * (n - 1) * size
        assert sum(q.counters.delivered_bytes for q in recv_qp.values()) == 2 * (n - 1) * size
        assert all(q.counters.order_errors == 0 for q in recv_qp.values())
    finally:
        for ep in eps:
            ep.stop()
