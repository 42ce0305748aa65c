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


class SprayEntropy(QpEntropy):
    """A new port per packet, drawn uniformly from ``ports`` by a generator seeded with ``seed``."""

    def __init__(self, ports: list[int], seed: str):
        super().__init__(ports)
        self._rng = random.Random(seed)
        self._n = len(self.ports)

    def port_index(self, now_ns: int) -> int:
        return self._rng.randrange(self._n)


class FlowletEntropy(QpEntropy):
    """A new port (drawn from ``ports`` by a generator seeded with ``seed``) for the first packet after
    an idle gap longer than ``gap_ns``; the same port for every packet of a burst."""

    def __init__(self, ports: list[int], seed: str, gap_ns: int):
        super().__init__(ports)
        self._rng = random.Random(seed)
        self.gap_ns = gap_ns
        self._last_ns: int | None = None
        self._index = 0
        #: flowlets started (the first packet of the QP opens the first)
        self.flowlets = 0

    def port_index(self, now_ns: int) -> int:
        if self._last_ns is None or now_ns - self._last_ns > self.gap_ns:
            self._index = self._rng.randrange(len(self.ports))
            self.flowlets += 1
        self._last_ns = now_ns
        return self._index


class EntropyPolicy:
    """Base ports per host and a :class:`QpEntropy` per QP, for rank ``rank`` of a run seeded ``seed``.

    ``ports_per_qp``: ports of one QP for a policy that uses several (``transport.entropy_ports``).
    ``reorders``: whether the policy's packets overtake each other, so the QPs need selective repeat."""

    name: ClassVar[str] = ""
    reorders: ClassVar[bool] = False

    def __init__(self, seed: int, rank: int, ports_per_qp: int = 1, flowlet_gap_us: int = 0):
        self.seed, self.rank, self.ports_per_qp, self.flowlet_gap_us = seed, rank, ports_per_qp, flowlet_gap_us

    def _qp_ports(self, base_port: int) -> list[int]:
        """The base port and ``ports_per_qp - 1`` others drawn by a generator seeded with (seed, rank, base
        port); not bound (a multi-port QP sends through one raw socket), so other QPs may use them too."""
        rng = random.Random(f"{self.name}-{self.seed}-{self.rank}-{base_port}")
        extra = rng.sample([p for p in range(EPHEMERAL_FIRST_PORT, EPHEMERAL_LAST_PORT + 1) if p != base_port],
                           self.ports_per_qp - 1)
        return [base_port, *extra]

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


class Spray(EntropyPolicy):
    """``spray``: every packet of a QP leaves from one of ``ports_per_qp`` ports, drawn at random.

    Each port is a flow to the switches' ECMP hash, so a QP's packets spread over
    the paths (per-packet load balancing from the sender, as the switch cannot
    spray by itself in OpenFlow). The ports are the QP's base port plus ports drawn
    by a generator seeded with (seed, rank, base port); they are not bound (the QP
    sends through one raw socket), so they may repeat other QPs' ports. Enough
    ports cover the paths evenly: with p ports over k paths, a path's share is
    Binomial(p, 1/k)/p (p = 32, k = 2: 0.5 +- 0.09). Reordering follows, so
    the QPs use selective repeat (:mod:`traffic.transport.selective`). A bounded
    set keeps the switches' datapath flows few: each port is one flow, whose first
    packet takes Open vSwitch's slow path (DESIGN.md, "Entropy costs CPU").
    """

    name = "spray"
    reorders = True

    def for_qp(self, base_port: int) -> QpEntropy:
        return SprayEntropy(self._qp_ports(base_port), f"spray-pick-{self.seed}-{self.rank}-{base_port}")


class Flowlet(EntropyPolicy):
    """``flowlet``: a QP keeps its port during a burst and may take another (one of ``ports_per_qp``,
    drawn at random) after an idle gap longer than ``flowlet_gap_us`` (Kandula et al., "Dynamic load
    balancing without packet reordering", CCR 2007; CONGA, SIGCOMM 2014). A gap longer than the
    largest difference in path delay means the new path cannot overtake the old one: no reordering,
    so go-back-N stays."""

    name = "flowlet"

    def for_qp(self, base_port: int) -> QpEntropy:
        return FlowletEntropy(self._qp_ports(base_port), f"flowlet-pick-{self.seed}-{self.rank}-{base_port}",
                              self.flowlet_gap_us * 1000)


#: name (as written in the scenario) -> class
ENTROPY_POLICIES: dict[str, type[EntropyPolicy]] = {PerFlow.name: PerFlow, Spray.name: Spray,
                                                    Flowlet.name: Flowlet}
#: the policies that use several ports per QP (``transport.entropy_ports``)
MULTI_PORT_POLICIES = (Spray.name, Flowlet.name)


def entropy_policy(name: str, seed: int, rank: int, ports_per_qp: int = 1, flowlet_gap_us: int = 0
                   ) -> EntropyPolicy:
    """The policy ``name`` for one host. Raises ValueError naming the registered names."""
    return pick(ENTROPY_POLICIES, name, "entropy policy", "transport.entropy")(seed, rank, ports_per_qp,
                                                                               flowlet_gap_us)
