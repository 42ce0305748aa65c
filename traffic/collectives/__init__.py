"""Collective algorithms by name: ``ALGORITHMS[(collective, algorithm)]``.

A new algorithm is one module with an :class:`~traffic.collectives.base.Algorithm`
subclass plus one entry in :data:`ALGORITHMS`; a scenario picks it with
``workload.collective`` and ``workload.algorithm``. The interface, the
collectives' busbw factors and size conventions (nccl-tests) are in
:mod:`traffic.collectives.base`; :func:`run` executes a schedule over an
agent's queue pairs (:mod:`traffic.collectives.executor`).
"""
from __future__ import annotations

from typing import Mapping, MutableMapping, Sequence

from traffic.collectives.base import COLLECTIVES, Algorithm, Collective, Step, Transfer, chunk_sizes
from traffic.collectives.executor import CollectiveTimeout, ScheduleMismatch, execute
from traffic.collectives.alltoall import DirectAllToAll, PairwiseAllToAll
from traffic.collectives.broadcast import RingBroadcast
from traffic.collectives.halving_doubling import HalvingDoublingAllreduce
from traffic.collectives.ring import RingAllreduce
from traffic.collectives.ring_phases import RingAllGather, RingReduceScatter
from traffic.collectives.p2p import ChainSend
from traffic.collectives.pat import PatAllGather, PatReduceScatter
from traffic.collectives.sendrecv import RingSendRecv
from traffic.collectives.tree import TreeAllreduce

#: (collective, algorithm) -> the algorithm (stateless: one instance serves every rank)
ALGORITHMS: dict[tuple[str, str], Algorithm] = {(a.collective.name, a.name): a for a in (
    RingAllreduce(), TreeAllreduce(), HalvingDoublingAllreduce(),
    RingReduceScatter(), RingAllGather(), PatReduceScatter(), PatAllGather(), PairwiseAllToAll(), DirectAllToAll(),
    RingBroadcast(), RingSendRecv(), ChainSend(),
)}
DEFAULT_COLLECTIVE, DEFAULT_ALGORITHM = "allreduce", "ring"

__all__ = ["ALGORITHMS", "COLLECTIVES", "Algorithm", "Collective", "CollectiveTimeout", "ScheduleMismatch",
           "Step", "Transfer", "busbw_factor", "chunk_sizes", "collectives", "get", "names", "run"]


class UnknownAlgorithm(ValueError):
    """No algorithm is registered under that (collective, algorithm) name; the message names the allowed ones."""


def collectives() -> list[str]:
    """Collectives that have at least one registered algorithm, sorted."""
    return sorted({c for c, _ in ALGORITHMS})


def names(collective: str | None = None) -> list[str]:
    """Registered algorithm names of ``collective``, or every ``collective/algorithm`` when None."""
    if collective is None:
        return [f"{c}/{a}" for c, a in sorted(ALGORITHMS)]
    return sorted(a for c, a in ALGORITHMS if c == collective)


def get(collective: str, algorithm: str) -> Algorithm:
    """The registered algorithm; raises UnknownAlgorithm naming the registered collectives or algorithms."""
    alg = ALGORITHMS.get((collective, algorithm))
    if alg is not None:
        return alg
    if collective not in collectives():
        raise UnknownAlgorithm(f"collective {collective!r} has no registered algorithm: allowed "
                               f"{', '.join(collectives())}")
    raise UnknownAlgorithm(f"algorithm {algorithm!r} is not registered for collective {collective!r}: allowed "
                           f"{', '.join(names(collective))}")


def busbw_factor(collective: str, algorithm: str, n_ranks: int) -> float:
    """busbw / algbw of ``collective`` by ``algorithm`` on ``n_ranks`` (nccl-tests doc/PERFORMANCE.md).

    Raises UnknownAlgorithm, or ValueError when n_ranks < 1.
    """
    return get(collective, algorithm).busbw_factor(n_ranks)


def run(collective: str, algorithm: str, pos: int, group: Sequence[int], size_bytes: int,
        send_qp: Mapping[int, object], recv_qp: Mapping[int, object], rx_consumed: MutableMapping[int, int],
        timeout_s: float) -> dict:
    """Run one rank's part of a collective: :func:`~traffic.collectives.executor.execute` with the
    registered algorithm. Raises UnknownAlgorithm and what ``execute`` raises."""
    return execute(get(collective, algorithm), pos, group, size_bytes, send_qp, recv_qp, rx_consumed, timeout_s)
