"""Run one rank's schedule (:mod:`traffic.collectives.base`) over its queue pairs.

For each step: post every send on the requester QP to that peer, then wait
until every receive of the step has arrived on the responder QP from that
peer (message counts: an RC QP delivers one peer's messages in order, so the
k-th receive from a peer is its k-th message to this rank, and its size must
be what the schedule says). After the last step, wait until the last message
to each peer is acknowledged. One deadline covers the whole operation; a
timeout names the step, the peer (job rank) and the algorithm.

Receive counts span operations: a peer may already have sent this
operation's first message before this rank was told to start, so the caller
keeps ``rx_consumed`` (messages of each peer that earlier operations
consumed) and the executor advances it when the operation completes; a
snapshot of the QP's counter at the start would be wrong.
"""
from __future__ import annotations

import time
from typing import Mapping, MutableMapping, Sequence

from traffic.clock import unix_ns
from traffic.collectives.base import Algorithm


class CollectiveTimeout(RuntimeError):
    """A step did not complete in time (a peer is stuck or packets are lost for good)."""


class ScheduleMismatch(RuntimeError):
    """A message arrived with another size than the schedule says: the ranks disagree on the operation."""


def execute(alg: Algorithm, pos: int, group: Sequence[int], size_bytes: int, send_qp: Mapping[int, object],
            recv_qp: Mapping[int, object], rx_consumed: MutableMapping[int, int], timeout_s: float) -> dict:
    """Run ``alg``'s schedule for group position ``pos`` of ``group`` (job ranks in group order).

    ``send_qp[q]`` / ``recv_qp[q]``: requester / responder QP with job rank q
    (``post_send(nbytes) -> seq``, ``wait_acked(seq, timeout_s) -> bool``;
    ``wait_messages(count, timeout_s) -> bool``, ``msg_bytes``: sizes of the
    messages received so far). ``rx_consumed[q]``: messages from q that
    earlier operations consumed, advanced on success.

    Returns ``sent_bytes`` (payload this rank posted), ``rx_msgs`` (messages
    it received) and ``t_rx_done_ns`` (Unix ns when its last receive
    arrived). Raises ValueError when a peer of the schedule has no QP,
    CollectiveTimeout when a step waits past ``timeout_s`` from the start,
    ScheduleMismatch when a received message has the wrong size.
    """
    n = len(group)
    steps = alg.schedule(pos, n, size_bytes)
    me = group[pos]
    missing = sorted({group[t.peer] for s in steps for t in s.sends} - set(send_qp)
                     | {group[t.peer] for s in steps for t in s.recvs} - set(recv_qp))
    if missing:
        raise ValueError(f"rank {me} has no queue pair with rank(s) {missing} of group {list(group)} "
                         f"({alg.title}): the agent was started without them as peers")
    deadline = time.monotonic() + timeout_s
    rx = {q: rx_consumed.get(q, 0) for q in group}
    last_seq: dict[int, int] = {}
    sent_bytes = 0
    for s, step in enumerate(steps):
        for t in step.sends:
            q = group[t.peer]
            last_seq[q] = send_qp[q].post_send(t.nbytes)
            sent_bytes += t.nbytes
        for t in step.recvs:
            q = group[t.peer]
            rx[q] += 1
            qp = recv_qp[q]
            if not qp.wait_messages(rx[q], max(0.0, deadline - time.monotonic())):
                raise CollectiveTimeout(f"rank {me}: step {s} of {alg.title} ({size_bytes} B) "
                                        f"got no chunk from rank {q} within {timeout_s:.1f} s")
            got = qp.msg_bytes[rx[q] - 1]
            if got != t.nbytes:
                raise ScheduleMismatch(f"rank {me}: step {s} of {alg.title} ({size_bytes} B) expected "
                                       f"{t.nbytes} B from rank {q}, got a message of {got} B")
    t_rx_done_ns = unix_ns()
    for q, seq in last_seq.items():
        if not send_qp[q].wait_acked(seq, max(0.0, deadline - time.monotonic())):
            raise CollectiveTimeout(f"rank {me}: chunks to rank {q} not acknowledged "
                                    f"within {timeout_s:.1f} s ({alg.title}, {size_bytes} B)")
    rx_msgs = 0
    for q in rx:
        rx_msgs += rx[q] - rx_consumed.get(q, 0)
        if q in rx_consumed or rx[q]:
            rx_consumed[q] = rx[q]
    return {"sent_bytes": sent_bytes, "rx_msgs": rx_msgs, "t_rx_done_ns": t_rx_done_ns}
