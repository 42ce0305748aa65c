"""PFC policy, hop by hop: ingress attribution, Xoff/Xon decisions, headroom (pure, no I/O).

IEEE 802.1Qbb (Priority-based Flow Control): a switch counts the lossless
bytes it buffers per ingress port; when an ingress passes Xoff it pauses the
device upstream of that port for the class, and resumes it below Xon.

**Ingress attribution.** The emulation only sees egress queues (one tbf leaf
per class on each switch port; no shared buffer with per-ingress counters).
The bytes charged to ingress port ``i`` of switch ``S`` are the lossless
backlogs of every egress port of ``S`` that ``i`` *feeds*, summed::

    charged(i) = sum over e in feeds(i) of backlog_lossless(e)

``i`` feeds ``e`` when the fabric's routes (:func:`topology.routing.next_hop_ports`,
the controller's own) can carry a packet that enters ``S`` at ``i`` out of
``e``: from a host port, toward any other host; from a switch neighbour ``N``,
toward every host ``d`` for which ``N`` has ``S`` among its next hops. The
whole backlog of ``e`` is charged to *every* ingress that can feed it: an
upper bound of the bytes ``i`` really has queued in ``S`` (its share of each
queue is at most the queue). It errs toward pausing early, never late, so the
lossless class stays lossless as long as Xoff plus the headroom of every
feeding ingress fits in the egress buffer (:func:`worst_case_bytes`), and an
ingress that carries none of a congested port's traffic may be paused with the
others (the head-of-line blocking PFC is known for, here a little wider).

**Headroom** (:func:`headroom_bytes`): bytes that still arrive after the
ingress passed Xoff, per IEEE 802.1Qbb-2011 Annex O's delay model (as in
Cisco's "Priority Flow Control: Build Reliable Layer 2 Infrastructure" white
paper): the upstream's frame in flight and one more maximum frame, the PFC
frame (64 bytes), and the link rate times (response time + twice the
propagation delay). Here the response time is the loop's sampling period
(the crossing is seen at most one period late) plus the actuator's time from
decision to effect (target 2 ms).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from topology.model import Host, Layout, Port
from topology.routing import next_hop_ports

#: bytes of a PFC frame on the wire (minimum Ethernet frame)
PFC_FRAME_BYTES = 64
#: the actuator's target time from decision to effect, s (pause and resume within 2 ms)
ACTUATION_TARGET_S = 0.002


@dataclass(frozen=True)
class Upstream:
    """The device upstream of a switch ingress port: its egress interface toward the switch."""

    node: str       #: host or switch name
    ifname: str     #: its interface toward the switch (a host's lives in the host's namespace)
    is_host: bool
    rate_bps: float  #: the link's rate
    delay_us: Optional[int] = None  #: the link's own one-way delay, us (None: the fabric's default)


def _far_ends(layout: Layout, switch: str):
    for ln in layout.links_of(switch):
        mine, far = (ln.a, ln.b) if ln.a.node == switch else (ln.b, ln.a)
        yield mine, far, ln


def feeds(layout: Layout) -> Dict[str, Tuple[str, ...]]:
    """{ingress interface: egress interfaces of the same switch it can feed} for every switch port
    (module doc). Raises topology.routing.RoutingError when a host is unreachable."""
    table = next_hop_ports(layout)
    hosts = [h.name for h in layout.hosts]
    out: Dict[str, Tuple[str, ...]] = {}
    for sw in layout.switches:
        for mine, far, _ in _far_ends(layout, sw.name):
            if isinstance(layout.node(far.node), Host):
                dests = [d for d in hosts if d != far.node]
            else:
                dests = [d for d in hosts if far.number in table[far.node][d]]
            ports = sorted({p for d in dests for p in table[sw.name][d]} - {mine.number})
            out[mine.intf] = tuple(Port(sw.name, p).intf for p in ports)
    return out


def upstreams(layout: Layout) -> Dict[str, Upstream]:
    """{switch ingress interface: the device upstream of it} for every switch port."""
    out = {}
    for sw in layout.switches:
        for mine, far, ln in _far_ends(layout, sw.name):
            out[mine.intf] = Upstream(far.node, far.intf, isinstance(layout.node(far.node), Host), ln.rate_bps,
                                      ln.delay_us)
    return out


def headroom_bytes(rate_bps: float, response_s: float, frame_bytes: int, propagation_s: float = 0.0) -> int:
    """Bytes one ingress may still receive after passing Xoff (module doc; IEEE 802.1Qbb-2011 Annex O):
    ``rate_bps / 8 x (response_s + 2 propagation_s) + 2 frame_bytes + 64``. ValueError on negatives."""
    if min(rate_bps, response_s, frame_bytes, propagation_s) < 0:
        raise ValueError(f"headroom: negative input (rate_bps={rate_bps}, response_s={response_s}, "
                         f"frame_bytes={frame_bytes}, propagation_s={propagation_s})")
    return math.ceil(rate_bps / 8 * (response_s + 2 * propagation_s)) + 2 * frame_bytes + PFC_FRAME_BYTES


def worst_case_bytes(layout: Layout, xoff_bytes: int, period_s: float, frame_bytes: int,
                     propagation_s: float = 0.0) -> Tuple[int, str, int]:
    """(bytes, egress interface, feeding ingresses) of the egress that can hold the most lossless bytes:
    Xoff plus the headroom of every ingress that feeds it, each at its own link's rate and propagation
    delay (the link's own ``delay_us``, else ``propagation_s``, the fabric's ``link_delay_us``): a long
    link's headroom grows with its round trip (a dci link's ``dci_delay_us``)."""
    up, fed = upstreams(layout), feeds(layout)
    by_egress: Dict[str, List[str]] = {}
    for ingress, egresses in fed.items():
        for e in egresses:
            by_egress.setdefault(e, []).append(ingress)
    best = (xoff_bytes, "", 0)
    for e, ins in by_egress.items():
        total = xoff_bytes + sum(headroom_bytes(up[i].rate_bps, period_s + ACTUATION_TARGET_S, frame_bytes,
                                                propagation_s if up[i].delay_us is None else up[i].delay_us / 1e6)
                                 for i in ins)
        if total > best[0]:
            best = (total, e, len(ins))
    return best


class PfcPolicy:
    """Xoff/Xon hysteresis per ingress port on the charged lossless bytes (module doc).

    Args:
        xoff_bytes, xon_bytes: thresholds, Xon < Xoff (ValueError otherwise).
        egress_ports: port names in the order :meth:`decide` gets backlogs.
        feeds: {ingress: egress ports it feeds} (:func:`feeds`); ingresses without any never pause.
    """

    def __init__(self, xoff_bytes: int, xon_bytes: int, egress_ports: Sequence[str],
                 feeds: Dict[str, Sequence[str]]):
        if not 0 <= xon_bytes < xoff_bytes:
            raise ValueError(f"PFC: need 0 <= xon_bytes < xoff_bytes, got xon_bytes={xon_bytes}, "
                             f"xoff_bytes={xoff_bytes}")
        self.xoff_bytes, self.xon_bytes = int(xoff_bytes), int(xon_bytes)
        index = {p: k for k, p in enumerate(egress_ports)}
        self._feeds = {i: [index[e] for e in es if e in index] for i, es in feeds.items()}
        self._feeds = {i: ks for i, ks in self._feeds.items() if ks}
        self.paused: Dict[str, bool] = dict.fromkeys(self._feeds, False)

    def charged_bytes(self, backlogs_bytes: Sequence[int]) -> Dict[str, int]:
        """{ingress: charged lossless bytes} for one sample (negative backlog = not sampled: 0)."""
        return {i: sum(max(0, backlogs_bytes[k]) for k in ks) for i, ks in self._feeds.items()}

    def decide(self, backlogs_bytes: Sequence[int]) -> List[Tuple[str, str, int]]:
        """``backlogs_bytes``: the lossless backlog of each egress port (bytes).

        Returns [(ingress, "pause" | "resume", charged bytes)] for the ingresses whose state changes:
        pause at charged >= Xoff, resume at charged <= Xon.
        """
        out = []
        for i, b in self.charged_bytes(backlogs_bytes).items():
            if not self.paused[i] and b >= self.xoff_bytes:
                self.paused[i] = True
                out.append((i, "pause", b))
            elif self.paused[i] and b <= self.xon_bytes:
                self.paused[i] = False
                out.append((i, "resume", b))
        return out

    def release_all(self) -> List[str]:
        """Mark every paused ingress resumed; return them (the loop resumes their upstreams at stop)."""
        held = [i for i, p in self.paused.items() if p]
        for i in held:
            self.paused[i] = False
        return held

