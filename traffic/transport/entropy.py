"""Entropy policies: the UDP source port(s) a QP sends from, chosen by ``transport.entropy``.

RoCEv2 carries its ECMP entropy in the UDP source port (IBTA RoCEv2 annex A17.3.1: "the UDP
source port ... used as entropy"); switches hash it into the path choice. A policy has two
levels:

- per host, :meth:`EntropyPolicy.host_ports` draws the base ports of the host's QPs, distinct,
  from 49152-65535 with a generator seeded by (seed, rank): runs are reproducible;
- per QP, :meth:`EntropyPolicy.for_qp` gives a :class:`QpEntropy`: ``ports`` (the QP opens one
  socket per port) and ``port_index(now_ns)``, asked before each packet when there is more than
  one port. A flowlet policy changes the index after an idle gap, a spray policy per packet
  (round robin over ports balanced across the paths the testbed traced).

To add one: a subclass of :class:`EntropyPolicy` here (or in its own module) and an entry in
:data:`ENTROPY_POLICIES`.
"""
from __future__ import annotations

import random
from typing import ClassVar, Mapping, Optional, Sequence

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


class RoundRobinEntropy(QpEntropy):
    """``ports`` in turn, one per packet, starting at index ``start``."""

    def __init__(self, ports: list[int], start: int = 0):
        super().__init__(ports)
        self._next = start % len(self.ports)

    def port_index(self, now_ns: int) -> int:
        i = self._next
        self._next = (i + 1) % len(self.ports)
        return i


def balanced_ports(path_pools: Sequence[Sequence[int]], count: int, rng: random.Random) -> list[int]:
    """An equal number of ports from each path's pool, interleaved so that consecutive ports take
    different paths.

    ``path_pools``: per path (k >= 1 of them), the UDP source ports that take it; ``count``: ports
    wanted in all. Each path gives m = max(1, count // k) ports, fewer if a pool is shorter (then
    m = the shortest pool's length, so the paths stay equal), drawn at random by ``rng``; the result
    lists the first port of every path (paths in an order shuffled by ``rng``), then the second, ...:
    k x m ports. Raises ValueError for no path or an empty pool."""
    if not path_pools or not all(path_pools):
        raise ValueError(f"every path needs at least one port; pools of sizes {[len(p) for p in path_pools]}")
    m = min(max(1, count // len(path_pools)), min(len(p) for p in path_pools))
    picks = [rng.sample(list(pool), m) for pool in path_pools]
    rng.shuffle(picks)
    return [path[i] for i in range(m) for path in picks]


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
    ``path_ports``: (source address, destination address) -> per fabric path, the UDP source ports
    that take it (testbed.emulation.entropy_paths), for a policy with ``uses_paths``.
    ``reorders``: whether the policy's packets overtake each other, so the QPs need selective repeat."""

    name: ClassVar[str] = ""
    reorders: ClassVar[bool] = False
    #: whether the policy wants ``path_ports`` (the testbed traces them before starting the agents)
    uses_paths: ClassVar[bool] = False

    def __init__(self, seed: int, rank: int, ports_per_qp: int = 1, flowlet_gap_us: int = 0,
                 path_ports: Optional[Mapping[tuple[str, str], Sequence[Sequence[int]]]] = None):
        self.seed, self.rank, self.ports_per_qp, self.flowlet_gap_us = seed, rank, ports_per_qp, flowlet_gap_us
        self.path_ports = dict(path_ports or {})

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

    def for_qp(self, base_port: int, src_ip: str = "", dst_ip: str = "") -> QpEntropy:
        """The ports and port choice of the QP whose base port (from :meth:`host_ports`) is ``base_port``,
        sending from ``src_ip`` to ``dst_ip`` (used by a policy with ``uses_paths``)."""
        raise NotImplementedError


class PerFlow(EntropyPolicy):
    """``per_flow``: one port per QP for its whole life (what an RNIC does by default)."""

    name = "per_flow"

    def for_qp(self, base_port: int, src_ip: str = "", dst_ip: str = "") -> QpEntropy:
        return QpEntropy([base_port])


class Spray(EntropyPolicy):
    """``spray``: every packet of a QP leaves from the next of its ports in turn (round robin), the
    ports spread evenly over the fabric's equal-cost paths.

    Each port is a flow to the switches' ECMP hash, so a QP's packets spread over the paths
    (per-packet load balancing from the sender, as the switch cannot spray by itself in OpenFlow).
    With ``path_ports`` for the QP's address pair, the set is balanced: ``ports_per_qp // k`` ports
    on each of the k paths (:func:`balanced_ports`), so each path carries exactly 1/k of the QP's
    packets. Without (no trace, e.g. a QP outside a fabric), the QP's base port and ports drawn by
    a generator seeded with (seed, rank, base port): a path's share is then Binomial(p, 1/k)/p
    (p = 64, k = 4: 0.25 +- 0.054), the imbalance that cost 11% of the throughput of 4 flows on 4
    paths. Either way the start in the cycle is seeded per QP. Reordering follows, so the QPs use
    selective repeat (:mod:`traffic.transport.selective`). A bounded set keeps the switches'
    datapath flows few: each port is one flow, whose first packet takes Open vSwitch's slow path
    (docs/architecture.md, "Entropy costs CPU").
    """

    name = "spray"
    reorders = True
    uses_paths = True

    def for_qp(self, base_port: int, src_ip: str = "", dst_ip: str = "") -> QpEntropy:
        rng = random.Random(f"spray-pick-{self.seed}-{self.rank}-{base_port}")
        pools = self.path_ports.get((src_ip, dst_ip))
        ports = balanced_ports(pools, self.ports_per_qp, rng) if pools else self._qp_ports(base_port)
        return RoundRobinEntropy(ports, rng.randrange(len(ports)))


class Flowlet(EntropyPolicy):
    """``flowlet``: a QP keeps its port during a burst and may take another (one of ``ports_per_qp``,
    drawn at random) after an idle gap longer than ``flowlet_gap_us`` (Kandula et al., "Dynamic load
    balancing without packet reordering", CCR 2007; CONGA, SIGCOMM 2014). A gap longer than the
    largest difference in path delay means the new path cannot overtake the old one: no reordering,
    so go-back-N stays."""

    name = "flowlet"

    def for_qp(self, base_port: int, src_ip: str = "", dst_ip: str = "") -> QpEntropy:
        return FlowletEntropy(self._qp_ports(base_port), f"flowlet-pick-{self.seed}-{self.rank}-{base_port}",
                              self.flowlet_gap_us * 1000)


#: name (as written in the scenario) -> class
ENTROPY_POLICIES: dict[str, type[EntropyPolicy]] = {PerFlow.name: PerFlow, Spray.name: Spray,
                                                    Flowlet.name: Flowlet}
#: the policies that use several ports per QP (``transport.entropy_ports``)
MULTI_PORT_POLICIES = (Spray.name, Flowlet.name)


def entropy_policy(name: str, seed: int, rank: int, ports_per_qp: int = 1, flowlet_gap_us: int = 0,
                   path_ports: Optional[Mapping[tuple[str, str], Sequence[Sequence[int]]]] = None) -> EntropyPolicy:
    """The policy ``name`` for one host (``path_ports``: see :class:`EntropyPolicy`). Raises ValueError
    naming the registered names."""
    return pick(ENTROPY_POLICIES, name, "entropy policy", "transport.entropy")(seed, rank, ports_per_qp,
                                                                               flowlet_gap_us, path_ports)
