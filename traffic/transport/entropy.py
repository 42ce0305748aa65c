"""Entropy policies: the UDP source port(s) a QP sends from, chosen by ``transport.entropy``.

RoCEv2 carries its ECMP entropy in the UDP source port (IBTA RoCEv2 annex A17.3.1: "the UDP
source port ... used as entropy"); switches hash it into the path choice. A policy has two
levels:

- per host, :meth:`EntropyPolicy.host_ports` draws the base ports of the host's QPs, distinct,
  from 49152-65535 with a generator seeded by (seed, rank): runs are reproducible;
- per QP, :meth:`EntropyPolicy.for_qp` gives a :class:`QpEntropy`: ``ports`` (the QP opens one
  socket per port) and ``port_index(now_ns)``, asked before each packet when there is more than
  one port. A flowlet policy changes the index after an idle gap, a spray policy per packet.

To add one: a subclass of :class:`EntropyPolicy` here (or in its own module) and an entry in
:data:`ENTROPY_POLICIES`.
"""
from __future__ import annotations

import random
from typing import ClassVar

from traffic.registry import pick

EPHEMERAL_FIRST_PORT, EPHEMERAL_LAST_PORT = 49152, 65535


class QpEntropy:
    """The source ports of one QP and the choice among them. ``ports``: list of UDP ports, >= 1."""

    def __init__(self, ports: list[int]):
        if not ports:
            raise ValueError("a QP needs at least one UDP source port")
        self.ports = list(ports)

    def port_index(self, now_ns: int) -> int:
        """Index into ``ports`` of the port the next packet leaves from (asked only when len(ports) > 1)."""
        return 0


class EntropyPolicy:
    """Base ports per host and a :class:`QpEntropy` per QP, for rank ``rank`` of a run seeded ``seed``."""

    name: ClassVar[str] = ""

    def __init__(self, seed: int, rank: int):
        self.seed, self.rank = seed, rank

    def host_ports(self, count: int) -> list[int]:
        """``count`` distinct UDP source ports in 49152-65535 for this host's QPs (seeded by seed and rank)."""
        return random.Random(f"{self.seed}-{self.rank}").sample(range(EPHEMERAL_FIRST_PORT, EPHEMERAL_LAST_PORT + 1),
                                                                 count)

    def for_qp(self, base_port: int) -> QpEntropy:
        """The ports and port choice of the QP whose base port (from :meth:`host_ports`) is ``base_port``."""
        raise NotImplementedError


class PerFlow(EntropyPolicy):
    """``per_flow``: one port per QP for its whole life (what an RNIC does by default)."""

    name = "per_flow"

    def for_qp(self, base_port: int) -> QpEntropy:
        return QpEntropy([base_port])


#: name (as written in the scenario) -> class
ENTROPY_POLICIES: dict[str, type[EntropyPolicy]] = {PerFlow.name: PerFlow}


def entropy_policy(name: str, seed: int, rank: int) -> EntropyPolicy:
    """The policy ``name`` for one host. Raises ValueError naming the registered names."""
    return pick(ENTROPY_POLICIES, name, "entropy policy", "transport.entropy")(seed, rank)
