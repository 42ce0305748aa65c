"""Collective schedules run by one rank over RC queue pairs.

Ring all-reduce (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms
for clusters of workstations", JPDC 2009; the NCCL ring algorithm): the buffer
is split into n chunks; n-1 reduce-scatter steps then n-1 all-gather steps, in
each of which rank r sends one chunk to rank r+1 and receives one from r-1.
Step s sends chunk (r - s) mod n; step s+1 may start only once step s's chunk
from r-1 has arrived (it is reduced into, then forwarded). Every rank sends
2(n-1)/n of the buffer, which is why nccl-tests reports
busbw = algbw * 2(n-1)/n for all-reduce.
"""
from __future__ import annotations

import time

from traffic.clock import unix_ns


class CollectiveTimeout(RuntimeError):
    """A step did not complete in time (a peer is stuck or packets are lost for good)."""


def chunk_sizes(size_bytes: int, n: int) -> list[int]:
    """Split ``size_bytes`` into ``n`` chunks differing by at most one byte (some may be 0)."""
    if n < 1 or size_bytes < 0:
        raise ValueError(f"need n >= 1 and size_bytes >= 0, got n={n}, size_bytes={size_bytes}")
    base, extra = divmod(size_bytes, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def ring_allreduce_steps(rank: int, n: int) -> list[tuple[int, int]]:
    """The 2(n-1) steps of ``rank`` in a ring all-reduce of ``n`` ranks: (chunk sent, chunk received).

    Steps 0..n-2 are the reduce-scatter (the received chunk is reduced into the
    local one and sent on at the next step), steps n-1..2n-3 the all-gather.
    Raises ValueError unless 0 <= rank < n.
    """
    if not 0 <= rank < n:
        raise ValueError(f"rank={rank} must be in 0..{n - 1}")
    return [((rank - s) % n, (rank - s - 1) % n) for s in range(2 * (n - 1))]


def ring_allreduce(rank: int, n: int, size_bytes: int, send_qp, recv_qp, rx_base: int,
                   timeout_s: float, ring=None) -> dict:
    """Run one ring all-reduce of ``size_bytes`` as position ``rank`` of an ``n``-rank ring.

    ``ring``: the job ranks in ring order (a group of a larger job, e.g. a
    SimAI TP group), used to name peers in errors; default 0..n-1.
    ``send_qp`` is the RequesterQP to position (r+1) mod n, ``recv_qp`` the
    ResponderQP from position (r-1) mod n; ``rx_base`` is how many messages of
    ``recv_qp`` earlier operations consumed (the caller keeps this count: the
    previous rank may already have sent this operation's first chunk before
    this rank was told to start, so a snapshot of the counter would be wrong).
    Returns per-rank figures: bytes sent, messages received (``rx_msgs``) and
    the time the last chunk arrived. Raises CollectiveTimeout when a step
    waits longer than ``timeout_s``.
    """
    ring = list(ring) if ring is not None else list(range(n))
    me, prv, nxt = ring[rank], ring[(rank - 1) % n], ring[(rank + 1) % n]
    chunks = chunk_sizes(size_bytes, n)
    deadline = time.monotonic() + timeout_s
    base_rx = rx_base
    expected_rx = base_rx
    last_seq = None
    sent_bytes = 0
    for s, (i_send, i_recv) in enumerate(ring_allreduce_steps(rank, n)):
        c_send = chunks[i_send]
        if c_send:
            last_seq = send_qp.post_send(c_send)
            sent_bytes += c_send
        if chunks[i_recv]:
            expected_rx += 1
            if not recv_qp.wait_messages(expected_rx, max(0.0, deadline - time.monotonic())):
                raise CollectiveTimeout(f"rank {me}: step {s} of ring all-reduce ({size_bytes} B) "
                                        f"got no chunk from rank {prv} within {timeout_s:.1f} s")
    t_rx_done_ns = unix_ns()
    if last_seq is not None and not send_qp.wait_acked(last_seq, max(0.0, deadline - time.monotonic())):
        raise CollectiveTimeout(f"rank {me}: chunks to rank {nxt} not acknowledged "
                                f"within {timeout_s:.1f} s")
    return {"sent_bytes": sent_bytes, "rx_msgs": expected_rx - base_rx, "t_rx_done_ns": t_rx_done_ns}
