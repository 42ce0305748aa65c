"""A scenario's offered packet rate, counted per hop: the work the machine must do to emulate it.

The CPU cost of the emulation is per packet and per hop (docs/architecture.md: the cost is per packet, not
per byte; every frame is forwarded by every switch it crosses). So the load of a scenario is
counted in **packet-hops per second**: every frame counted once for each link it crosses.

Model (upper bound of what the workload can offer, before anything is built):

- Every host sends on each of its links (NICs) at that link's full rate (``rate_bps`` in the
  layout: ``fabric.host_link_bps``, a scale-up link's multiple of it), in full data frames of the
  scenario's payload (``transport.payload_bytes`` + BTH + ICRC + Ethernet/IPv4/UDP headers,
  testbed.measure.link_model.data_frame_bytes), spread evenly over its peers (the ranks it opens queue pairs
  with, testbed.workloads.base.Workload.peers; every other host when none are given). A host with
  no peers (e.g. ``testbed nccl -g``'s idle hosts) offers nothing.
- Which link carries a pair's traffic: the scale-up link when both hosts are in one scale-up
  domain (the transport prefers it, topology/scale_up.py), else every scale-out plane in which
  both have a link (each plane's NIC carries its own share).
- A receiving link delivers at most its rate: when the flows into one link add up to more, each
  is scaled down to fit (window- and ACK-clocked transports cannot sustain more than is
  delivered; an incast of N senders is counted as one link's worth, not N).
- Each data frame crosses ``switch hops + 1`` links: from its host to the first switch, between
  switches along a shortest path of the layout (topology.routing.switch_graph, every link one
  hop, as the routes are), and to the receiving host. Each link crossed is one transmit through a
  shaped veth; each switch between two links is one Open vSwitch forwarding; the first and last
  link stand for the sending and receiving agents' work.
- The receiver answers every ``transport.ack_every_pkts`` data frames with an ACK, a frame on the
  reverse path of the same length: data frames x (1 + 1 / ack_every_pkts) in all. CNPs, NAKs and
  retransmissions are not counted.

So ``hop_pps = sum over flows of rate_bps / (frame_bytes x 8) x (1 + 1/ack_every_pkts) x links``.

The same model turns a calibration run's highest faithful rate into the machine's capacity in the
same unit (testbed.pipeline.calibrate), so the model's simplifications (uniform peers, full-rate
senders) apply to both sides of the comparison (testbed.measure.capacity_check).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import networkx as nx
import numpy as np

from topology.model import SCALE_UP_PLANE, Host, Layout
from topology.routing import switch_graph
from testbed.measure.link_model import data_frame_bytes


@dataclass(frozen=True)
class PacketLoad:
    """What a scenario can offer (module docstring).

    hop_pps: packet-hops/s (data and ACK frames, each counted once per link crossed); frames_pps:
    data frames/s entering the fabric from every host; links_per_frame: mean links a data frame
    crosses (weighted by rate); sending_hosts: hosts with at least one peer; n_hosts: hosts of the
    fabric; frame_bytes: one full data frame; payload_bytes: the RoCE payload (path MTU).
    """

    hop_pps: float
    frames_pps: float
    links_per_frame: float
    sending_hosts: int
    n_hosts: int
    frame_bytes: int
    payload_bytes: int

    @property
    def hop_pps_per_host(self) -> float:
        """packet-hops/s one sending host adds on average (0 without senders)."""
        return self.hop_pps / self.sending_hosts if self.sending_hosts else 0.0


def _host_links(layout: Layout) -> dict[str, list[tuple[str, int, float]]]:
    """host name -> [(switch, plane, rate_bps)] for each of its links."""
    switches = {s.name for s in layout.switches}
    out: dict[str, list[tuple[str, int, float]]] = defaultdict(list)
    for ln in layout.links:
        for end, far in ((ln.a, ln.b), (ln.b, ln.a)):
            if end.node not in switches and far.node in switches:
                out[end.node].append((far.node, ln.plane, ln.rate_bps))
    return out


class _Paths:
    """Links crossed between two switches' hosts: switch distance + 2, cached per source switch."""

    def __init__(self, layout: Layout):
        self.graph = switch_graph(layout)
        self._dist: dict[str, dict[str, int]] = {}

    def links(self, a: str, b: str) -> Optional[int]:
        """Links a frame crosses from a host on switch ``a`` to a host on switch ``b``; None: unreachable."""
        if a not in self._dist:
            self._dist[a] = nx.single_source_shortest_path_length(self.graph, a)
        d = self._dist[a].get(b)
        return None if d is None else d + 2


def _routes(src: list, dst: list, paths: _Paths) -> list[tuple[int, int, int]]:
    """(index of src's link, index of dst's link, links crossed) that carry a pair's traffic: the
    shared scale-up link if any, else one per scale-out plane both hosts are in."""
    def pick(scale_up: bool):
        found = []
        for i, (sa, pa, _) in enumerate(src):
            for j, (sb, pb, _) in enumerate(dst):
                if pa == pb and (pa == SCALE_UP_PLANE) == scale_up:
                    n = paths.links(sa, sb)
                    if n is not None:
                        found.append((i, j, n))
        return found

    return pick(True) or pick(False)


def packet_load(spec, peers: Optional[Mapping[int, Sequence[int]]] = None,
                layout: Optional[Layout] = None) -> PacketLoad:
    """The packet-hops/s a scenario can offer (module docstring model).

    Args:
        spec: a testbed.spec.scenario.ScenarioSpec (its transport's payload and ACK spacing).
        peers: rank -> ranks it sends to (testbed.workloads.base.Workload.peers); None: every host
            to every other host.
        layout: the fabric's topology.model.Layout; None: ``spec.fabric.layout_preview()``.

    Raises IndexError for a peer rank the layout does not have.
    """
    layout = layout if layout is not None else spec.fabric.layout_preview()
    hosts: list[Host] = list(layout.hosts)
    if peers is None:
        peers = {h.rank: [p.rank for p in hosts if p.rank != h.rank] for h in hosts}
    per_host = _host_links(layout)
    paths = _Paths(layout)
    first: dict[str, int] = {}  # host -> index of its first link in the flat arrays
    rates: list[float] = []
    for h in hosts:
        first[h.name] = len(rates)
        rates.extend(rate for _, _, rate in per_host[h.name])
    routes_of: dict[tuple, list] = {}  # (src links' switches and planes, dst's) -> routes, shared by equal hosts
    src, dst, hops = [], [], []
    senders = 0
    for h in hosts:
        mine = [r for r in dict.fromkeys(peers.get(h.rank, ())) if r != h.rank]
        senders += bool(mine)
        a = per_host[h.name]
        sig_a = tuple((sw, plane) for sw, plane, _ in a)
        for r in mine:
            b = per_host[hosts[r].name]
            key = (sig_a, tuple((sw, plane) for sw, plane, _ in b))
            if key not in routes_of:
                routes_of[key] = _routes(a, b, paths)
            base_a, base_b = first[h.name], first[hosts[r].name]
            for i, j, n in routes_of[key]:
                src.append(base_a + i)
                dst.append(base_b + j)
                hops.append(n)
    frame = data_frame_bytes(spec.transport.payload_bytes)
    if not src:
        return PacketLoad(0.0, 0.0, 0.0, senders, len(hosts), frame, spec.transport.payload_bytes)
    rate = np.asarray(rates)
    src_i, dst_i, n_links = np.asarray(src), np.asarray(dst), np.asarray(hops, dtype=float)
    flows_per_link = np.bincount(src_i, minlength=len(rate))
    bps = rate[src_i] / flows_per_link[src_i]  # a link's rate spread over the flows it serves
    received = np.bincount(dst_i, weights=bps, minlength=len(rate))
    bps = bps * np.minimum(1.0, rate[dst_i] / received[dst_i])  # a receiving link delivers at most its rate
    fps = bps / (frame * 8)
    frames_pps, weighted = float(fps.sum()), float((fps * n_links).sum())
    acks = 1.0 + 1.0 / spec.transport.ack_every_pkts
    return PacketLoad(hop_pps=weighted * acks, frames_pps=frames_pps,
                      links_per_frame=weighted / frames_pps if frames_pps else 0.0, sending_hosts=senders,
                      n_hosts=len(hosts), frame_bytes=frame, payload_bytes=spec.transport.payload_bytes)
