"""Double binary tree all-reduce, as NCCL builds it (NCCL ``src/graph/trees.cc``; Sanders, Speck and
Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 2009).

Two binary trees over the n positions: tree 0 is NCCL's ``ncclGetBtree`` (an
in-order tree rooted at 0 built from the lowest set bit of each position);
tree 1 is its mirror (position n-1-p) when n is even, or tree 0 shifted by
one position when n is odd (``ncclGetDtree``), so that most positions that
are inner nodes in one tree are leaves in the other. Each tree carries half
of the buffer (:func:`~traffic.collectives.base.chunk_sizes` of S in 2),
pipelined in chunks of at most :attr:`TreeAllreduce.chunk_bytes`: a node
sends chunk k up once chunk k from each child has arrived (reduce), the root
then sends it down and every node forwards it to its children (broadcast),
one chunk per edge per step, reduce and broadcast overlapping.

An inner node sends each byte of its tree's half up once and down twice, so
the busiest rank sends about 2 S in all (ring: 2(n-1)/n S): trees take
O(log n) steps instead of 2(n-1) and win where per-step latency dominates,
the ring wins at large sizes. busbw keeps the nccl-tests all-reduce factor
2(n-1)/n (nccl-tests reports busbw by collective, not by algorithm).
"""
from __future__ import annotations

from functools import lru_cache

from traffic.collectives.base import COLLECTIVES, chunk_sizes
from traffic.collectives.dataflow import Message, MessageAlgorithm, pipeline_chunks


def btree_parent(pos: int, n: int) -> int:
    """Parent of ``pos`` in NCCL's binary tree of ``n`` positions (``ncclGetBtree``); -1 for the root 0."""
    if pos == 0:
        return -1
    bit = pos & -pos                       # lowest set bit
    up = (pos ^ bit) | (bit << 1)
    return up if up < n else pos ^ bit


def dtree_parents(n: int) -> tuple[list[int], list[int]]:
    """Parents of every position in NCCL's two trees (``ncclGetDtree``): tree 0, and its mirror (n even)
    or its shift by one (n odd); -1 marks each tree's root."""
    t0 = [btree_parent(p, n) for p in range(n)]
    if n % 2 == 0:
        t1 = [-1 if t0[n - 1 - p] < 0 else n - 1 - t0[n - 1 - p] for p in range(n)]
    else:
        t1 = [-1 if t0[(p - 1) % n] < 0 else (t0[(p - 1) % n] + 1) % n for p in range(n)]
    return t0, t1


def tree_messages(parent: list[int], chunks: list[int]) -> list[Message]:
    """Pipelined reduce then broadcast of ``chunks`` over the tree ``parent`` (one chunk per edge per step)."""
    n = len(parent)
    children = [[c for c in range(n) if parent[c] == p] for p in range(n)]
    root = parent.index(-1)
    order, stack = [], [root]               # parents before children
    while stack:
        p = stack.pop()
        order.append(p)
        stack.extend(children[p])
    up: dict[int, list[int]] = {}           # node -> step at which it sends chunk k to its parent
    for p in reversed(order):               # children first
        steps, last = [], -1
        for k in range(len(chunks)):
            ready = max([up[c][k] + 1 for c in children[p]], default=0)
            last = max(k, last + 1, ready)
            steps.append(last)
        up[p] = steps
    msgs = [Message(up[p][k], p, parent[p], b) for p in order if p != root for k, b in enumerate(chunks)]
    down: dict[int, list[int]] = {root: up[root]}   # the root "sends" chunk k down once reduced
    for p in order:
        if p != root:
            steps, last = [], -1
            for k in range(len(chunks)):
                last = max(last + 1, down[parent[p]][k] + 1)
                steps.append(last)
            down[p] = steps
        msgs += [Message(down[p][k], p, c, b)
                 for c in children[p] for k, b in enumerate(chunks)]
    return msgs


class TreeAllreduce(MessageAlgorithm):
    """Double binary tree all-reduce (module docstring); ``chunk_bytes``: pipeline chunk size."""

    collective = COLLECTIVES["allreduce"]
    name = "tree"
    chunk_bytes = 8 * 1024

    def messages(self, n: int, size_bytes: int) -> tuple[Message, ...]:
        return _messages(n, size_bytes, self.chunk_bytes)


@lru_cache(maxsize=64)
def _messages(n: int, size_bytes: int, chunk_bytes: int) -> tuple[Message, ...]:
    halves = chunk_sizes(size_bytes, 2)
    msgs: list[Message] = []
    for parent, half in zip(dtree_parents(n), halves):
        msgs += tree_messages(parent, pipeline_chunks(half, chunk_bytes))
    return tuple(msgs)
