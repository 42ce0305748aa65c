"""Failure handling, pure logic: which links are dead, and a gray-failure detector from port counters.

:class:`LinkState` turns OFPT_PORT_STATUS (a port's link went down or came
up) into link liveness: a switch-switch link is dead while either end is
down, or after the gray detector condemned it. The controller routes on
:meth:`LinkState.routing_layout` (the layout minus dead links,
:func:`topology.routing.without_links`) and sends every switch only the
differences (controllers.resync).

:class:`GrayDetector` finds links that silently drop a fraction of frames.
What it can see, measured on this machine class: a drop on an interface's
egress hook happens before the qdisc and the veth, so the sender's tx and
the receiver's rx counters agree (1000 frames, 509 dropped: tx 504, rx 504):
comparing one end's tx with the other end's rx finds nothing on veth links.
The loss is visible as a switch that receives more frames than it sends
(conservation; in port statistics, which are exact and read in one reply
per switch): over the last ``window_ns`` (from the oldest sample kept),
``lost = sum(rx_packets) - sum(tx_packets)`` of all its ports. The lost
frames are charged to the port whose frames decided minus frames sent grew
most over the window, if that growth holds at least half of ``lost`` and
the port is a live switch-switch port. Frames decided are the OpenFlow
counters (group buckets and single-output flows). Open vSwitch refreshes
them in a sweep about every 0.5 s, so between sweeps they lag the port
counters by up to ~180 frames a port at 10 Mbit/s (measured), against a loss
of ~3.5 frames/s at 1%: compared at poll times, the lag decides which port
is blamed (CI, 2026-12-01: a quiet uplink condemned instead of the lossy
one; tests/test_gray_replay.py replays a recorded run). So the window
starts and ends at polls right after a sweep (the OpenFlow counters
changed), and the tx counters are taken at the sweep instant, interpolated
between that poll and the one before (:func:`sweep_residuals`): the
remaining error was within +-3 frames a port in recorded runs, except when
a rate changed within the interval (once +30); so the same port must have
grown most at the last two sweeps. A link is
condemned when ``lost >= min_lost_pkts`` and ``lost / (tx on that port +
lost) > threshold``; ``min_lost_pkts`` is at least one egress buffer in full
frames, because a queue that fills holds frames received and not yet sent
(measured: after a reroute made two flows share a spine port, a 1 s window
showed 5 "lost" of 373 with no loss at all). So the window must be long
enough to see that many losses: 1% of ~300 frames/s needs about 8 s for 25
frames. A link whose removal would cut a host off is never condemned (only
reported). Limits: frames a switch drops in its own queues
(congestion) or on table-miss also count as lost, so on a congested fabric
the threshold must sit above the queue-drop rate; a condemned link stays out
of the routes for the rest of the run (nothing probes it to see it heal).

Pure Python (no os-ken); the app (controllers/app.py) feeds it replies.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from topology.model import Layout
from topology.routing import without_links

#: OpenFlow port numbers at or above this are reserved (LOCAL, CONTROLLER, ...), never counted.
OFPP_MAX = 0xFFFFFF00
#: Open vSwitch reports an unavailable counter as all ones (e.g. a port being deleted)
COUNTER_UNAVAILABLE = 1 << 63

LinkKey = FrozenSet[str]  # the two switch names of a link (with the run id)


@dataclass(frozen=True)
class FabricPort:
    """One end of a switch-switch link."""

    switch: str
    dpid: int
    port: int
    peer: str
    link: LinkKey


def fabric_ports(layout: Layout) -> Dict[Tuple[int, int], FabricPort]:
    """{(dpid, port number): FabricPort} for both ends of every switch-switch link."""
    dpid = {s.name: s.dpid for s in layout.switches}
    out: Dict[Tuple[int, int], FabricPort] = {}
    for ln in layout.links:
        if ln.a.node in dpid and ln.b.node in dpid:
            key = frozenset((ln.a.node, ln.b.node))
            out[(dpid[ln.a.node], ln.a.number)] = FabricPort(ln.a.node, dpid[ln.a.node], ln.a.number, ln.b.node, key)
            out[(dpid[ln.b.node], ln.b.number)] = FabricPort(ln.b.node, dpid[ln.b.node], ln.b.number, ln.a.node, key)
    return out


def link_names(layout: Layout, key: LinkKey) -> List[str]:
    """A link's two switch names without the run id, sorted (as the scenario names them)."""
    return sorted(n[len(layout.run_id):] for n in key)


class LinkState:
    """Liveness of the switch-switch links of ``layout`` (module docstring)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.ports = fabric_ports(layout)
        self.ports_down: Set[Tuple[int, int]] = set()
        self.gray: Set[LinkKey] = set()

    def port_status(self, dpid: int, port: int, down: bool) -> Optional[Tuple[LinkKey, bool]]:
        """Record a port's state; return (link, now dead?) when its link's liveness changed, else None
        (a host port, an unknown port, or the other end already told)."""
        end = self.ports.get((dpid, port))
        if end is None:
            return None
        before = self.is_dead(end.link)
        (self.ports_down.add if down else self.ports_down.discard)((dpid, port))
        after = self.is_dead(end.link)
        return (end.link, after) if after != before else None

    def condemn(self, link: LinkKey) -> bool:
        """Treat ``link`` as dead (gray failure); False if it already was."""
        if self.is_dead(link):
            return False
        self.gray.add(link)
        return True

    def is_dead(self, link: LinkKey) -> bool:
        return link in self.gray or any(self.ports[p].link == link for p in self.ports_down)

    def dead_links(self) -> List[LinkKey]:
        keys = {self.ports[p].link for p in self.ports_down} | self.gray
        return sorted(keys, key=sorted)

    def routing_layout(self) -> Layout:
        """The layout to route on: ``layout`` without the dead links."""
        return without_links(self.layout, (tuple(k) for k in self.dead_links()))


@dataclass(frozen=True)
class GrayFinding:
    """A link condemned by the detector: frames lost at ``switch`` on its way out of ``port``."""

    link: LinkKey
    switch: str
    port: int
    lost_pkts: int
    tx_pkts: int
    loss: float
    window_ns: int


@dataclass
class _Sample:
    t_ns: int
    rx: Dict[int, int]
    tx: Dict[int, int]
    fwd: Dict[int, int]  # port -> OpenFlow counts (frames sent there by decision), as of the last sweep
    prev_tx: Optional[Dict[int, int]]  # tx of the poll before, when a sweep fell in between (else None)


def sweep_residuals(fwd: Dict[int, int], tx_before: Dict[int, int], tx_after: Dict[int, int]) -> Dict[int, float]:
    """Frames decided for each port but not sent, at the instant Open vSwitch swept its OpenFlow counters.

    The sweep fell between two polls (``tx_before``, ``tx_after``: tx counters per port); the tx
    counters at the sweep are interpolated linearly at the fraction ``a`` of that interval where
    the frames sent equal the frames decided. ``a`` for port p is found from the OTHER ports (leave
    one out), so that p's own losses do not move it: ``a = (sum fwd - sum tx_before) /
    (sum tx_after - sum tx_before)`` over ports q != p (1 when they sent nothing). Returns {port:
    fwd[p] - (tx_before[p] + a * (tx_after[p] - tx_before[p]))}, in frames: for a lossless port
    about zero (plus its queue backlog), for a lossy one its drops so far.
    """
    ports = list(tx_after)
    d_all = sum(fwd.get(p, 0) for p in ports)
    t1_all = sum(tx_before[p] for p in ports)
    t2_all = sum(tx_after[p] for p in ports)
    out: Dict[int, float] = {}
    for p in ports:
        d, t1, t2 = fwd.get(p, 0), tx_before[p], tx_after[p]
        span = (t2_all - t2) - (t1_all - t1)
        a = ((d_all - d) - (t1_all - t1)) / span if span > 0 else 1.0
        out[p] = d - (t1 + a * (t2 - t1))
    return out


class GrayDetector:
    """Per-switch conservation of frames over a sliding window (module docstring)."""

    def __init__(self, layout: Layout, threshold: float, window_ns: int, min_lost_pkts: int = 5):
        """``min_lost_pkts``: frames a switch must have lost before a link is condemned; at least what one
        egress queue holds, so that a queue filling up (received, not yet sent) is never taken for loss."""
        self.ports = fabric_ports(layout)
        self.threshold = threshold
        self.window_ns = window_ns
        self.min_lost_pkts = min_lost_pkts
        self._history: Dict[int, Deque[_Sample]] = {}
        self._fwd: Dict[int, Dict[str, Dict[int, int]]] = {}
        self._last: Dict[int, _Sample] = {}  # the latest poll of each switch

    def reset(self) -> None:
        """Forget every window (a link changed state or routes moved: old windows mix two states)."""
        self._history.clear()
        self._last.clear()

    def forwarded(self, dpid: int, source: str, counts: Dict[int, int]) -> None:
        """Latest OpenFlow counts of frames a switch sent per output port; ``source``: "groups" (bucket
        counters) or "flows" (flows with one output port); the two are added."""
        self._fwd.setdefault(dpid, {})[source] = dict(counts)

    def forwarded_counts(self, dpid: int) -> Dict[str, Dict[int, int]]:
        """The latest counts given to :meth:`forwarded` for a switch, per source."""
        return {src: dict(c) for src, c in self._fwd.get(dpid, {}).items()}

    def _forwarded(self, dpid: int) -> Dict[int, int]:
        out: Dict[int, int] = {}
        for counts in self._fwd.get(dpid, {}).values():
            for port, n in counts.items():
                out[port] = out.get(port, 0) + n
        return out

    def port_stats(self, dpid: int, t_ns: int, stats: Iterable[Tuple[int, int, int]],
                   skip: Iterable[LinkKey] = ()) -> Optional[GrayFinding]:
        """Add one port-stats reply ((port, rx_packets, tx_packets) per port) taken at ``t_ns``; return
        a finding when the switch lost frames over the window (links in ``skip``, already dead, are
        never charged)."""
        stats = [s for s in stats if s[0] < OFPP_MAX]
        rx = {p: r for p, r, _ in stats}
        tx = {p: t for p, _, t in stats}
        hist = self._history.setdefault(dpid, deque())
        before = self._last.get(dpid)
        if any(v >= COUNTER_UNAVAILABLE for v in (*rx.values(), *tx.values())) or (before and set(before.rx) != set(rx)):
            hist.clear()  # a port came or went (teardown, a deleted port): sums over other ports mean nothing
            self._last.pop(dpid, None)
            return None
        fwd = self._forwarded(dpid)
        self._last[dpid] = _Sample(t_ns, rx, tx, fwd, None)
        if before is None or fwd == before.fwd:
            return None  # no sweep since the poll before: this poll's counters cannot be compared
        # the window holds the polls right after a sweep, each with the tx counters of the poll before it
        hist.append(_Sample(t_ns, rx, tx, fwd, before.tx))
        while len(hist) > 2 and hist[1].t_ns <= t_ns - self.window_ns:
            hist.popleft()
        if len(hist) < 3:
            return None
        first, last = hist[0], hist[-1]
        lost = (sum(last.rx.values()) - sum(first.rx.values())) - (sum(last.tx.values()) - sum(first.tx.values()))
        if lost < self.min_lost_pkts:
            return None
        # which port lost them: the one whose frames decided minus frames sent, both at a sweep, grew most
        # (and grew most at the sweep before too: a rate that changed within one poll interval can put
        # one interpolation ~30 frames off)
        r0 = sweep_residuals(first.fwd, first.prev_tx, first.tx)
        grew, port = {}, None
        for s in (hist[-2], last):
            r = sweep_residuals(s.fwd, s.prev_tx, s.tx)
            grew = {p: r[p] - r0[p] for p in r}
            if port is not None and max(grew, key=lambda p: grew[p]) != port:
                return None
            port = max(grew, key=lambda p: grew[p])
        end = self.ports.get((dpid, port))
        if end is None or end.link in set(skip) or grew[port] < lost / 2:
            return None  # the loss is not on one live fabric port (a host port, a queue, a table miss)
        dtx = last.tx[port] - first.tx[port]
        loss = lost / (dtx + lost)
        if loss <= self.threshold:
            return None
        hist.clear()
        return GrayFinding(end.link, end.switch, port, lost, dtx, loss, last.t_ns - first.t_ns)
