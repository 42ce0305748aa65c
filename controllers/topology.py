"""OpenFlow 1.5 plan of every switch, built from the shared topology model.

The testbed writes the run's topology file with :func:`topology.model.save`
(path in ``TESTBED_TOPOLOGY``); the controller reads it with
:func:`topology.model.load` and :func:`plan_fabric` turns the routes of
:func:`topology.routing.plan_routes` (equal-cost shortest paths on any
layout, networkx) into the exact rules and groups each switch needs.
Everything here is pure Python (no os-ken, no root), so the plan is unit
tested without a switch.

Plan of every switch (proactive L3, no flooding, no MAC learning):

* table-miss drop; LLDP dropped; ARP from host ports to the controller
  (proxy ARP);
* ``ipv4_dst=<host>`` (/32) routes; ``ipv4_dst`` in the switch's own subnet
  but no known host: drop (a packet never bounces back into the fabric);
* ``ipv4_dst=<switch subnet>`` routes toward the hosts of another switch;
* a route with one next hop outputs to that port; a route with several
  equal-cost next hops goes to the select group of that port set (one group
  per distinct set, group ids from 1).

Every ECMP group carries the Open vSwitch "NTR selection method" group property
(``selection_method=hash,fields(...)``) so the hash covers the UDP source
port, the RoCEv2 entropy field. Without it OVS hashes only L2/L3 and every
RoCEv2 flow between two hosts lands in one bucket.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from topology.model import Layout
from topology.routing import PortSet, SwitchRoutes, plan_routes

# --------------------------------------------------------------------------
# Constants: OpenFlow / OVS numbers used by the plan
# --------------------------------------------------------------------------

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC

#: Flow priorities (higher wins). Host /32 beats the local-subnet drop, which
#: beats the subnet routes.
PRIO_TABLE_MISS = 0
PRIO_SUBNET_ROUTE = 100
PRIO_LOCAL_SUBNET_DROP = 150
PRIO_HOST_ROUTE = 200
PRIO_ARP_TO_CONTROLLER = 300
PRIO_LLDP_DROP = 400

#: Bucket weight of every uplink (equal-cost). 100 leaves room for later
#: weighted policies (e.g. 50/150) without rescaling.
DEFAULT_BUCKET_WEIGHT = 100
#: Cookie on every flow this app installs ("tb" in ASCII), so its rules are
#: recognisable in ``ovs-ofctl dump-flows``.
FLOW_COOKIE = 0x7462

#: OpenFlow "controller" output max_len meaning "send the whole packet".
OFPCML_NO_BUFFER = 0xFFFF

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

# --------------------------------------------------------------------------
# Forwarding plan
# --------------------------------------------------------------------------

#: An action in a plan: ("output", port) | ("group", group_id) |
#: ("controller", max_len_bytes). An empty action tuple means drop.
Action = Tuple[str, int]
#: A match in a plan: os-ken ``OFPMatch`` keyword arguments in order; a masked
#: IPv4 value is an (address, netmask) tuple.
Match = Tuple[Tuple[str, Any], ...]


@dataclass(frozen=True)
class FlowPlan:
    """One flow entry for table 0."""

    priority: int
    match: Match
    actions: Tuple[Action, ...]
    purpose: str  # short label used in logs and error reports

    @property
    def is_drop(self) -> bool:
        return not self.actions


@dataclass(frozen=True)
class BucketPlan:
    """One select-group bucket: forward out ``port`` with relative ``weight``."""

    bucket_id: int
    port: int
    weight: int


@dataclass(frozen=True)
class GroupPlan:
    """A SELECT group hashing ``hash_fields`` (OXM names) over ``buckets``."""

    group_id: int
    buckets: Tuple[BucketPlan, ...]
    hash_fields: Tuple[str, ...]


@dataclass(frozen=True)
class SwitchPlan:
    """Everything one switch gets: groups first (flows reference them), then flows."""

    dpid: int
    name: str
    role: str
    groups: Tuple[GroupPlan, ...]
    flows: Tuple[FlowPlan, ...]


def _drop(priority: int, match: Match, purpose: str) -> FlowPlan:
    return FlowPlan(priority, match, (), purpose)


def _prefix_match(prefix: str) -> Tuple[str, str]:
    net = ipaddress.IPv4Network(prefix)
    return (str(net.network_address), str(net.netmask))


def _forward(routes: SwitchRoutes, ports: PortSet) -> Tuple[Action, ...]:
    """One output action for a single next hop, else the ECMP select group of the port set."""
    if len(ports) == 1:
        return (("output", ports[0]),)
    return (("group", routes.group_id(ports)),)


def plan_switch(layout: Layout, routes: SwitchRoutes) -> SwitchPlan:
    """Flows and groups of switch ``routes.switch`` from its routes (topology.routing).

    KeyError if the switch is not in ``layout``.
    """
    sw = layout.switch(routes.switch)
    subnet_owner = {s.subnet: s.name for s in layout.switches if s.subnet}
    flows = [
        _drop(PRIO_TABLE_MISS, (), "table-miss-drop"),
        _drop(PRIO_LLDP_DROP, (("eth_type", ETH_TYPE_LLDP),), "lldp-drop"),
    ]
    for host, port in layout.hosts_on(sw.name):
        flows.append(FlowPlan(
            PRIO_ARP_TO_CONTROLLER,
            (("in_port", port), ("eth_type", ETH_TYPE_ARP)),
            (("controller", OFPCML_NO_BUFFER),),
            f"arp-from-{host.name}",
        ))
    for r in routes.routes:
        if r.via == "host":
            host = layout.host_by_ip(r.prefix.split("/")[0])
            flows.append(FlowPlan(PRIO_HOST_ROUTE, (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", host.ip)),
                                  _forward(routes, r.ports), f"host-{host.name}"))
    if sw.subnet:
        flows.append(_drop(
            PRIO_LOCAL_SUBNET_DROP,
            (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", _prefix_match(sw.subnet))),
            "local-subnet-unknown-drop",
        ))
    for r in routes.routes:
        if r.via == "subnet":
            flows.append(FlowPlan(PRIO_SUBNET_ROUTE, (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", _prefix_match(r.prefix))),
                                  _forward(routes, r.ports), f"route-{subnet_owner[r.prefix]}"))
    groups = tuple(
        GroupPlan(routes.group_id(ports),
                  tuple(BucketPlan(i, port, DEFAULT_BUCKET_WEIGHT) for i, port in enumerate(ports)),
                  layout.ecmp_hash_fields)
        for ports in routes.ecmp_sets)
    return SwitchPlan(sw.dpid, sw.name, sw.role, groups, tuple(flows))


def plan_fabric(layout: Layout) -> Dict[int, SwitchPlan]:
    """Return {dpid: SwitchPlan} for every switch in ``layout``.

    Raises topology.routing.RoutingError if some switch cannot reach some host.
    """
    routes = plan_routes(layout)
    return {sw.dpid: plan_switch(layout, routes[sw.name]) for sw in layout.switches}


def proxy_arp_mac(layout: Layout, dpid: int, in_port: int, sender_ip: str, target_ip: str) -> Optional[str]:
    """MAC to answer an ARP request with, or None to stay silent.

    Answers for any host IP of the fabric asked from a host port of switch
    ``dpid``, except when the asker asks about its own address (gratuitous
    ARP, RFC 5227 probes/announcements): there a reply would read as an
    address conflict. Unknown targets and non-host ports get no reply.
    """
    sw = layout.switch_by_dpid(dpid)
    if sw is None:
        return None
    asker = next((h for h, port in layout.hosts_on(sw.name) if port == in_port), None)
    if asker is None or target_ip == asker.ip or target_ip == sender_ip:
        return None
    target = layout.host_by_ip(target_ip)
    return target.mac if target else None


# --------------------------------------------------------------------------
# Open vSwitch NTR selection-method group property
# --------------------------------------------------------------------------


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
