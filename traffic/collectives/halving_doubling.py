"""Recursive halving-doubling all-reduce (Rabenseifner's algorithm as in MPICH; Thakur, Rabenseifner and
Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 19(1), 2005, section 4.4).

With p' the largest power of two <= n: a reduce-scatter by recursive halving
(log2 p' steps; at step j a rank exchanges with the rank whose index differs
in bit j, sends the half of its current block the partner keeps and keeps
the other half, so the blocks are S/2, S/4, ... of the buffer split in p'
chunks) then an all-gather by recursive doubling (the same exchanges in
reverse order, each sending the block it holds). Every rank sends
2(p'-1)/p' S in 2 log2 p' steps.

n not a power of two (r = n - p' extra ranks): the pre- and post-step of
Thakur et al. 2005 as MPICH's ``allreduce_intra_reduce_scatter_allgather``
does it: among the first 2r positions each even one sends its whole buffer
to the next odd one (which reduces it) and sits out; the p' remaining ranks
(odd ones of the first 2r, then the rest) run the power-of-two algorithm;
at the end each odd one of the first 2r sends the whole result back to its
even neighbour. Those ranks send S more than the rest: 2 steps and S each
way, the known cost of the non-power-of-two case. busbw keeps the nccl-tests
all-reduce factor 2(n-1)/n.
"""
from __future__ import annotations

from functools import lru_cache

from traffic.collectives.base import COLLECTIVES, chunk_sizes
from traffic.collectives.dataflow import Message, MessageAlgorithm


def _layout(n: int) -> tuple[int, int]:
    """(p', r): the largest power of two <= n and the count of extra ranks n - p'."""
    pof2 = 1 << (n.bit_length() - 1)
    return pof2, n - pof2


def _position(newrank: int, rem: int) -> int:
    """Group position of the power-of-two participant ``newrank`` (MPICH's ``newdst`` -> ``dst``)."""
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def kept_ranges(pof2: int) -> list[dict[int, tuple[int, int]]]:
    """Per halving step j (mask 2^j), the chunk range [lo, hi) of the buffer's pof2 chunks each participant
    0..pof2-1 keeps (and reduces into); it sends the other half of its previous range to participant v ^ 2^j.
    The lower of the two keeps the lower half (MPICH). The last step's ranges are single chunks."""
    ranges, out, mask = {v: (0, pof2) for v in range(pof2)}, [], 1
    while mask < pof2:
        ranges = {v: ((lo, (lo + hi) // 2) if v < v ^ mask else ((lo + hi) // 2, hi))
                  for v, (lo, hi) in ranges.items()}
        out.append(ranges)
        mask <<= 1
    return out


@lru_cache(maxsize=64)
def _messages(n: int, size_bytes: int) -> tuple[Message, ...]:
    pof2, rem = _layout(n)
    chunks = chunk_sizes(size_bytes, pof2)
    msgs: list[Message] = []
    step = 0
    if rem:                                          # pre-step: evens of the first 2r hand over their buffers
        msgs += [Message(0, 2 * i, 2 * i + 1, size_bytes) for i in range(rem)]
        step = 1
    levels = kept_ranges(pof2)
    for j, kept in enumerate(levels):                 # recursive halving: send what the partner keeps
        for v in range(pof2):
            lo, hi = kept[v ^ (1 << j)]
            msgs.append(Message(step, _position(v, rem), _position(v ^ (1 << j), rem), sum(chunks[lo:hi])))
        step += 1
    for j in reversed(range(len(levels))):            # recursive doubling: send the range held, get the partner's
        for v in range(pof2):
            lo, hi = levels[j][v]
            msgs.append(Message(step, _position(v, rem), _position(v ^ (1 << j), rem), sum(chunks[lo:hi])))
        step += 1
    msgs += [Message(step, 2 * i + 1, 2 * i, size_bytes) for i in range(rem)]   # post-step: results back
    return tuple(msgs)


class HalvingDoublingAllreduce(MessageAlgorithm):
    """Recursive halving reduce-scatter + recursive doubling all-gather (module docstring)."""

    collective = COLLECTIVES["allreduce"]
    name = "halving_doubling"

    def messages(self, n: int, size_bytes: int) -> tuple[Message, ...]:
        return _messages(n, size_bytes)
