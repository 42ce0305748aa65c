"""The controller's adaptive load balancing: feed port and bucket counters to the decision, apply its moves.

Mixed into :class:`controllers.app.FabricRoutingApp` after
:class:`controllers.failover_app.FailoverMixin`, whose statistics poller
(every ``stats_period_ms`` of the settings: group stats, flow descriptions, port
stats of every ready switch) it reuses: group-stats replies give each
bucket's byte count, port-stats replies each port's ``tx_bytes``. With
``lb_policy = adaptive`` every switch with select groups gets a
:class:`controllers.lb.adaptive.Rebalancer`; its decisions become one
``OFPGC_MODIFY`` per changed group (same bucket ids and weights, new output
ports, so only the moved buckets' flows change path) and a barrier.

At the barrier reply one event (:class:`controllers.contract.AdaptiveMoved`) goes to the events file
(failover_app)::

    {"event": "adaptive_moved", "switch": "l1", "group": 1,
     "moves": [{"bucket": 5, "from_port": 3, "to_port": 4, "from_node": "s1", "to_node": "s2", "rate_bps": 9900000}],
     "loads_bps": {"3": 19.8e6, "4": 0.0}, "seen_ns": ..., "decided_ns": ..., "sent_ns": ...,
     "barrier_ns": ..., "reaction_ms": 12.3, "hot_since_ns": ..., "since_hot_ms": 12.3, "time_ns": ...}

``reaction_ms``: from the first poll that saw the imbalance (``seen_ns``) to
the barrier reply (``barrier_ns``); ``since_hot_ms``: from the first poll of the port-level imbalance
(``hot_since_ns``, controllers.lb.adaptive.Decision), its upper bound. A reroute after a failure plans every
group afresh (equal buckets) and starts every rebalancer again.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Dict, List, Tuple

from controllers.contract import AdaptiveMoved, BucketMove, ControllerSettings
from controllers.lb import ADAPTIVE_POLICIES
from controllers.lb.adaptive import AdaptiveParams, Decision, Rebalancer
from controllers.ofmsg import build_group_mod
from controllers.ofplan import BucketPlan, SwitchPlan
from traffic.clock import unix_ns

LOG = logging.getLogger(__name__)


def port_rates(layout: Any, switch: str) -> Dict[int, float]:
    """{port number: link rate bit/s} of every link of ``switch``."""
    out = {}
    for ln in layout.links_of(switch):
        end = ln.a if ln.a.node == switch else ln.b
        out[end.number] = float(ln.rate_bps)
    return out


def port_peers(layout: Any, switch: str) -> Dict[int, str]:
    """{port number: far-end node name without the run id}."""
    out = {}
    for ln in layout.links_of(switch):
        end = ln.a if ln.a.node == switch else ln.b
        out[end.number] = ln.peer(switch).node[len(layout.run_id):]
    return out


class AdaptiveMixin:
    """Adaptive re-pinning of select-group buckets; needs the app's topology, plans, switches, lb_policy and
    the failover mixin's ``_event``."""

    def _adaptive_init(self, settings: ControllerSettings) -> None:
        self.adaptive_on = self.lb_policy in ADAPTIVE_POLICIES
        adaptive = settings.load_balance.adaptive
        if self.adaptive_on and adaptive is None:
            raise ValueError(f"load_balance.policy {self.lb_policy} needs load_balance.adaptive in the settings")
        if self.adaptive_on and settings.stats_period_ms <= 0:
            raise ValueError("lb_policy adaptive needs stats_period_ms > 0 (the counters it reacts to)")
        self.adaptive_params = (AdaptiveParams(adaptive.hot_threshold, int(adaptive.min_dwell_ms * 1e6))
                                if adaptive is not None else None)
        self._adaptive_reset()

    def _adaptive_reset(self) -> None:
        """A rebalancer per switch with select groups, on the current plans (start, and after a reroute)."""
        self.rebalancers: Dict[int, Rebalancer] = {}
        self._adaptive_pending: Dict[Tuple[int, int], Tuple[List[Decision], int]] = {}  # (dpid, xid) -> sent
        if not self.adaptive_on:
            return
        for dpid, plan in self.plans.items():
            if plan.groups:
                groups = {g.group_id: {b.bucket_id: b.port for b in g.buckets} for g in plan.groups}
                self.rebalancers[dpid] = Rebalancer(groups, port_rates(self.topology, plan.name),
                                                    self.adaptive_params)

    def _adaptive_buckets(self, msg: Any) -> None:
        """A group-stats reply outside a sync: byte count per (group, bucket)."""
        reb = self.rebalancers.get(msg.datapath.id)
        if reb is None:
            return
        counts = {(g.group_id, i): int(b.byte_count) for g in msg.body for i, b in enumerate(g.bucket_stats)}
        reb.bucket_bytes(unix_ns(), counts)

    def _adaptive_ports(self, msg: Any) -> None:
        """A port-stats reply: decide; send each changed group as OFPGC_MODIFY, then a barrier."""
        dp = msg.datapath
        reb = self.rebalancers.get(dp.id)
        state = self.switches.get(dp.id)
        if reb is None or state is None or not state.ready:
            return
        decisions = reb.port_stats(unix_ns(), {s.port_no: int(s.tx_bytes) for s in msg.body})
        if not decisions:
            return
        plan: SwitchPlan = self.plans[dp.id]
        groups = {g.group_id: g for g in plan.groups}
        for d in decisions:
            new_port = {m.bucket_id: m.to_port for m in d.moves}
            g = groups[d.group_id]
            groups[d.group_id] = replace(g, buckets=tuple(BucketPlan(b.bucket_id, new_port.get(b.bucket_id, b.port),
                                                                     b.weight) for b in g.buckets))
            dp.send_msg(build_group_mod(dp, groups[d.group_id], modify=True))
        self.plans[dp.id] = replace(plan, groups=tuple(groups[g.group_id] for g in plan.groups))
        barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.send_msg(barrier)
        self._adaptive_pending[(dp.id, barrier.xid)] = (decisions, unix_ns())

    def _adaptive_barrier(self, msg: Any) -> bool:
        """A barrier reply: True when it confirmed an adaptive change (its events written)."""
        pending = self._adaptive_pending.pop((msg.datapath.id, msg.xid), None)
        if pending is None:
            return False
        decisions, sent_ns = pending
        now = unix_ns()
        reb = self.rebalancers.get(msg.datapath.id)
        name = self.plans[msg.datapath.id].name
        peers = port_peers(self.topology, name)
        for d in decisions:
            if reb is not None:
                reb.applied(d.group_id, now)
            self._event(AdaptiveMoved(
                switch=name[len(self.topology.run_id):], group=d.group_id,
                moves=[BucketMove(bucket=m.bucket_id, from_port=m.from_port, to_port=m.to_port,
                                  from_node=peers.get(m.from_port), to_node=peers.get(m.to_port),
                                  rate_bps=round(m.rate_bps)) for m in d.moves],
                loads_bps={str(p): round(v) for p, v in d.loads_bps.items()},
                seen_ns=d.seen_ns, decided_ns=d.decided_ns, sent_ns=sent_ns, barrier_ns=now,
                reaction_ms=round((now - d.seen_ns) / 1e6, 3),
                hot_since_ns=d.hot_since_ns, since_hot_ms=round((now - (d.hot_since_ns or d.seen_ns)) / 1e6, 3),
                time_ns=0))
        return True
