"""Ring reduce-scatter and ring all-gather: the two halves of the ring all-reduce
(:mod:`traffic.collectives.ring`; Patarasuk & Yuan, JPDC 2009; NCCL's ring kernels).

The buffer is split into n chunks (:func:`~traffic.collectives.base.chunk_sizes`);
n-1 steps, in each of which position p sends one chunk to p+1 and receives
one from p-1. Reduce-scatter: step s sends chunk (p - s) mod n, the received
chunk is reduced into the local one and forwarded at the next step; p ends
holding chunk (p+1) mod n reduced over all ranks. All-gather: p starts with
its own chunk p, step s forwards chunk (p - s) mod n and receives
(p - s - 1) mod n. Every rank sends (n-1)/n of S, nccl-tests' busbw factor.
"""
from __future__ import annotations

from traffic.collectives.base import COLLECTIVES, Algorithm, Step, chunk_sizes, transfers
from traffic.collectives.ring import ring_allreduce_steps


class _RingHalf(Algorithm):
    """n-1 ring steps: the reduce-scatter (``first`` = 0) or all-gather (``first`` = n-1) part of the ring
    all-reduce's 2(n-1) steps, which carry the right chunk indices for either."""

    all_gather: bool

    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        self.check(pos, n, size_bytes)
        chunks = chunk_sizes(size_bytes, n)
        nxt, prv = (pos + 1) % n, (pos - 1) % n
        steps = ring_allreduce_steps(pos, n)
        # the all-reduce's all-gather half starts at p holding chunk p+1: shift by one so p starts with chunk p
        part = [((c - 1) % n, (r - 1) % n) for c, r in steps[n - 1:]] if self.all_gather else steps[:n - 1]
        return tuple(Step(sends=transfers((nxt, chunks[c])), recvs=transfers((prv, chunks[r]))) for c, r in part)

    def peers(self, pos: int, n: int) -> frozenset[int]:
        self.check(pos, n)
        return frozenset({(pos + 1) % n, (pos - 1) % n})


class RingReduceScatter(_RingHalf):
    """Ring reduce-scatter: n-1 steps of one chunk of S/n to the next position."""

    collective = COLLECTIVES["reducescatter"]
    name = "ring"
    all_gather = False


class RingAllGather(_RingHalf):
    """Ring all-gather: n-1 steps, each forwarding one rank's chunk of S/n to the next position."""

    collective = COLLECTIVES["allgather"]
    name = "ring"
    all_gather = True
