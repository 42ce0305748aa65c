"""Schedules written as one list of messages for the whole group, cut into each rank's steps.

Pipelined algorithms (tree, chain broadcast) are easiest to state as "chunk k
crosses edge a -> b at global step t". :func:`rank_steps` turns such a list
into one rank's :class:`~traffic.collectives.base.Step` tuple: a message of
step t is a send of its source's step t and a receive of its destination's
step t. Because the executor posts a step's sends before waiting for its
receives, and every message is received in the step it was sent, no rank
ever waits for a send that a later step posts: the schedule cannot deadlock
(induction on t). Messages on one (source, destination) pair keep the list's
order on both sides, as an RC queue pair delivers them. Steps with nothing to
do are left out.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Iterable, NamedTuple

from traffic.collectives.base import Algorithm, Step, Transfer, chunk_sizes


class Message(NamedTuple):
    """``nbytes`` from group position ``src`` to ``dst``, sent and received in global step ``step``."""

    step: int
    src: int
    dst: int
    nbytes: int


def rank_steps(pos: int, messages: Iterable[Message]) -> tuple[Step, ...]:
    """The non-empty steps of group position ``pos``, in step order (0-byte messages left out)."""
    by_step: dict[int, tuple[list, list]] = {}
    for m in messages:
        if m.nbytes <= 0 or pos not in (m.src, m.dst):
            continue
        sends, recvs = by_step.setdefault(m.step, ([], []))
        if m.src == pos:
            sends.append(Transfer(m.dst, m.nbytes))
        if m.dst == pos:
            recvs.append(Transfer(m.src, m.nbytes))
    return tuple(Step(tuple(s), tuple(r)) for _, (s, r) in sorted(by_step.items()))


def pipeline_chunks(size_bytes: int, chunk_bytes: int) -> list[int]:
    """``size_bytes`` cut into ceil(size / chunk_bytes) near-equal chunks, at least one, larger first
    (:func:`~traffic.collectives.base.chunk_sizes`). Raises ValueError when chunk_bytes < 1 or size_bytes < 0.
    """
    if chunk_bytes < 1 or size_bytes < 0:
        raise ValueError(f"need chunk_bytes >= 1 and size_bytes >= 0, got {chunk_bytes}, {size_bytes}")
    return chunk_sizes(size_bytes, max(1, -(-size_bytes // chunk_bytes)))


class MessageAlgorithm(Algorithm):
    """An algorithm stated as the whole group's message list: subclasses implement :meth:`messages`;
    each rank's schedule is :func:`rank_steps` of it and its peers are the positions it exchanges with."""

    @abstractmethod
    def messages(self, n: int, size_bytes: int) -> tuple[Message, ...]:
        """Every message of a collective of ``size_bytes`` over ``n`` positions (n >= min_ranks)."""

    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        self.check(pos, n, size_bytes)
        return rank_steps(pos, self.messages(n, size_bytes))

    def peers(self, pos: int, n: int) -> frozenset[int]:
        self.check(pos, n)
        # 2n bytes: every chunk of every split these algorithms make is at least one byte, so every edge shows
        return frozenset({m.dst for m in self.messages(n, 2 * n) if m.src == pos}
                         | {m.src for m in self.messages(n, 2 * n) if m.dst == pos})
