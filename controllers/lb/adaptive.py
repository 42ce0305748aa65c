"""``adaptive``: per-flow hashing over many small buckets, re-pinned by the controller from port telemetry.

The select group of an equal-cost port set gets :data:`BUCKETS_PER_PORT`
equal-weight buckets per port (interleaved, ids 0..n-1). Open vSwitch picks a
flow's bucket by highest random weight over the live bucket ids and weights
(``hash_int(bucket_id, flow hash) & 0xffff`` x weight, ofproto-dpif-xlate.c
``group_best_live_bucket``), so a flow's bucket depends only on the bucket ids
and weights, never on the buckets' output ports: the controller can move the
flows of one bucket to another port by rewriting that bucket's output in an
``OFPGC_MODIFY`` (same ids, same weights), and every other flow stays where
it is. That is the bucket re-mapping of hardware dynamic load balancing
(a table of hash buckets whose member is re-assigned, as CONGA's and Broadcom
DLB's flowlet tables, here without waiting for a gap).

:class:`Rebalancer` is the decision of one switch, pure Python fed with
counters (the app, controllers/adaptive_app.py, polls them):

- port loads: ``tx_bytes`` of each port between two port-stats polls
  (exact, current), as a fraction of the link rate (utilization);
- bucket rates: each bucket's ``byte_count`` in the latest counter refresh
  (Open vSwitch refreshes bucket counters in sweeps about every 0.5 s, and
  counts a flow's first packet at once), turned into a share of its port's
  bucket bytes and scaled by the port's measured load;
- imbalance: the hottest port of a group at or above ``hot_threshold`` of its
  rate, and a port of the same group at least ``min_gain`` below it;
- moves (greedy, :func:`plan_moves`): take the most loaded port ``h`` and the
  least loaded ``c`` of the group; move the bucket of ``h`` that minimizes
  ``max(load_h - r, load_c + r)`` if that lowers the pair's maximum
  utilization by at least ``min_gain`` (so one flow alone on a link never
  moves to an idle one: ``load_c + r = load_h``); repeat on the estimated
  loads, each bucket at most once. Two elephants on one of two uplinks:
  one moves. Four on one of four: three move, one to each idle port.
- hysteresis: after a change the group is frozen for ``min_dwell_ns`` from the
  switch's barrier reply (no bucket moves twice within it), and its counter
  windows restart then, so rates mixed across the change are never used.

Reaction time (:attr:`Decision.seen_ns`): the first poll after the dwell
that saw the imbalance while a move was possible or the bucket counters had
not yet shown where the traffic is; the app measures from it to the barrier
reply after the group-mod. A poll whose counters show no useful move (one
flow alone on the hot port) starts it again, so a lone elephant does not
charge its whole life to a later move; :attr:`Decision.hot_since_ns` keeps
the first poll of the port-level imbalance, the upper bound.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Mapping, Optional, Tuple

from topology.model import Layout, Switch
from topology.routing import PortSet

from controllers.lb import SelectGroup, tier_basis
from controllers.lb.ecmp import BUCKET_WEIGHT
from traffic.registry import setting

#: Equal-weight buckets per port: flows of one bucket move together, so two long flows share one with
#: probability 1 / (ports x BUCKETS_PER_PORT) (1/32 on two uplinks, 1/64 on four).
BUCKETS_PER_PORT = 16
#: A move must lower the larger utilization of the two ports by this fraction of the link rate.
MIN_GAIN = 0.1
#: Bucket counter samples kept (OVS refreshes the counters about every 0.5 s; the latest refresh is used).
BUCKET_WINDOW_NS = 2_000_000_000

BucketKey = Tuple[int, int]  # (group id, bucket id)


@dataclass(frozen=True)
class Settings:
    """The scenario's ``load_balance`` keys of this policy: ``poll_period_ms`` (port and bucket counters
    polled), ``hot_threshold`` (utilization of a port's rate at which its group is rebalanced),
    ``min_dwell_ms`` (a group's freeze after a change: the hysteresis that keeps it from flapping).
    Raises ValueError when the dwell holds fewer than two polls (the rates after a change need them)."""

    poll_period_ms: int = setting(100, ge=20, le=5000)
    hot_threshold: float = setting(0.8, gt=0.0, le=1.0)
    min_dwell_ms: int = setting(500, ge=0, le=60_000)

    def __post_init__(self):
        if self.min_dwell_ms < 2 * self.poll_period_ms:
            raise ValueError(f"min_dwell_ms = {self.min_dwell_ms} must hold at least two polls of "
                             f"poll_period_ms = {self.poll_period_ms} (the rates after a change need them)")


def select_group(layout: Layout, switch: Switch, ports: PortSet, weights: Mapping[str, int] = {}) -> SelectGroup:
    """:data:`BUCKETS_PER_PORT` equal buckets per port, interleaved (port order repeated), hashing
    ``layout.ecmp_hash_fields`` with the switch's tier basis; ``weights`` unused. Before any move every
    port gets 1/len(ports) of the flows, as ``ecmp``."""
    buckets = tuple((port, BUCKET_WEIGHT) for _ in range(BUCKETS_PER_PORT) for port in ports)
    return SelectGroup(buckets, "hash", tuple(layout.ecmp_hash_fields), tier_basis(layout, switch))


@dataclass(frozen=True)
class AdaptiveParams:
    """``hot_threshold``: utilization (0..1] of a port's rate at which its group is rebalanced;
    ``min_dwell_ns``: a group's freeze after a change; ``min_gain``: :data:`MIN_GAIN`."""

    hot_threshold: float = 0.8
    min_dwell_ns: int = 500_000_000
    min_gain: float = MIN_GAIN


@dataclass(frozen=True)
class Move:
    """Bucket ``bucket_id`` of group ``group_id`` goes from ``from_port`` to ``to_port``; ``rate_bps``: its
    estimated rate when decided."""

    group_id: int
    bucket_id: int
    from_port: int
    to_port: int
    rate_bps: float


@dataclass(frozen=True)
class Decision:
    """One group's change: ``moves``, the poll that first saw the imbalance (``seen_ns``), the poll that
    decided (``decided_ns``), the measured port loads then (``loads_bps``), and the first poll of the
    port-level imbalance (``hot_since_ns``: a port hot and another cooler, whatever the bucket counters
    said; earlier than ``seen_ns`` when the counters first showed only one flow on the hot port)."""

    group_id: int
    moves: Tuple[Move, ...]
    seen_ns: int
    decided_ns: int
    loads_bps: Dict[int, float]
    hot_since_ns: Optional[int] = None


def plan_moves(loads_bps: Mapping[int, float], rates_bps: Mapping[int, float],
               buckets: Mapping[int, Tuple[int, float]], min_gain: float = MIN_GAIN) -> List[Tuple[int, int, int, float]]:
    """Greedy moves within one group (module docstring).

    ``loads_bps``: port -> measured load; ``rates_bps``: port -> link rate; ``buckets``: bucket id ->
    (port, estimated rate bit/s). Returns ``(bucket id, from port, to port, rate)`` in order; [] when no move
    lowers the pair's maximum utilization by ``min_gain``. Raises KeyError for a bucket on a port without a
    load or rate.
    """
    est = {p: float(loads_bps[p]) for p in loads_bps}
    where = {b: p for b, (p, _) in buckets.items()}
    moved: set = set()
    out = []
    while len(est) > 1:
        util = {p: est[p] / rates_bps[p] for p in est}
        h = max(util, key=lambda p: (util[p], -p))
        c = min(util, key=lambda p: (util[p], p))
        cands = [b for b, (_, r) in buckets.items() if where[b] == h and b not in moved and r > 0]
        if h == c or not cands:
            break

        def after(b: int) -> float:
            r = buckets[b][1]
            return max((est[h] - r) / rates_bps[h], (est[c] + r) / rates_bps[c])

        best = min(cands, key=lambda b: (after(b), b))
        if after(best) > util[h] - min_gain:
            break
        r = buckets[best][1]
        est[h] -= r
        est[c] += r
        where[best] = c
        moved.add(best)
        out.append((best, h, c, r))
    return out


@dataclass
class _Group:
    ports: Tuple[int, ...]
    buckets: Dict[int, int]  # bucket id -> port
    frozen_until_ns: int = 0
    changed_ns: int = 0
    seen_ns: Optional[int] = None
    hot_since_ns: Optional[int] = None  # first poll of the current port-level imbalance
    pending: bool = False


@dataclass
class _PortSample:
    t_ns: int
    tx_bytes: Dict[int, int]


@dataclass
class Rebalancer:
    """The adaptive decision of one switch (module docstring).

    ``groups``: group id -> {bucket id: port}; ``port_rate_bps``: port -> link rate. Feed
    :meth:`bucket_bytes` with group-stats replies and :meth:`port_stats` with port-stats replies; apply
    what :meth:`port_stats` returns, then call :meth:`applied` at the barrier reply.
    """

    groups_in: Mapping[int, Mapping[int, int]]
    port_rate_bps: Mapping[int, float]
    params: AdaptiveParams = AdaptiveParams()
    groups: Dict[int, _Group] = field(init=False)
    _buckets: Deque[Tuple[int, Dict[BucketKey, int]]] = field(init=False, default_factory=deque)
    _last_ports: Optional[_PortSample] = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.groups = {gid: _Group(tuple(sorted(set(b.values()))), dict(b)) for gid, b in self.groups_in.items()}
        for g in self.groups.values():
            missing = [p for p in g.ports if p not in self.port_rate_bps]
            if missing:
                raise ValueError(f"adaptive: no link rate for ports {missing}")

    def bucket_bytes(self, t_ns: int, counts: Mapping[BucketKey, int]) -> None:
        """A group-stats reply: byte count of each (group id, bucket id) at ``t_ns``. A counter that went
        backwards (the group was replaced) restarts the window."""
        counts = dict(counts)
        if self._buckets and any(counts.get(k, 0) < v for k, v in self._buckets[-1][1].items()):
            self._buckets.clear()
        self._buckets.append((t_ns, counts))
        while len(self._buckets) > 2 and self._buckets[1][0] <= t_ns - BUCKET_WINDOW_NS:
            self._buckets.popleft()

    def _bucket_delta(self, since_ns: int) -> Optional[Dict[BucketKey, int]]:
        """Bytes per bucket in the latest counter refresh: the last sample minus the newest earlier one
        (taken at or after ``since_ns``) that differs from it. Open vSwitch pushes bucket counters in
        sweeps, so this is what each bucket carried since the sweep before; flows that ended before it
        count nothing (a longer window would make the buckets of finished flows look hot). None without
        two samples."""
        samples = [s for s in self._buckets if s[0] >= since_ns]
        if len(samples) < 2:
            return None
        last = samples[-1][1]
        prev = next((c for _, c in reversed(samples[:-1]) if c != last), samples[-2][1])
        return {k: v - prev.get(k, 0) for k, v in last.items()}

    def port_stats(self, t_ns: int, tx_bytes: Mapping[int, int]) -> List[Decision]:
        """A port-stats reply (port -> tx_bytes) at ``t_ns``: the groups to change now (each at most once
        per dwell; none while a change is pending)."""
        prev, self._last_ports = self._last_ports, _PortSample(t_ns, dict(tx_bytes))
        if prev is None or t_ns <= prev.t_ns:
            return []
        dt_s = (t_ns - prev.t_ns) / 1e9
        loads = {p: max(0, tx_bytes[p] - prev.tx_bytes.get(p, tx_bytes[p])) * 8 / dt_s
                 for p in tx_bytes if p in self.port_rate_bps}
        out = []
        for gid, g in self.groups.items():
            if g.pending or t_ns < g.frozen_until_ns or any(p not in loads for p in g.ports):
                continue
            d = self._decide(gid, g, t_ns, {p: loads[p] for p in g.ports})
            if d is not None:
                out.append(d)
        return out

    def _decide(self, gid: int, g: _Group, t_ns: int, loads: Dict[int, float]) -> Optional[Decision]:
        util = {p: loads[p] / self.port_rate_bps[p] for p in g.ports}
        hot, cool = max(util.values()), min(util.values())
        if hot < self.params.hot_threshold or cool > hot - self.params.min_gain:
            g.seen_ns = g.hot_since_ns = None
            return None
        g.hot_since_ns = g.hot_since_ns if g.hot_since_ns is not None else t_ns
        delta = self._bucket_delta(g.changed_ns)
        on_port: Dict[int, int] = {}
        if delta is not None:
            for b, p in g.buckets.items():
                on_port[p] = on_port.get(p, 0) + max(0, delta.get((gid, b), 0))
        hot_port = max(util, key=lambda p: (util[p], -p))
        if not on_port.get(hot_port):  # the bucket counters do not show the hot port's traffic yet: wait
            g.seen_ns = g.seen_ns if g.seen_ns is not None else t_ns
            return None
        rates = {b: (p, loads[p] * max(0, delta.get((gid, b), 0)) / on_port[p] if on_port.get(p) else 0.0)
                 for b, p in g.buckets.items()}
        moves = plan_moves(loads, self.port_rate_bps, rates, self.params.min_gain)
        if not moves:
            g.seen_ns = None
            return None
        seen = g.seen_ns if g.seen_ns is not None else t_ns
        hot_since = g.hot_since_ns
        g.seen_ns = g.hot_since_ns = None
        g.pending = True
        for b, _, to, _ in moves:
            g.buckets[b] = to
        return Decision(gid, tuple(Move(gid, b, f, to, r) for b, f, to, r in moves), seen, t_ns, loads, hot_since)

    def applied(self, group_id: int, t_ns: int) -> None:
        """The switch confirmed the change of ``group_id`` at ``t_ns`` (barrier reply): freeze the group
        for the dwell; counter windows restart from then."""
        g = self.groups[group_id]
        g.pending = False
        g.changed_ns = t_ns
        g.frozen_until_ns = t_ns + self.params.min_dwell_ns
