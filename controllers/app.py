"""Proactive L3 routing with load-balanced select groups on any Clos layout (OpenFlow 1.5).

``FabricRoutingApp`` finds its settings through the framework's configuration
(``self.CONF``, oslo.config; options registered here, group ``testbed``), which
the testbed writes as ``controller.conf`` into the run directory and passes
with ``--config-file`` (testbed.emulation.controller_proc)::

    [DEFAULT]
    ofp_listen_host = 127.0.0.1
    ofp_tcp_listen_port = 40123
    log_file = <run dir>/controller.log
    [testbed]
    settings_file = <run dir>/controller.settings.json

The settings file is a :class:`controllers.contract.ControllerSettings`, decoded
strictly (:func:`load_fabric`): the topology file, ready and events files,
load balancing, failure handling, the congestion loop's settings file.

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
reply carrying the target host's MAC); unknown addresses get no answer. With
tenant isolation (settings ``tenants``, :mod:`controllers.tenants`) a host's
ingress switch drops, with a counted flow, every packet to a host of another
tenant, and proxy ARP answers only for hosts the asker may reach.

Readiness: once every DPID of the topology has answered its barrier, the app
atomically writes the JSON file ``ready_file`` (:class:`controllers.contract.ControllerReady`)::

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

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from controllers import contract
from controllers.adaptive_app import AdaptiveMixin
from controllers.congestion.loop import start_when_configured, stop_all as stop_congestion_loops
from controllers.parent_watch import watch_parent
from controllers.lb import Hashing
from controllers.failover_app import FailoverMixin
from controllers.ofmsg import build_arp_reply, build_sync
from controllers.contract import ControllerReady, ControllerSettings, OpenFlowError
from controllers.ofplan import SwitchPlan, plan_fabric, proxy_arp_mac
from controllers.tenants import TenantFilter, filter_from_settings
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
    cfg.StrOpt("run-id", help="run id ('tb' + 4 hex digits); must match the settings' and the topology's run_id"),
]
OPTS = [
    cfg.StrOpt("settings-file", help="the app's settings, JSON (controllers.contract.ControllerSettings)"),
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


@dataclass(frozen=True)
class LoadedFabric:
    """The app's settings, the run's layout and the plan of every switch (dpid -> plan)."""

    settings: ControllerSettings
    layout: Layout
    plans: Dict[int, SwitchPlan]


def load_fabric(settings_file: Optional[str], run_id: Optional[str]) -> LoadedFabric:
    """Read the settings file, the layout it names, and plan every switch.

    Raises RuntimeError when ``settings_file`` is unset, controllers.contract.ContractError naming the
    field of a bad settings file, topology.model.TopologyError for a bad layout,
    topology.routing.RoutingError for an unreachable host, ValueError for an unknown policy, bad weights
    or a ``run_id`` (``--testbed-run-id``) other than the settings' or the layout's."""
    if not settings_file:
        raise RuntimeError(f"[{CONF_GROUP}] settings_file is not set in the controller's configuration; "
                           "it must name the run's controller.settings.json")
    settings = contract.read_json(settings_file, ControllerSettings)
    layout = load(settings.topology_file)
    for name, rid in (("settings", settings.run_id), ("--testbed-run-id", run_id)):
        if rid and rid != layout.run_id:
            raise ValueError(f"{settings.topology_file}: run_id: {layout.run_id!r} does not match {name} {rid!r}")
    lbs = settings.load_balance
    tenants = filter_from_settings(layout.run_id, settings.tenants)
    return LoadedFabric(settings, layout, plan_fabric(layout, lbs.policy, dict(lbs.weights), tenants=tenants,
                                                      hashing=lb_hashing(lbs)))


def lb_hashing(lbs: contract.LoadBalanceSettings) -> Hashing:
    """The select groups' hashing (controllers.lb.Hashing) of the settings' ``load_balance``."""
    return Hashing(lbs.hash_basis, lbs.selection_method)


#: settings file -> the fabric controllers.run loaded while validating, taken by the app (planned once)
_LOADED: Dict[str, LoadedFabric] = {}


def preload_fabric(settings_file: Optional[str], run_id: Optional[str]) -> LoadedFabric:
    """:func:`load_fabric`, kept for the app that starts next in this process (controllers.run)."""
    loaded = load_fabric(settings_file, run_id)
    _LOADED[str(settings_file)] = loaded
    return loaded


class FabricRoutingApp(AdaptiveMixin, FailoverMixin, BaseApp):
    """Proactive shortest-path routing on any layout, load-balanced select groups and proxy ARP (OF 1.5).

    Settings: ``self.CONF.testbed`` (:data:`OPTS`, :data:`CLI_OPTS`; module docstring). Raises at
    construction what :func:`load_fabric` raises.
    """

    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        conf = self.CONF[CONF_GROUP]
        loaded = _LOADED.pop(str(conf.settings_file), None) or load_fabric(conf.settings_file, conf.run_id)
        settings = self.settings = loaded.settings
        self.topology: Layout = loaded.layout
        self.lb_policy: str = settings.load_balance.policy
        self.lb_weights: Dict[str, int] = dict(settings.load_balance.weights)
        self.lb_hashing: Hashing = lb_hashing(settings.load_balance)
        self.plans: Dict[int, SwitchPlan] = loaded.plans
        # tenant isolation (controllers.tenants): drops in the plans, proxy ARP within the allowed pairs
        self.tenants: Optional[TenantFilter] = filter_from_settings(self.topology.run_id, settings.tenants)
        self.ready_file: str = settings.ready_file
        self.switches: Dict[int, _SwitchState] = {}
        self.errors: List[OpenFlowError] = []
        self._failover_init(settings)
        self._adaptive_init(settings)
        # ECN marking and PFC: a thread that starts once the testbed wrote its settings
        self.congestion_thread = start_when_configured(settings.loop_settings_file, self.topology)
        # a SIGKILLed testbed cannot stop us: exit when it is gone (controllers.parent_watch)
        watch_parent(on_orphan=stop_congestion_loops)
        LOG.info(
            "fabric app on %s: run %s, %d switches, %d hosts, load balancing %s, topology %s",
            FRAMEWORK, self.topology.run_id, len(self.plans), len(self.topology.hosts), self.lb_policy,
            settings.topology_file,
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
        error = OpenFlowError(
            dpid=dp.id, switch=plan.name if plan else None, xid=msg.xid,
            request=state.requests.get(msg.xid) if state else None, type=msg.type, code=msg.code,
            type_name=str(type_name), code_name=str(code_name), data_hex=data[:ERROR_DATA_KEEP_BYTES].hex(),
        )
        self.errors.append(error)
        LOG.error(
            "OFPT_ERROR from %s (dpid %s) for %s (xid %#x): %s %s",
            error.switch, _dpid_text(dp.id), error.request, msg.xid, type_name, code_name,
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
        mac = proxy_arp_mac(self.topology, dp.id, in_port, req.src_ip, req.dst_ip, self.tenants)
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

    def ready_report(self) -> ControllerReady:
        """The ready file's record (controllers.contract.ControllerReady)."""
        ready = sorted(d for d, s in self.switches.items() if s.ready)
        resync: Dict[str, int] = {}
        for d in ready:
            for k, v in self.switches[d].resync.items():
                resync[k] = resync.get(k, 0) + v
        return ControllerReady(dpids=ready, flows=sum(self.switches[d].flows for d in ready),
                               groups=sum(self.switches[d].groups for d in ready), errors=list(self.errors),
                               resync=resync)

    def _write_ready(self) -> None:
        report = self.ready_report()
        write_json(self.ready_file, contract.encode(report))
        LOG.info("wrote %s: %d switches, %d flows, %d groups, %d errors",
                 self.ready_file, len(report.dpids), report.flows, report.groups, len(report.errors))

