"""The controller's failure handlers: port status, gray-failure polling, rerouting, the events file.

Mixed into :class:`controllers.app.FabricRoutingApp`. On a link going down
(OFPT_PORT_STATUS with OFPPS_LINK_DOWN, OFPPC_PORT_DOWN or a deleted port)
or a link condemned by the gray detector (:mod:`controllers.failover`), the
app plans every switch again on the layout without the dead links and
resyncs each connected switch (dump, send only the differences, barrier;
:mod:`controllers.resync`); a link coming back up is added back the same way.
Select-group buckets also watch their port, so Open vSwitch stops using a
dead uplink at once, before the controller's new routes arrive.

Events go, one JSON object per line, to the settings' ``events_file``
(``controller.events.jsonl`` in the run directory; records
:class:`controllers.contract.LinkDown`, ``LinkUp``, ``GraySuspected``,
``Unroutable``, ``Rerouted``); times are Unix-epoch ns on the run's one clock
(traffic.clock.unix_ns)::

    {"event": "link_down", "link": ["l1", "s1"], "cause": "port_status", "switch": "l1", "port": 3,
     "seq": 1, "lost_pkts": null, "tx_pkts": null, "loss": null, "window_ms": null, "time_ns": ...}
    {"event": "link_down", "link": ["l1", "s1"], "cause": "gray", "switch": "l1", "port": 3, "seq": 2,
     "lost_pkts": 12, "tx_pkts": 830, "loss": 0.0143, "window_ms": 1000.0, "time_ns": ...}
    {"event": "link_up", "link": ["l1", "s1"], "cause": "port_status", ...}
    {"event": "rerouted", "seq": 1, "dead_links": [["l1", "s1"]], "switches": 6, "time_ns": ...}

``rerouted`` is written when every connected switch answered the barrier
after its new flows and groups; its ``seq`` counts reroutes, and each
``link_*`` event carries the ``seq`` of the reroute it started.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, Optional

from controllers import contract
from controllers.contract import (ControllerSettings, GraySuspected, LinkDown, LinkUp, Rerouted, StatsPoll,
                                  Unroutable)
from controllers.failover import GrayDetector, LinkKey, LinkState, link_names
from controllers.ofplan import plan_fabric
from controllers.resync import flow_key, planned_key
from controllers.ryu_api import MAIN_DISPATCHER, hub, ofp_event, set_ev_cls
from topology.routing import RoutingError, without_links
from traffic.clock import unix_ns

LOG = logging.getLogger(__name__)


class FailoverMixin:
    """Handlers and state of failure handling; needs the app's topology, plans, switches and sync."""

    def _failover_init(self, settings: ControllerSettings) -> None:
        f = settings.failover
        self.links = LinkState(self.topology)
        self.events_file: str = settings.events_file
        self.stats_file: str = settings.stats_file
        self.reroute_seq = 0
        self._reroute_waiting: Optional[int] = None
        self.gray_detect = f.gray_detect
        self.gray = GrayDetector(self.topology, f.gray_loss_threshold, int(f.gray_window_ms * 1e6),
                                 f.gray_min_lost_pkts)
        self.stats_period_s = settings.stats_period_ms / 1e3
        self._poller = hub.spawn(self._poll_stats) if settings.stats_period_ms > 0 else None

    def _event(self, event: Any) -> None:
        """Append ``event`` (a controllers.contract event record, ``time_ns`` set now) to the events file."""
        line = contract.event_line(dataclasses.replace(event, time_ns=unix_ns()))
        LOG.warning("failover event: %s", line.rstrip())
        with open(self.events_file, "a") as fh:
            fh.write(line)

    # ------------------------------------------------------------ port status

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _on_port_status(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        desc = msg.desc
        down = (msg.reason == ofp.OFPPR_DELETE or bool(desc.state & ofp.OFPPS_LINK_DOWN)
                or bool(desc.config & ofp.OFPPC_PORT_DOWN))
        change = self.links.port_status(dp.id, desc.port_no, down)
        if change is None:
            return
        link, dead = change
        self._link_changed(link, dead, {"cause": "port_status", "switch": self.plans[dp.id].name[
            len(self.topology.run_id):], "port": desc.port_no, "lost_pkts": None, "tx_pkts": None, "loss": None,
            "window_ms": None})

    def _link_changed(self, link: LinkKey, dead: bool, detail: Dict[str, Any]) -> None:
        """``detail``: the fields of a controllers.contract.LinkChange besides link, seq and time."""
        self.gray.reset()
        self.reroute_seq += 1
        self._event((LinkDown if dead else LinkUp)(**detail, link=link_names(self.topology, link),
                                                   seq=self.reroute_seq, time_ns=0))
        self._reroute()

    def _reroute(self) -> None:
        """Plan on the layout without the dead links; resync every connected switch. When the dead links
        cut a host off, the routes stay as they are (an ``unroutable`` event says why)."""
        try:
            self.plans = plan_fabric(self.links.routing_layout(), self.lb_policy, self.lb_weights,
                                     tenants=self.tenants, hashing=self.lb_hashing)
        except RoutingError as e:
            self._event(Unroutable(seq=self.reroute_seq, error=str(e), time_ns=0))
            return
        self._reroute_waiting = self.reroute_seq
        self._adaptive_reset()  # fresh equal buckets in the new plans
        for dp in [s.datapath for s in self.switches.values()]:
            self._start_sync(dp)

    def _reroute_done_if_all_ready(self) -> None:
        """Called after each barrier reply: write ``rerouted`` once every switch is in sync again."""
        if self._reroute_waiting is None or not all(s.ready for s in self.switches.values()):
            return
        self._event(Rerouted(seq=self._reroute_waiting, switches=len(self.switches),
                             dead_links=[link_names(self.topology, k) for k in self.links.dead_links()], time_ns=0))
        self._reroute_waiting = None

    # ------------------------------------------------------------ gray failures

    def _poll_stats(self) -> None:
        while True:
            hub.sleep(self.stats_period_s)
            for state in list(self.switches.values()):
                if not state.ready:
                    continue
                dp = state.datapath
                parser, ofp = dp.ofproto_parser, dp.ofproto
                try:
                    dp.send_msg(parser.OFPGroupStatsRequest(dp, 0, ofp.OFPG_ALL))
                    # flow-desc, not flow-stats: OVS 3.1 refuses OF 1.5's OFPMP_FLOW_STATS (BAD_MULTIPART);
                    # the description carries the counters too
                    dp.send_msg(parser.OFPFlowDescStatsRequest(dp))
                    dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                except Exception as e:  # a switch that just went away; the next round goes on
                    LOG.info("stats request to dpid %#x failed: %s", dp.id, e)

    def _bucket_counts(self, msg: Any) -> None:
        """Group-stats replies outside a sync: frames each switch sent per bucket, summed per port."""
        plan = self.plans.get(msg.datapath.id)
        if plan is None:
            return
        port_of = {(g.group_id, b.bucket_id): b.port for g in plan.groups for b in g.buckets}
        counts: Dict[int, int] = {}
        for g in msg.body:
            for i, b in enumerate(g.bucket_stats):
                port = port_of.get((g.group_id, i))
                if port is not None:
                    counts[port] = counts.get(port, 0) + b.packet_count
        self.gray.forwarded(msg.datapath.id, "groups", counts)

    def _flow_counts(self, msg: Any) -> None:
        """Flow-desc replies outside a sync: frames each switch sent by flows with one output port, per port."""
        plan = self.plans.get(msg.datapath.id)
        if plan is None:
            return
        port_of = {planned_key(f): f.actions[0][1] for f in plan.flows
                   if len(f.actions) == 1 and f.actions[0][0] == "output"}
        counts: Dict[int, int] = {}
        for f in msg.body:
            port = port_of.get(flow_key(f.table_id, f.priority, f.match.items()))
            if port is not None:
                counts[port] = counts.get(port, 0) + int(f.stats.get("packet_count", 0))
        self.gray.forwarded(msg.datapath.id, "flows", counts)

    def _record_stats(self, dpid: int, t_ns: int, stats: Any) -> None:
        """Append one poll of a switch to the statistics file (controllers.contract.StatsPoll): the counters
        the detector saw, so that a run's detection can be replayed (tests/test_gray_replay.py)."""
        forwarded = {kind: {str(port): int(n) for port, n in counts.items()}
                     for kind, counts in self.gray.forwarded_counts(dpid).items()}
        poll = StatsPoll(dpid=dpid, time_ns=t_ns, ports=[list(s) for s in stats], forwarded=forwarded)
        with open(self.stats_file, "a") as fh:
            fh.write(contract.stats_line(poll))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _on_port_stats(self, ev: Any) -> None:
        msg = ev.msg
        if self._reroute_waiting is not None:
            return
        self._adaptive_ports(msg)  # controllers/adaptive_app.py
        if not self.gray_detect:
            return
        stats = [(s.port_no, s.rx_packets, s.tx_packets) for s in msg.body]
        t_ns = unix_ns()
        self._record_stats(msg.datapath.id, t_ns, stats)
        found = self.gray.port_stats(msg.datapath.id, t_ns, stats, skip=self.links.dead_links())
        if found is None:
            return
        detail = {"cause": "gray", "switch": found.switch[len(self.topology.run_id):], "port": found.port,
                  "lost_pkts": found.lost_pkts, "tx_pkts": found.tx_pkts, "loss": round(found.loss, 5),
                  "window_ms": found.window_ns / 1e6}
        try:
            plan_fabric(without_links(self.links.routing_layout(), [tuple(found.link)]), self.lb_policy,
                        self.lb_weights, tenants=self.tenants, hashing=self.lb_hashing)
        except RoutingError:  # the last path of some host: keep it, say so
            self._event(GraySuspected(**detail, link=link_names(self.topology, found.link), time_ns=0))
            return
        if not self.links.condemn(found.link):
            return
        self._link_changed(found.link, True, detail)
