"""Proactive L3 routing with load-balanced select groups on any Clos layout (OpenFlow 1.5).

``FabricRoutingApp`` reads its settings from the framework's configuration
(``self.CONF``, oslo.config; options registered here, group ``testbed``), which
the testbed writes as ``controller.conf`` into the run directory and passes
with ``--config-file`` (testbed.emulation.controller_proc)::

    [DEFAULT]
    ofp_listen_host = 127.0.0.1
    ofp_tcp_listen_port = 40123
    log_file = <run dir>/controller.log
    [testbed]
    run_id = tb12ab
    topology = <run dir>/topology.json
    ready_file = <run dir>/controller.ready
    lb_policy = ecmp
    events_file = <run dir>/controller.events.jsonl
    stats_period_ms = 100

When a switch of the topology connects, the app reads what the switch already
holds (flow-description and group-stats dumps), then sends only the
differences to the plan from :func:`controllers.ofplan.plan_fabric` (select
groups as the load-balancing policy ``lb_policy`` decides, :mod:`controllers.lb`;
:mod:`controllers.resync`: planned entries already in place are left alone,
groups that exist are modified, not re-added, entries the plan does not have
are deleted) and a barrier. Nothing is ever wiped, so a restarted controller
(the bridges are fail-secure and kept their flows) resyncs without dropping a
packet or causing an OpenFlow error. Nothing is ever flooded: hosts resolve
every fabric address through proxy ARP answered by this app (a packet-out ARP
reply carrying the target host's MAC); unknown addresses get no answer.

Readiness: once every DPID of the topology has answered its barrier, the app
atomically writes the JSON file ``ready_file``::

    {"dpids": [4097, 4098, 8193, 8194], "flows": 24, "groups": 2, "errors": [],
     "resync": {"flows_unchanged": 0, "flows_added": 24, "flows_replaced": 0, "flows_removed": 0,
                "groups_added": 2, "groups_modified": 0, "groups_removed": 0}}

``dpids`` are the switches whose install finished, ``flows``/``groups`` the
number of planned entries on them, ``resync`` what the last sync of each of
them changed (summed). Any ``OFPT_ERROR`` from a switch is logged and the
file is (re)written at once with the error in ``errors`` (a dict with dpid,
switch, xid, request, type, code, type_name, code_name, data_hex), so the
testbed fails fast instead of waiting for a timeout. Readers: non-empty
``errors`` means failure; otherwise the file only exists once every switch is
installed. A reconnecting switch is resynced and the file rewritten when it
is ready again.

Runs under os-ken (``python -m controllers.run --config-file controller.conf
--testbed-run-id tb12ab``) and under Ryu 4.34 (Python 3.9)::

    PYTHONPATH=<repo> ryu-manager --user-flags <repo>/controllers/flags.py \
        --config-file controller.conf --testbed-run-id tb12ab controllers.app
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from controllers import lb
from controllers.adaptive_app import AdaptiveMixin
from controllers.congestion.loop import start_when_configured
from controllers.failover_app import FailoverMixin
from controllers.ofmsg import build_arp_reply, build_sync
from controllers.ofplan import SwitchPlan, plan_fabric, proxy_arp_mac
from controllers.resync import SeenFlow, observed_actions, plan_sync
from controllers.ryu_api import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    FRAMEWORK,
    MAIN_DISPATCHER,
    BaseApp,
    arp,
    cfg,
    ethernet,
    ofp_event,
    ofproto_v1_5,
    packet,
    set_ev_cls,
)
from dataplane.atomic_files import write_json
from topology.model import Layout, load

LOG = logging.getLogger(__name__)

#: Bytes of the failed request that OFPT_ERROR echoes back kept in reports.
ERROR_DATA_KEEP_BYTES = 64

#: The configuration group of the testbed's settings (``[testbed]`` in controller.conf).
CONF_GROUP = "testbed"
#: Settings that are also command-line flags (``--testbed-run-id``): the run id stays visible in
#: the process's command line, where the testbed's cleanup finds it (controllers/flags.py).
CLI_OPTS = [
    cfg.StrOpt("run-id", help="run id ('tb' + 4 hex digits); must match the topology file's run_id"),
]
OPTS = [
    cfg.StrOpt("topology", help="the run's topology JSON (topology.model.save)"),
    cfg.StrOpt("ready-file", help="where the readiness JSON goes (unset: readiness is only logged)"),
    cfg.StrOpt("lb-policy", default=lb.DEFAULT_POLICY,
               help="load-balancing policy of the select groups, one of: " + ", ".join(lb.names())),
    cfg.ListOpt("lb-weights", default=[],
                help="next-hop switch name (without the run id) -> weight, for the weighted policies; "
                     "e.g. s1:1,s2:3"),
    cfg.StrOpt("events-file", help="failover events, JSON lines (controllers/failover_app.py); unset: logged only"),
    cfg.IntOpt("stats-period-ms", default=0, help="port/group statistics poll period of the gray-failure "
                                                   "detector, ms; 0: no polling (controllers/failover.py)"),
    cfg.FloatOpt("gray-loss-threshold", default=0.005, help="loss fraction above which a link is gray"),
    cfg.IntOpt("gray-window-ms", default=10000, help="longest window of the gray-failure detector, ms"),
    cfg.StrOpt("congestion-file", help="the congestion loop's JSON configuration, written by the testbed once the "
                                       "queues exist (controllers/congestion/loop.py); unset: no loop"),
    cfg.IntOpt("gray-min-lost-pkts", default=25, help="frames a switch must lose before a link is gray "
                                                      "(at least one egress buffer in full frames)"),
    cfg.BoolOpt("gray-detect", default=True, help="run the gray-failure detector on the polled counters"),
    cfg.FloatOpt("adaptive-hot-threshold", default=0.8, help="adaptive: port utilization (0..1] that triggers "
                                                             "a rebalance (controllers/lb/adaptive.py)"),
    cfg.IntOpt("adaptive-min-dwell-ms", default=500, help="adaptive: a group's freeze after a change, ms"),
]
cfg.CONF.register_opts(OPTS + CLI_OPTS, group=CONF_GROUP)


@dataclass
class _SwitchState:
    """Sync progress of one connected switch: read its tables, send the differences, barrier."""

    datapath: Any
    flows_xid: Optional[int] = None
    groups_xid: Optional[int] = None
    seen_flows: Optional[List[SeenFlow]] = None  # None until the dump is complete
    seen_groups: Optional[set] = None
    barrier_xid: Optional[int] = None
    ready: bool = False
    flows: int = 0
    groups: int = 0
    resync: Dict[str, int] = field(default_factory=dict)
    requests: Dict[int, str] = field(default_factory=dict)  # xid -> what it was
    _flow_parts: List[SeenFlow] = field(default_factory=list)
    _group_parts: set = field(default_factory=set)


def _dpid_text(dpid: int) -> str:
    return f"{dpid:#x}"


def lb_weights(raw: List[str]) -> Dict[str, int]:
    """``[testbed] lb_weights`` (a list ``s1:1,s2:3``) as {name: weight}; ValueError naming the entry."""
    out = {}
    for item in raw:
        name, _, text = item.partition(":")
        try:
            out[name.strip()] = int(text)
        except ValueError:
            raise ValueError(f"[{CONF_GROUP}] lb_weights: {item!r} is not <switch>:<whole number>") from None
    return out


class FabricRoutingApp(AdaptiveMixin, FailoverMixin, BaseApp):
    """Proactive shortest-path routing on any layout, load-balanced select groups and proxy ARP (OF 1.5).

    Settings: ``self.CONF.testbed`` (:data:`OPTS`, :data:`CLI_OPTS`; module docstring).
    Raises RuntimeError at construction if ``[testbed] topology`` is unset,
    :class:`topology.model.TopologyError` if the file is invalid,
    :class:`topology.routing.RoutingError` if a host is unreachable, and
    ValueError for a ``run_id`` other than the topology's or an unknown ``lb_policy``.
    """

    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        conf = self.CONF[CONF_GROUP]
        if not conf.topology:
            raise RuntimeError(f"[{CONF_GROUP}] topology is not set in the controller's configuration; "
                               "it must name the run's topology JSON file")
        self.topology: Layout = load(conf.topology)
        if conf.run_id and conf.run_id != self.topology.run_id:
            raise ValueError(f"{conf.topology}: run_id: {self.topology.run_id!r} does not match "
                             f"[{CONF_GROUP}] run_id {conf.run_id!r}")
        self.lb_policy: str = conf.lb_policy
        self.lb_weights: Dict[str, int] = lb_weights(conf.lb_weights)
        self.plans: Dict[int, SwitchPlan] = plan_fabric(self.topology, self.lb_policy, self.lb_weights)
        self.ready_file: Optional[str] = conf.ready_file or None
        self.switches: Dict[int, _SwitchState] = {}
        self.errors: List[Dict[str, Any]] = []
        self._failover_init(conf)
        self._adaptive_init(conf)
        # ECN marking and PFC: a thread that starts once the testbed wrote its configuration
        self.congestion_thread = start_when_configured(conf.congestion_file, self.topology)
        if self.ready_file is None:
            LOG.warning("[%s] ready_file is not set: readiness will only be logged", CONF_GROUP)
        LOG.info(
            "fabric app on %s: run %s, %d switches, %d hosts, load balancing %s, topology %s",
            FRAMEWORK, self.topology.run_id, len(self.plans), len(self.topology.hosts), self.lb_policy,
            conf.topology,
        )

    # ---------------------------------------------------------------- install

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_switch_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        plan = self.plans.get(dp.id)
        if plan is None:
            LOG.warning("switch dpid %s is not in the topology; leaving it untouched", _dpid_text(dp.id))
            return
        if dp.id in self.switches:
            LOG.info("switch %s (dpid %s) reconnected: resyncing", plan.name, _dpid_text(dp.id))
        self._start_sync(dp)

    def _start_sync(self, dp: Any) -> None:
        """Read the switch's tables; the replies lead to the differences and a barrier (_sync_if_read)."""
        state = _SwitchState(datapath=dp)
        self.switches[dp.id] = state
        parser = dp.ofproto_parser
        flows_req = parser.OFPFlowDescStatsRequest(dp)
        self._send(state, flows_req, "flow-desc-dump")
        state.flows_xid = flows_req.xid
        # group stats, not group desc: os-ken 4.x fails to parse OVS's group-desc buckets
        # (weight property), and only the ids are needed
        groups_req = parser.OFPGroupStatsRequest(dp)
        self._send(state, groups_req, "group-stats-dump")
        state.groups_xid = groups_req.xid

    def _send(self, state: _SwitchState, msg: Any, what: str) -> None:
        state.datapath.send_msg(msg)
        state.requests[msg.xid] = what

    def _current(self, msg: Any) -> Optional[_SwitchState]:
        """The sync state ``msg`` (a reply) belongs to, or None for an old connection."""
        state = self.switches.get(msg.datapath.id)
        return state if state is not None and state.datapath is msg.datapath else None

    @set_ev_cls(ofp_event.EventOFPFlowDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_flow_desc(self, ev: Any) -> None:
        msg = ev.msg
        state = self._current(msg)
        if state is None or msg.xid != state.flows_xid or state.seen_flows is not None:
            self._flow_counts(msg)  # a gray-detector poll (controllers/failover_app.py)
            return
        state._flow_parts += [SeenFlow(f.table_id, f.priority, f.cookie, f.match, observed_actions(f.instructions))
                              for f in msg.body]
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            state.seen_flows = state._flow_parts
            self._sync_if_read(state)

    @set_ev_cls(ofp_event.EventOFPGroupStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_group_stats(self, ev: Any) -> None:
        msg = ev.msg
        state = self._current(msg)
        if state is None or msg.xid != state.groups_xid or state.seen_groups is not None:
            self._bucket_counts(msg)  # a gray-detector poll (controllers/failover_app.py)
            self._adaptive_buckets(msg)  # and the adaptive policy's (controllers/adaptive_app.py)
            return
        state._group_parts |= {g.group_id for g in msg.body}
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            state.seen_groups = state._group_parts
            self._sync_if_read(state)

    def _sync_if_read(self, state: _SwitchState) -> None:
        if state.seen_flows is None or state.seen_groups is None:
            return
        dp = state.datapath
        plan = self.plans[dp.id]
        sync = plan_sync(plan, state.seen_flows, state.seen_groups)
        for msg, what in build_sync(dp, sync):
            self._send(state, msg, what)
        state.barrier_xid = msg.xid
        state.flows = len(plan.flows)
        state.groups = len(plan.groups)
        state.resync = sync.counts
        LOG.info(
            "switch %s (dpid %s, %s): found %d flows, %d groups; %s; barrier xid %#x",
            plan.name, _dpid_text(dp.id), plan.role, len(state.seen_flows), len(state.seen_groups),
            ", ".join(f"{k} {v}" for k, v in sync.counts.items()), state.barrier_xid,
        )

    # The reply can arrive before os-ken's ofp_handler moves the datapath to
    # MAIN (it waits for its own port-desc reply), hence both dispatchers.
    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_barrier_reply(self, ev: Any) -> None:
        dp = ev.msg.datapath
        state = self._current(ev.msg)
        if state is None or ev.msg.xid != state.barrier_xid:
            self._adaptive_barrier(ev.msg)
            return
        state.ready = True
        LOG.info("switch %s (dpid %s) installed", self.plans[dp.id].name, _dpid_text(dp.id))
        missing = [d for d in self.plans if not (d in self.switches and self.switches[d].ready)]
        if missing:
            LOG.info("waiting for %d switches: %s", len(missing), ", ".join(self.plans[d].name for d in missing))
        else:
            LOG.info("all %d switches installed", len(self.plans))
            self._write_ready()
            self._reroute_done_if_all_ready()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        state = self.switches.get(dp.id)
        plan = self.plans.get(dp.id)
        try:
            type_name = ofp.ofp_error_type_to_str(msg.type)
            code_name = ofp.ofp_error_code_to_str(msg.type, msg.code)
        except (AttributeError, KeyError):
            type_name, code_name = str(msg.type), str(msg.code)
        data = bytes(msg.data or b"")
        error = {
            "dpid": dp.id,
            "switch": plan.name if plan else None,
            "xid": msg.xid,
            "request": state.requests.get(msg.xid) if state else None,
            "type": msg.type,
            "code": msg.code,
            "type_name": type_name,
            "code_name": code_name,
            "data_hex": data[:ERROR_DATA_KEEP_BYTES].hex(),
        }
        self.errors.append(error)
        LOG.error(
            "OFPT_ERROR from %s (dpid %s) for %s (xid %#x): %s %s",
            error["switch"], _dpid_text(dp.id), error["request"], msg.xid, type_name, code_name,
        )
        self._write_ready()

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _on_state_change(self, ev: Any) -> None:
        dp = ev.datapath
        if ev.state != DEAD_DISPATCHER or dp.id is None:
            return
        state = self.switches.get(dp.id)
        name = self.plans[dp.id].name if dp.id in self.plans else "?"
        if state is not None and state.datapath is dp:
            del self.switches[dp.id]
            LOG.warning("switch %s (dpid %s) disconnected", name, _dpid_text(dp.id))
        else:
            LOG.info("old connection of switch %s (dpid %s) closed", name, _dpid_text(dp.id))

    # -------------------------------------------------------------- proxy ARP

    @set_ev_cls(ofp_event.EventOFPPacketIn, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_packet_in(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        in_port = msg.match.get("in_port")
        pkt = packet.Packet(msg.data)
        eth = pkt.get_protocol(ethernet.ethernet)
        req = pkt.get_protocol(arp.arp)
        if eth is None or req is None or in_port is None:
            LOG.debug("ignoring non-ARP packet-in from dpid %s port %s", _dpid_text(dp.id), in_port)
            return
        if req.opcode != arp.ARP_REQUEST:
            return
        mac = proxy_arp_mac(self.topology, dp.id, in_port, req.src_ip, req.dst_ip)
        if mac is None:
            LOG.debug("no ARP reply for %s asked by %s on dpid %s port %d",
                      req.dst_ip, req.src_ip, _dpid_text(dp.id), in_port)
            return
        ofp = dp.ofproto
        parser = dp.ofproto_parser
        frame = build_arp_reply(eth.src, req.src_ip, mac, req.dst_ip)
        dp.send_msg(parser.OFPPacketOut(
            datapath=dp,
            buffer_id=ofp.OFP_NO_BUFFER,
            match=parser.OFPMatch(in_port=ofp.OFPP_CONTROLLER),
            actions=[parser.OFPActionOutput(in_port)],
            data=frame,
        ))
        LOG.debug("proxy ARP: %s is-at %s -> %s (dpid %s port %d)",
                  req.dst_ip, mac, req.src_ip, _dpid_text(dp.id), in_port)

    # -------------------------------------------------------------- readiness

    def ready_report(self) -> Dict[str, Any]:
        """The readiness document: {"dpids", "flows", "groups", "errors", "resync"}."""
        ready = sorted(d for d, s in self.switches.items() if s.ready)
        resync: Dict[str, int] = {}
        for d in ready:
            for k, v in self.switches[d].resync.items():
                resync[k] = resync.get(k, 0) + v
        return {
            "dpids": ready,
            "flows": sum(self.switches[d].flows for d in ready),
            "groups": sum(self.switches[d].groups for d in ready),
            "errors": list(self.errors),
            "resync": resync,
        }

    def _write_ready(self) -> None:
        report = self.ready_report()
        if self.ready_file is None:
            LOG.info("ready: %s", json.dumps(report))
            return
        write_json(self.ready_file, report)
        LOG.info("wrote %s: %d switches, %d flows, %d groups, %d errors",
                 self.ready_file, len(report["dpids"]), report["flows"], report["groups"], len(report["errors"]))
