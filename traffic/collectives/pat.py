"""PAT all-gather and reduce-scatter: NCCL's "Parallel Aggregated Trees" (NCCL 2.23+, one GPU per node).

Followed: NCCL v2.23.4-1 (the first release with PAT), ``src/include/collectives.h``
(``PatAGAlgorithm``, ``PatRSAlgorithm``: the order of ``getNextOp``'s operations),
``src/device/prims_simple.h`` (``primsModePatAg`` / ``primsModePatRs``: the peers are
rank +/- 2^dim) and ``src/graph/tuning.cc`` (``ncclPatEnable``: only when every rank is
on its own node). SimAI 1.7's SimCCL was not available to compare with.

All-gather: every rank's chunk (S/n, :func:`~traffic.collectives.base.chunk_sizes`)
travels down a binomial tree rooted at its owner; PAT runs all n trees at
once and aggregates, per dimension d, every tree's transfers across distance
2^d into one message. Relative to a rank r, "offset s" is the chunk of rank
(r + s) mod n. With L = ceil(log2 n) and d = L-1, L-2, ..., 0 (one step each):
rank r sends to (r - 2^d) mod n the chunks at its offsets s' that are
multiples of 2^(d+1) with s' + 2^d < n (its own chunk, s' = 0, and what it
received at the larger dimensions), and receives from (r + 2^d) mod n the
same count, which land at its offsets s' + 2^d. Each offset 1..n-1 arrives
exactly once (offset s over the dimension of its lowest set bit), so every
rank receives S - S/n and all ranks together send (n-1) S, as ring; n a
power of two: log2 n steps carrying 1, 2, 4, ..., n/2 chunks (Bruck's
all-gather with halving distances). These are NCCL's sets and order:
``PatAGAlgorithm`` sends at dimensions L-1 .. 0, each dimension's sends
together, the same offsets (phases 2 and 1), and phase 0 receives the leaves
(odd offsets); a transcription of its ``getNextOp`` with the ``aggFactor``
its constructor picks agreed with :func:`offsets` for n = 2..32.

Reduce-scatter is the same trees reversed (``PatRSAlgorithm``; rank r sends
to r + 2^d and receives from r - 2^d): dimensions d = 0, 1, ..., L-1; at d
rank r sends the partial sums of the chunks of ranks (r + 2^d + s') mod n
for the same offsets s', once it has reduced into them what arrived at the
smaller dimensions; rank r ends with chunk r reduced over all n ranks, each
contribution once.

n not a power of two: NCCL's rule (``nrPow2`` = the next power of two,
operations whose offset reaches n are skipped): still ceil(log2 n) steps,
the messages of dimension d carry only the offsets below n.

Pipelining, as NCCL does it: NCCL runs the trees once per chunk of its step
buffer (``offset += chunkCount`` in ``getNextOp``), and a chunk's first
dimensions overlap the previous chunk's last ones through the NCCL_STEPS
buffers of each connection. Here every rank's chunk is cut into R =
ceil(chunk / :attr:`PatAllGather.chunk_bytes`) near-equal pieces (at least
one); round j runs the L steps on piece j at global steps j .. j+L-1
(:mod:`traffic.collectives.dataflow`), so an operation takes L + R - 1 steps:
ceil(log2 n) while each rank's chunk fits in one piece (8 KiB: up to 64 KiB
on 8 ranks), and in the middle of a long one a rank sends at every distance
at once, which spreads its bytes over the fabric's paths as NCCL's
concurrent connections do. busbw keeps nccl-tests' factor (n-1)/n.
"""
from __future__ import annotations

from functools import lru_cache

from traffic.collectives.base import COLLECTIVES, chunk_sizes
from traffic.collectives.dataflow import Message, MessageAlgorithm


def n_steps(n: int) -> int:
    """ceil(log2 n): the steps of PAT on ``n`` ranks (n >= 1); raises ValueError when n < 1."""
    if n < 1:
        raise ValueError(f"n_ranks={n}: need at least 1 rank")
    return (n - 1).bit_length()


def dims(n: int, all_gather: bool) -> list[int]:
    """The dimension d (peer distance 2^d) of each step: L-1 .. 0 for all-gather, 0 .. L-1 for reduce-scatter."""
    order = list(range(n_steps(n)))
    return order[::-1] if all_gather else order


def offsets(n: int, d: int) -> tuple[int, ...]:
    """Offsets s' (multiples of 2^(d+1) with s' + 2^d < n) whose chunks cross distance 2^d at dimension d."""
    return tuple(range(0, n - (1 << d), 1 << (d + 1)))


def step_chunks(pos: int, n: int, d: int, all_gather: bool) -> tuple[int, tuple[int, ...]]:
    """(peer, the ranks whose chunks the message carries) of position ``pos``'s send at dimension ``d``.

    All-gather: to (pos - 2^d) mod n, the chunks of ranks pos + s'; reduce-scatter: to (pos + 2^d) mod n,
    partial sums of the chunks of ranks pos + 2^d + s' (s' in :func:`offsets`), all mod n.
    """
    if all_gather:
        return (pos - (1 << d)) % n, tuple((pos + s) % n for s in offsets(n, d))
    peer = (pos + (1 << d)) % n
    return peer, tuple((peer + s) % n for s in offsets(n, d))


def pieces(size_bytes: int, n: int, chunk_bytes: int) -> list[list[int]]:
    """``pieces[q][j]``: bytes of rank q's chunk in pipeline round j; R = ceil(largest chunk / chunk_bytes)
    rounds (at least one), each chunk cut into R near-equal pieces, larger first. Raises ValueError when
    chunk_bytes < 1, n < 1 or size_bytes < 0."""
    if chunk_bytes < 1:
        raise ValueError(f"need chunk_bytes >= 1, got {chunk_bytes}")
    chunks = chunk_sizes(size_bytes, n)
    rounds = max(1, -(-max(chunks) // chunk_bytes))
    return [chunk_sizes(c, rounds) for c in chunks]


@lru_cache(maxsize=128)
def _messages(n: int, size_bytes: int, all_gather: bool, chunk_bytes: int) -> tuple[Message, ...]:
    cut = pieces(size_bytes, n, chunk_bytes)
    msgs = []
    for j in range(len(cut[0])):
        for step, d in enumerate(dims(n, all_gather)):
            for pos in range(n):
                peer, ranks = step_chunks(pos, n, d, all_gather)
                msgs.append(Message(j + step, pos, peer, sum(cut[q][j] for q in ranks)))
    return tuple(msgs)


class _Pat(MessageAlgorithm):
    all_gather: bool
    #: most bytes of one rank's chunk per pipeline round (as the tree's pipeline chunk)
    chunk_bytes = 8 * 1024

    def messages(self, n: int, size_bytes: int) -> tuple[Message, ...]:
        return _messages(n, size_bytes, self.all_gather, self.chunk_bytes)


class PatAllGather(_Pat):
    """PAT all-gather: per pipeline round ceil(log2 n) steps at distances 2^(L-1) .. 1, dimension d carrying
    the chunks at offsets :func:`offsets` (module docstring)."""

    collective = COLLECTIVES["allgather"]
    name = "pat"
    all_gather = True


class PatReduceScatter(_Pat):
    """PAT reduce-scatter: the all-gather's trees reversed, distances 1 .. 2^(L-1) per pipeline round (module
    docstring)."""

    collective = COLLECTIVES["reducescatter"]
    name = "pat"
    all_gather = False
