"""The collective-algorithm interface: an algorithm turns (position, group size, size) into a schedule.

A collective (all-reduce, all-gather, ...) says *what* the ranks end up with;
an algorithm (ring, tree, ...) says *how*: which peer gets how many bytes at
which step. One algorithm is one subclass of :class:`Algorithm` in its own
module, registered by ``(collective, algorithm)`` name in
:mod:`traffic.collectives`.

Positions: a collective runs over a group of job ranks in a given order
(e.g. a SimAI DP group ``(1, 3, 5, 7)``); an algorithm only sees positions
0..n-1 in that order. Rooted collectives (broadcast) take position 0
as the root; send/recv sends from each position to the next (nccl-tests' sendrecv).

A schedule is a tuple of :class:`Step`; the executor
(:mod:`traffic.collectives.executor`) runs a step by posting all its sends,
then waiting until all its receives have arrived before the next step starts.
Transports deliver messages from one peer in order (RC queue pairs), so the
k-th receive from peer p is the k-th message p sends to this rank. Transfers
of 0 bytes never appear in a schedule (a chunk of 0 bytes is skipped on both
sides).

Bus bandwidth and size (nccl-tests, doc/PERFORMANCE.md): busbw = algbw x a
factor of the collective and the group size n, chosen so that busbw is the
rate each rank's link must carry; it does not depend on the algorithm as long
as the algorithm is bandwidth-optimal (an algorithm may override it, e.g.
in-network reduction (n-1)/(n+1)). What ``size_bytes`` means differs per
collective; :data:`COLLECTIVES` states it as nccl-tests prints it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, NamedTuple


class Transfer(NamedTuple):
    """One message of a step: ``nbytes`` (> 0) to or from the rank at group position ``peer``."""

    peer: int
    nbytes: int


class Step(NamedTuple):
    """Sends posted at the start of the step; receives that must all arrive before the next step."""

    sends: tuple[Transfer, ...] = ()
    recvs: tuple[Transfer, ...] = ()


def _ranks(n: int) -> int:
    if n < 1:
        raise ValueError(f"n_ranks={n}: need at least 1 rank")
    return n


#: busbw factor formulas of nccl-tests (doc/PERFORMANCE.md "Summary") -> the factor on n ranks
FACTORS: dict[str, Callable[[int], float]] = {
    "2(n-1)/n": lambda n: 2.0 * (_ranks(n) - 1) / n,
    "(n-1)/n": lambda n: (_ranks(n) - 1) / n,
    "1": lambda n: float(_ranks(n) > 0),
}


@dataclass(frozen=True)
class Collective:
    """What a collective computes and how nccl-tests sizes it and reports its bus bandwidth.

    ``title``: for printed headers (``all-reduce``); ``factor_text``: busbw / algbw
    as a formula of n, a key of :data:`FACTORS`; ``size_convention``: what
    ``size_bytes`` means (nccl-tests' S).
    """

    name: str
    title: str
    factor_text: str
    size_convention: str

    def busbw_factor(self, n: int) -> float:
        """busbw / algbw on ``n`` ranks; raises ValueError when n < 1."""
        return FACTORS[self.factor_text](n)


#: the collectives of nccl-tests' tables, one line each (send/recv: src/sendrecv.cu, factor 1)
COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("allreduce", "all-reduce", "2(n-1)/n", "S = each rank's buffer; every rank ends with the sum of all"),
    Collective("reducescatter", "reduce-scatter", "(n-1)/n", "S = each rank's input; each ends with S/n reduced"),
    Collective("allgather", "all-gather", "(n-1)/n", "S = each rank's output; each rank contributes S/n"),
    Collective("alltoall", "all-to-all", "(n-1)/n", "S = each rank's send buffer, S/n to every rank (itself too)"),
    Collective("broadcast", "broadcast", "1", "S = the root's buffer (position 0), received by every rank"),
    Collective("sendrecv", "send/recv", "1", "S = bytes each rank sends to its peer"),
    Collective("send", "send", "1", "S = bytes each position sends to the next (the last sends nothing)"),
)}


class Algorithm(ABC):
    """One way to run one collective. Subclasses set ``collective`` and ``name`` and implement
    :meth:`schedule` and :meth:`peers`; :meth:`busbw_factor` defaults to the collective's."""

    collective: ClassVar[Collective]
    name: ClassVar[str]
    #: fewest ranks the algorithm runs on
    min_ranks: ClassVar[int] = 2

    @property
    def title(self) -> str:
        """``ring all-reduce``: algorithm and collective, for messages and headers."""
        return f"{self.name} {self.collective.title}"

    def busbw_factor(self, n: int) -> float:
        """busbw / algbw on ``n`` ranks (nccl-tests); raises ValueError when n < 1."""
        return self.collective.busbw_factor(n)

    @property
    def busbw_factor_text(self) -> str:
        """:meth:`busbw_factor` as a formula of n (``2(n-1)/n``); override it with the factor."""
        return self.collective.factor_text

    @abstractmethod
    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        """The steps of the rank at group position ``pos`` of ``n`` for a collective of ``size_bytes``.

        Peers are group positions. Raises ValueError unless 0 <= pos < n, n >= min_ranks
        and size_bytes >= 0.
        """

    @abstractmethod
    def peers(self, pos: int, n: int) -> frozenset[int]:
        """Group positions the rank at ``pos`` needs queue pairs with (to send to or receive from), for
        every size. Raises ValueError unless 0 <= pos < n and n >= min_ranks."""

    def check(self, pos: int, n: int, size_bytes: int = 0) -> None:
        """Raise ValueError naming the algorithm when ``pos``, ``n`` or ``size_bytes`` is out of range."""
        if n < self.min_ranks or not 0 <= pos < n or size_bytes < 0:
            raise ValueError(f"{self.title}: need n >= {self.min_ranks}, 0 <= position < n and size_bytes >= 0; "
                             f"got position {pos}, n {n}, size_bytes {size_bytes}")


def chunk_sizes(size_bytes: int, n: int) -> list[int]:
    """Split ``size_bytes`` into ``n`` chunks differing by at most one byte, larger first (some may be 0).

    Raises ValueError when n < 1 or size_bytes < 0.
    """
    if n < 1 or size_bytes < 0:
        raise ValueError(f"need n >= 1 and size_bytes >= 0, got n={n}, size_bytes={size_bytes}")
    base, extra = divmod(size_bytes, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def transfers(*pairs: tuple[int, int]) -> tuple[Transfer, ...]:
    """Transfers for ``(peer, nbytes)`` pairs, leaving out those of 0 bytes."""
    return tuple(Transfer(p, b) for p, b in pairs if b > 0)
