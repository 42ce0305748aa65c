"""A flow's ideal completion time: the flow alone on an idle path (HPCC's and the ns-3 studies' yardstick).

HPCC's simulator (alibaba-edu/High-Precision-Congestion-Control, simulation/scratch/third.cc, ``qp_finish``)
writes each flow's

    standalone_fct = base_rtt + total_bytes x 8 / bw

with ``total_bytes`` the payload plus every packet's headers, ``bw`` the path's bottleneck rate and
``base_rtt`` the pair's round trip on the idle path (``pairRtt`` = 2 x the one-way propagation delay + the
transmission time of one packet at each hop); its analysis (analysis/fct_analysis.py) divides the FCT by it:
slowdown = fct / standalone_fct, 1 being as fast as an idle path allows. Here the same form, as the exact
store-and-forward time of the flow alone on the idle path (the bound a measured FCT cannot beat):

    ideal_fct = 2 x delay + sum over hops (first frame + ACK frame) x 8 / rate
                + (wire bytes - first frame) x 8 / bottleneck rate

``wire bytes``: the frames the transport puts on the wire (traffic.transport.params.wire_bytes of BTH +
payload + ICRC per packet of ``payload_bytes``); ``first frame``: the flow's first packet (a full one, or the
whole flow when shorter: HPCC's full packet per hop would overstate a one-packet flow's time several-fold on
10 Mbit/s links); the path: a fewest-hops path between the hosts (every shortest path of a Clos fabric crosses
links of the same rates), each link's own delay or the fabric's ``link_delay_us``. HPCC's analysis prints a
slowdown below 1 as 1, and so does slowdown.csv (testbed.results.slowdown), fct.csv keeping the measured
ratio: on this testbed an idle host link's shaper lets its burst (3 frames) and one more frame leave at once
(docs/link-model.md), so a flow of a few frames can beat the serialized link this yardstick assumes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from topology.model import Layout
from traffic import wire
from traffic.transport.params import wire_bytes


@dataclass(frozen=True)
class IdlePath:
    """A host pair's shortest path: its links' rates (bit/s, in path order) and one-way propagation delay, s."""

    rates_bps: tuple[float, ...]
    delay_s: float

    @property
    def bottleneck_bps(self) -> float:
        return min(self.rates_bps)


def idle_paths(layout: Layout, default_delay_us: float) -> dict[tuple[int, int], IdlePath]:
    """(src rank, dst rank) -> its :class:`IdlePath` for every ordered pair of hosts of ``layout``: a
    fewest-hops path over its links; a link without its own ``delay_us`` has ``default_delay_us``."""
    g = nx.MultiGraph()
    for ln in layout.links:
        g.add_edge(ln.a.node, ln.b.node, rate=ln.rate_bps, delay=ln.delay_or(default_delay_us) / 1e6)
    out = {}
    for s in layout.hosts:
        paths = nx.single_source_shortest_path(g, s.name)
        for d in layout.hosts:
            if d.name == s.name:
                continue
            nodes = paths[d.name]
            hops = [min(g.get_edge_data(a, b).values(), key=lambda e: e["delay"]) for a, b in zip(nodes, nodes[1:])]
            out[(s.rank, d.rank)] = IdlePath(tuple(e["rate"] for e in hops), sum(e["delay"] for e in hops))
    return out


def flow_wire_bytes(size_bytes: int, payload_bytes: int) -> tuple[int, int]:
    """(frame bytes a message of ``size_bytes`` puts on the wire, bytes of its first frame): its packets of
    ``payload_bytes`` (the last one shorter), each with the L2-L4 headers, BTH and ICRC."""
    n = max(1, math.ceil(size_bytes / payload_bytes))
    per_pkt = wire_bytes(wire.BTH_BYTES + wire.ICRC_BYTES)
    return size_bytes + n * per_pkt, min(size_bytes, payload_bytes) + per_pkt


def standalone_fct_s(size_bytes: int, path: IdlePath, payload_bytes: int) -> float:
    """The flow's FCT alone on the idle ``path`` (module docstring's ideal_fct), s."""
    total, first = flow_wire_bytes(size_bytes, payload_bytes)
    per_hop_bits = 8 * (first + wire_bytes(wire.BTH_BYTES + wire.AETH_BYTES + wire.ICRC_BYTES))
    return 2 * path.delay_s + sum(per_hop_bits / r for r in path.rates_bps) + (total - first) * 8 / path.bottleneck_bps
