"""OpenFlow 1.5 messages from the plan (:mod:`controllers.ofplan`, :mod:`controllers.resync`).

Flow-mods, group-mods (SELECT, weighted buckets, the Open vSwitch
"NTR selection method" group property that makes OVS hash the fields the
load-balancing policy names, e.g. the UDP source port: the RoCEv2 entropy),
strict deletes, the sync sequence ending with a barrier, and the proxy-ARP
reply frame. Messages are built on a datapath (os-ken/Ryu ``Datapath`` or
``ofproto_protocol.ProtocolDesc``); the NTR property bytes are pure Python.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, Sequence, Tuple

from controllers.ofplan import FLOW_COOKIE, FlowPlan, GroupPlan
from controllers.resync import SeenFlow, SyncPlan
from controllers.ryu_api import arp, ether_types, ethernet, ofproto_v1_5_parser, packet

#: Open vSwitch experimenter id for group properties (lib/ofp-group.c,
#: include/openflow/nicira-ext.h ``NTR_VENDOR_ID``) and the property type
#: ``NTRT_SELECTION_METHOD``.
NTR_VENDOR_ID = 0x0000154D
NTRT_SELECTION_METHOD = 1
#: ``NTR_MAX_SELECTION_METHOD_LEN``: NUL-padded method-name field, bytes.
NTR_MAX_SELECTION_METHOD_LEN = 16
#: OpenFlow 1.5 group property type "experimenter".
OFPGPT_EXPERIMENTER = 0xFFFF
#: sizeof(struct ntr_group_prop_selection_method): type, length, experimenter,
#: exp_type, 4 pad, 16 name, 8 param. The OXM field array follows.
NTR_PROP_FIXED_BYTES = 40

#: OpenFlow basic OXM class and the fields the ECMP hash may use:
#: name -> (oxm_field, value length in bytes), OpenFlow 1.5.1 section 7.2.3.7.
OXM_CLASS_OPENFLOW_BASIC = 0x8000
OXM_HASHABLE_FIELDS: Dict[str, Tuple[int, int]] = {
    "eth_dst": (3, 6),
    "eth_src": (4, 6),
    "eth_type": (5, 2),
    "ip_proto": (10, 1),
    "ipv4_src": (11, 4),
    "ipv4_dst": (12, 4),
    "tcp_src": (13, 2),
    "tcp_dst": (14, 2),
    "udp_src": (15, 2),
    "udp_dst": (16, 2),
    "sctp_src": (17, 2),
    "sctp_dst": (18, 2),
    "ipv6_src": (26, 16),
    "ipv6_dst": (27, 16),
}


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
            # watch_port: Open vSwitch skips a bucket whose port is down at once (data-plane fast failover)
            properties=[parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=b.weight),
                        parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT, watch=b.port)],
        )
        for b in group.buckets
    ]
    prop = RawGroupProperty(ntr_selection_method_property(group.hash_fields, group.selection_method,
                                                          group.hash_basis))
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


def oxm_hash_field_tlv(name: str) -> bytes:
    """OXM TLV for one hash field, as OVS's ``oxm_put_field_array`` writes it.

    The TLV is the 4-byte OXM header (class 0x8000, field, hasmask=0, length)
    followed by a value of all-ones bytes: OVS reads each value as the mask of
    bits to hash (``oxm_pull_field_array`` in lib/nx-match.c), so a header
    without a value is NOT accepted. Raises KeyError for unknown names.
    """
    field, length = OXM_HASHABLE_FIELDS[name]
    header = (OXM_CLASS_OPENFLOW_BASIC << 16) | (field << 9) | length
    return struct.pack("!I", header) + b"\xff" * length


def ntr_selection_method_property(fields: Sequence[str], method: str = "hash", param: int = 0) -> bytes:
    """Bytes of the OVS group property ``selection_method=<method>,fields(...)``.

    Layout (``struct ntr_group_prop_selection_method``, lib/ofp-group.c
    ``parse_group_prop_ntr_selection_method``): type 0xffff (u16), length
    (u16, unpadded: 40 + OXM bytes), experimenter 0x0000154d (u32), exp_type 1
    (u32), 4 zero bytes, method name NUL-padded to 16 bytes, param (u64), then
    one OXM TLV per field (:func:`oxm_hash_field_tlv`), zero-padded to a
    multiple of 8 bytes. ``method`` is "hash" or "dp_hash" (OVS rejects
    others; dp_hash takes no fields). Raises ValueError on a bad method and
    KeyError on an unknown field.
    """
    if method not in ("hash", "dp_hash"):
        raise ValueError(f"selection method {method!r} is not 'hash' or 'dp_hash'")
    if method == "dp_hash" and fields:
        raise ValueError("OVS dp_hash selection method takes no fields")
    oxm = b"".join(oxm_hash_field_tlv(f) for f in fields)
    length = NTR_PROP_FIXED_BYTES + len(oxm)
    body = struct.pack(
        "!HHII4x16sQ", OFPGPT_EXPERIMENTER, length, NTR_VENDOR_ID, NTRT_SELECTION_METHOD,
        method.encode("ascii"), param,
    ) + oxm
    return body + b"\x00" * (-len(body) % 8)
