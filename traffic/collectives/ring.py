"""Ring all-reduce (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009; the NCCL ring algorithm).

The buffer is split into n chunks (:func:`~traffic.collectives.base.chunk_sizes`);
n-1 reduce-scatter steps then n-1 all-gather steps, in each of which position
p sends one chunk to p+1 and receives one from p-1. Step s sends chunk
(p - s) mod n; step s+1 may start only once step s's chunk from p-1 has
arrived (it is reduced into, then forwarded). Every rank sends 2(n-1)/n of
the buffer, which is why nccl-tests reports busbw = algbw x 2(n-1)/n.
"""
from __future__ import annotations

from traffic.collectives.base import COLLECTIVES, Algorithm, Step, chunk_sizes, transfers


def ring_allreduce_steps(pos: int, n: int) -> list[tuple[int, int]]:
    """The 2(n-1) steps of position ``pos`` in a ring all-reduce of ``n`` ranks: (chunk sent, chunk received).

    Steps 0..n-2 are the reduce-scatter (the received chunk is reduced into the
    local one and sent on at the next step), steps n-1..2n-3 the all-gather.
    Raises ValueError unless 0 <= pos < n.
    """
    if not 0 <= pos < n:
        raise ValueError(f"position {pos} must be in 0..{n - 1}")
    return [((pos - s) % n, (pos - s - 1) % n) for s in range(2 * (n - 1))]


class RingAllreduce(Algorithm):
    """Ring all-reduce: 2(n-1) steps, each one chunk of S/n to the next position, one from the previous."""

    collective = COLLECTIVES["allreduce"]
    name = "ring"

    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        self.check(pos, n, size_bytes)
        chunks = chunk_sizes(size_bytes, n)
        nxt, prv = (pos + 1) % n, (pos - 1) % n
        return tuple(Step(sends=transfers((nxt, chunks[i_send])), recvs=transfers((prv, chunks[i_recv])))
                     for i_send, i_recv in ring_allreduce_steps(pos, n))

    def peers(self, pos: int, n: int) -> frozenset[int]:
        self.check(pos, n)
        return frozenset({(pos + 1) % n, (pos - 1) % n})
