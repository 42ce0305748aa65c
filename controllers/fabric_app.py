"""Proactive L3 routing with hash-ECMP on any Clos layout (OpenFlow 1.5).

``FabricRoutingApp`` reads the run's topology file (path in the environment
variable ``TESTBED_TOPOLOGY``). When a switch of that topology connects, the
app reads what the switch already holds (flow-description and group-stats dumps),
then sends only the differences to the plan from
:func:`controllers.topology.plan_switch` (:mod:`controllers.resync`: planned
entries already in place are left alone, groups that exist are modified, not
re-added, entries the plan does not have are deleted) and a barrier. Nothing
is ever wiped, so a restarted controller (the bridges are fail-secure and
kept their flows) resyncs without dropping a packet or causing an OpenFlow
error. Nothing is ever flooded: hosts resolve every fabric address through
proxy ARP answered by this app (a packet-out ARP reply carrying the target
host's MAC); unknown addresses get no answer.

Readiness: once every DPID of the topology has answered its barrier, the app
atomically writes the JSON file named by ``TESTBED_READY_FILE``::

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

Works under os-ken (``python -m controllers.run``) and under ``ryu-manager``
(Ryu 4.34): ``PYTHONPATH=<repo> TESTBED_TOPOLOGY=... TESTBED_READY_FILE=...
ryu-manager --ofp-listen-host 127.0.0.1 controllers.fabric_app``.
"""
from __future__ import annotations

import json
import logging
import os
import struct
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from controllers.ryu_api import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    FRAMEWORK,
    MAIN_DISPATCHER,
    BaseApp,
    arp,
    ether_types,
    ethernet,
    ofp_event,
    ofproto_v1_5,
    ofproto_v1_5_parser,
    packet,
    set_ev_cls,
)
from controllers.resync import SeenFlow, SyncPlan, observed_actions, plan_sync
from controllers.topology import (
    FLOW_COOKIE,
    FlowPlan,
    GroupPlan,
    SwitchPlan,
    ntr_selection_method_property,
    plan_fabric,
    proxy_arp_mac,
)
from topology.model import Layout, load

LOG = logging.getLogger(__name__)

TOPOLOGY_ENV = "TESTBED_TOPOLOGY"
READY_FILE_ENV = "TESTBED_READY_FILE"
#: Bytes of the failed request that OFPT_ERROR echoes back kept in reports.
ERROR_DATA_KEEP_BYTES = 64


class RawGroupProperty(ofproto_v1_5_parser.OFPGroupPropExperimenter):
    """An experimenter group property sent byte-for-byte as given.

    os-ken's ``OFPGroupPropExperimenter`` carries its data as a list of
    32-bit words and derives the length field from it. The OVS NTR
    selection-method property has an unpadded length of 40 + the OXM field
    bytes (85 for the default 5-tuple + TCP ports), which is not a whole
    number of words, and OVS parses exactly ``length - 40`` bytes of OXM, so
    word-padding the data would corrupt the field list. ``raw`` must already
    be a complete property (header, body, padding to 8 bytes).
    """

    def __init__(self, raw: bytes):
        type_, length, experimenter, exp_type = struct.unpack_from("!HHII", raw, 0)
        if len(raw) % 8 or length > len(raw):
            raise ValueError(f"property length {length} / {len(raw)} bytes is not padded to 8")
        super().__init__(type_=type_, length=length, experimenter=experimenter, exp_type=exp_type, data=[])
        self.raw = bytes(raw)

    def serialize(self) -> bytearray:
        return bytearray(self.raw)


def build_flow_mod(datapath: Any, flow: FlowPlan) -> Any:
    """OFPFlowMod (add, table 0, cookie FLOW_COOKIE) for one planned flow."""
    ofp = datapath.ofproto
    parser = datapath.ofproto_parser
    actions = []
    for kind, arg in flow.actions:
        if kind == "output":
            actions.append(parser.OFPActionOutput(arg))
        elif kind == "group":
            actions.append(parser.OFPActionGroup(arg))
        elif kind == "controller":
            actions.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, arg))
        else:
            raise ValueError(f"unknown action {kind!r} in flow {flow.purpose}")
    instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    return parser.OFPFlowMod(
        datapath=datapath,
        cookie=FLOW_COOKIE,
        table_id=0,
        command=ofp.OFPFC_ADD,
        priority=flow.priority,
        buffer_id=ofp.OFP_NO_BUFFER,
        match=parser.OFPMatch(**dict(flow.match)),
        instructions=instructions,
    )


def build_group_mod(datapath: Any, group: GroupPlan, modify: bool = False) -> Any:
    """OFPGroupMod (add, or modify when ``modify``; SELECT) with one weighted
    bucket per uplink and the OVS ``selection_method=hash,fields(...)`` property."""
    ofp = datapath.ofproto
    parser = datapath.ofproto_parser
    buckets = [
        parser.OFPBucket(
            bucket_id=b.bucket_id,
            actions=[parser.OFPActionOutput(b.port)],
            properties=[parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=b.weight)],
        )
        for b in group.buckets
    ]
    prop = RawGroupProperty(ntr_selection_method_property(group.hash_fields))
    return parser.OFPGroupMod(
        datapath=datapath,
        command=ofp.OFPGC_MODIFY if modify else ofp.OFPGC_ADD,
        type_=ofp.OFPGT_SELECT,
        group_id=group.group_id,
        command_bucket_id=ofp.OFPG_BUCKET_ALL,
        buckets=buckets,
        properties=[prop],
    )


def build_flow_delete(datapath: Any, flow: SeenFlow) -> Any:
    """OFPFlowMod deleting exactly one seen entry (strict: table, priority and match)."""
    ofp = datapath.ofproto
    return datapath.ofproto_parser.OFPFlowMod(
        datapath=datapath,
        table_id=flow.table_id,
        command=ofp.OFPFC_DELETE_STRICT,
        priority=flow.priority,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=flow.match,
    )


def build_group_delete(datapath: Any, group_id: int) -> Any:
    ofp = datapath.ofproto
    return datapath.ofproto_parser.OFPGroupMod(
        datapath=datapath, command=ofp.OFPGC_DELETE, type_=ofp.OFPGT_ALL, group_id=group_id)


def build_sync(datapath: Any, sync: SyncPlan) -> List[Tuple[Any, str]]:
    """(message, label) pairs for one sync, in order (groups before the flows that use them,
    deletions last), ending with a barrier."""
    out: List[Tuple[Any, str]] = []
    out += [(build_group_mod(datapath, g), f"group-add-{g.group_id}") for g in sync.groups_add]
    out += [(build_group_mod(datapath, g, modify=True), f"group-modify-{g.group_id}") for g in sync.groups_modify]
    out += [(build_flow_mod(datapath, f), f"flow-{f.purpose}") for f in sync.flows_add]
    out += [(build_flow_delete(datapath, f), f"flow-delete-prio-{f.priority}") for f in sync.flows_delete]
    out += [(build_group_delete(datapath, g), f"group-delete-{g}") for g in sync.groups_delete]
    out.append((datapath.ofproto_parser.OFPBarrierRequest(datapath), "barrier"))
    return out


def build_arp_reply(requester_mac: str, requester_ip: str, target_mac: str, target_ip: str) -> bytes:
    """Ethernet+ARP reply frame telling ``requester`` that ``target_ip`` is at ``target_mac``."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=requester_mac, src=target_mac))
    pkt.add_protocol(arp.arp(
        opcode=arp.ARP_REPLY,
        src_mac=target_mac,
        src_ip=target_ip,
        dst_mac=requester_mac,
        dst_ip=requester_ip,
    ))
    pkt.serialize()
    return bytes(pkt.data)


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


class FabricRoutingApp(BaseApp):
    """Proactive shortest-path routing on any layout, hash-ECMP groups and proxy ARP (OF 1.5).

    Environment: ``TESTBED_TOPOLOGY`` (required, topology JSON path),
    ``TESTBED_READY_FILE`` (optional, where the readiness JSON goes).
    Raises RuntimeError at construction if ``TESTBED_TOPOLOGY`` is unset and
    :class:`topology.model.TopologyError` if the file is invalid
    (:class:`topology.routing.RoutingError` if a host is unreachable).
    """

    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        topo_path = os.environ.get(TOPOLOGY_ENV)
        if not topo_path:
            raise RuntimeError(f"{TOPOLOGY_ENV} is not set; it must name the run's topology JSON file")
        self.topology: Layout = load(topo_path)
        self.plans: Dict[int, SwitchPlan] = plan_fabric(self.topology)
        self.ready_file: Optional[str] = os.environ.get(READY_FILE_ENV) or None
        self.switches: Dict[int, _SwitchState] = {}
        self.errors: List[Dict[str, Any]] = []
        if self.ready_file is None:
            LOG.warning("%s is not set: readiness will only be logged", READY_FILE_ENV)
        LOG.info(
            "fabric app on %s: run %s, %d switches, %d hosts, topology %s",
            FRAMEWORK, self.topology.run_id, len(self.plans), len(self.topology.hosts), topo_path,
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
            return
        state.ready = True
        LOG.info("switch %s (dpid %s) installed", self.plans[dp.id].name, _dpid_text(dp.id))
        missing = [d for d in self.plans if not (d in self.switches and self.switches[d].ready)]
        if missing:
            LOG.info("waiting for %d switches: %s", len(missing), ", ".join(self.plans[d].name for d in missing))
        else:
            LOG.info("all %d switches installed", len(self.plans))
            self._write_ready()

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
        write_json_atomic(self.ready_file, report)
        LOG.info("wrote %s: %d switches, %d flows, %d groups, %d errors",
                 self.ready_file, len(report["dpids"]), report["flows"], report["groups"], len(report["errors"]))


def write_json_atomic(path: str, doc: Any) -> None:
    """Write ``doc`` as JSON to ``path`` via a temp file in the same directory
    and ``os.replace``, so readers never see a partial file. Raises OSError."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ready-", dir=directory)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
