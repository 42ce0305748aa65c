"""All-to-all: position p sends block q of its buffer (S/n, :func:`~traffic.collectives.base.chunk_sizes`)
to every other position q and keeps block p (nccl-tests' size convention: S = each rank's send buffer).

- ``pairwise``: n-1 steps; at step s position p sends to p+s and receives
  from p-s (mod n), the shifted pairwise exchange of MPICH's
  ``alltoall_intra_pairwise`` (Thakur et al., IJHPCA 2005, section 4.6):
  every rank sends and receives one block per step, so no receiver is
  hit by more than one sender at a time.
- ``direct``: one step posting every send and receive at once, as NCCL's
  all-to-all does (ncclGroupStart, one ncclSend/ncclRecv per peer,
  ncclGroupEnd); the fabric sorts out the incast.

Every rank sends (n-1)/n of S: nccl-tests' busbw factor (n-1)/n.
"""
from __future__ import annotations

from traffic.collectives.base import COLLECTIVES, Algorithm, Step, chunk_sizes, transfers


class _AllToAll(Algorithm):
    collective = COLLECTIVES["alltoall"]

    def _exchanges(self, pos: int, n: int, size_bytes: int) -> list[tuple]:
        """(sends, recvs) of each step: every position but ``pos`` once in each, shift s = 1..n-1."""
        self.check(pos, n, size_bytes)
        blocks = chunk_sizes(size_bytes, n)
        return [(transfers(((pos + s) % n, blocks[(pos + s) % n])), transfers(((pos - s) % n, blocks[pos])))
                for s in range(1, n)]

    def peers(self, pos: int, n: int) -> frozenset[int]:
        self.check(pos, n)
        return frozenset(range(n)) - {pos}


class PairwiseAllToAll(_AllToAll):
    """n-1 steps: to p+s, from p-s (module docstring)."""

    name = "pairwise"

    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        return tuple(Step(s, r) for s, r in self._exchanges(pos, n, size_bytes) if s or r)


class DirectAllToAll(_AllToAll):
    """One step: every send and receive posted at once (module docstring)."""

    name = "direct"

    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        ex = self._exchanges(pos, n, size_bytes)
        step = Step(sum((s for s, _ in ex), ()), sum((r for _, r in ex), ()))
        return (step,) if step.sends or step.recvs else ()
