"""Topology file format for the controller, and the per-switch forwarding plan.

The testbed writes one JSON file per run (path in ``TESTBED_TOPOLOGY``) that
names every switch, host and leaf-spine link of a two-tier Clos (spine-leaf)
fabric. :func:`load_topology` validates it into a frozen :class:`TopologySpec`;
:func:`plan_fabric` turns that into the exact OpenFlow 1.5 rules and groups
each switch needs. Everything here is pure Python (no os-ken, no root), so the
plan is unit tested without a switch.

File format (all keys required, unknown keys rejected)::

    {"run_id": "tb12ab",
     "switches": [{"name": "tb12abl1", "dpid": 4097, "role": "leaf", "index": 1},
                  {"name": "tb12abs1", "dpid": 8193, "role": "spine", "index": 1}],
     "hosts": [{"name": "tb12abh1", "ip": "10.0.1.1", "mac": "02:00:00:00:01:01",
                "leaf": "tb12abl1", "port": 1}],
     "links": [{"leaf": "tb12abl1", "leaf_port": 3, "spine": "tb12abs1", "spine_port": 1}],
     "leaf_subnets": {"tb12abl1": "10.0.1.0/24"},
     "fabric_prefix": "10.0.0.0/16",
     "ecmp_hash_fields": ["ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst",
                          "tcp_src", "tcp_dst"]}

Routing plan (proactive L3, no flooding, no MAC learning):

* leaf: table-miss drop; LLDP dropped; ARP from host ports to the controller
  (proxy ARP); ``ipv4_dst=<local host>/32`` to the host port; ``ipv4_dst`` in
  the leaf's own subnet but no known host: drop (so a packet never bounces
  leaf -> spine -> leaf); any other ``ipv4_dst`` in the fabric prefix to the
  ECMP select group whose buckets are the spine uplinks.
* spine: table-miss drop; LLDP dropped; ``ipv4_dst=<leaf subnet>`` to the port
  facing that leaf.

The ECMP group carries the Open vSwitch "NTR selection method" group property
(``selection_method=hash,fields(...)``) so the hash covers the UDP source
port, the RoCEv2 entropy field. Without it OVS hashes only L2/L3 and every
RoCEv2 flow between two hosts lands in one bucket.
"""
from __future__ import annotations

import ipaddress
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple

# --------------------------------------------------------------------------
# Constants: OpenFlow / OVS numbers used by the plan
# --------------------------------------------------------------------------

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC

#: Flow priorities (higher wins). Host /32 beats the local-subnet drop, which
#: beats the fabric-prefix ECMP rule.
PRIO_TABLE_MISS = 0
PRIO_ECMP = 100
PRIO_SPINE_ROUTE = 100
PRIO_LOCAL_SUBNET_DROP = 150
PRIO_HOST_ROUTE = 200
PRIO_ARP_TO_CONTROLLER = 300
PRIO_LLDP_DROP = 400

#: Group id of the ECMP select group on every leaf.
ECMP_GROUP_ID = 1
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

RUN_ID_RE = re.compile(r"^tb[0-9a-f]{4}$")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
MAX_DPID = (1 << 64) - 1
#: OpenFlow 1.5 physical ports are 1..0xffffff00 (OFPP_MAX).
MAX_OF_PORT = 0xFFFFFF00


class TopologyError(ValueError):
    """The topology file is missing, not JSON, or violates the format.

    The message starts with the file name and the key path of the bad value,
    e.g. ``topo.json: hosts[2].leaf: 'tb12abl9' is not a leaf switch``.
    """


# --------------------------------------------------------------------------
# Topology model
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SwitchSpec:
    """One OpenFlow switch. ``dpid`` is the 64-bit datapath id (int)."""

    name: str
    dpid: int
    role: str  # "leaf" or "spine"
    index: int  # 1-based within its role


@dataclass(frozen=True)
class HostSpec:
    """One emulated host: IPv4 address (no prefix), MAC, and its leaf port."""

    name: str
    ip: str
    mac: str
    leaf: str
    port: int


@dataclass(frozen=True)
class LinkSpec:
    """One leaf-spine link with the OpenFlow port number on each end."""

    leaf: str
    leaf_port: int
    spine: str
    spine_port: int


@dataclass(frozen=True)
class TopologySpec:
    """Validated, immutable topology of one run (see module docstring)."""

    run_id: str
    switches: Tuple[SwitchSpec, ...]
    hosts: Tuple[HostSpec, ...]
    links: Tuple[LinkSpec, ...]
    leaf_subnets: Mapping[str, str]
    fabric_prefix: str
    ecmp_hash_fields: Tuple[str, ...]

    def switch(self, name: str) -> SwitchSpec:
        """Return the switch called ``name``; KeyError if there is none."""
        for sw in self.switches:
            if sw.name == name:
                return sw
        raise KeyError(name)

    def switch_by_dpid(self, dpid: int) -> Optional[SwitchSpec]:
        """Return the switch with datapath id ``dpid``, or None."""
        for sw in self.switches:
            if sw.dpid == dpid:
                return sw
        return None

    @property
    def leaves(self) -> Tuple[SwitchSpec, ...]:
        """Leaf switches ordered by index."""
        return tuple(sorted((s for s in self.switches if s.role == "leaf"), key=lambda s: s.index))

    @property
    def spines(self) -> Tuple[SwitchSpec, ...]:
        """Spine switches ordered by index."""
        return tuple(sorted((s for s in self.switches if s.role == "spine"), key=lambda s: s.index))

    @property
    def dpids(self) -> Tuple[int, ...]:
        """Datapath ids of all switches, ascending."""
        return tuple(sorted(s.dpid for s in self.switches))


_TOP_KEYS = ("run_id", "switches", "hosts", "links", "leaf_subnets", "fabric_prefix", "ecmp_hash_fields")
_SWITCH_KEYS = ("name", "dpid", "role", "index")
_HOST_KEYS = ("name", "ip", "mac", "leaf", "port")
_LINK_KEYS = ("leaf", "leaf_port", "spine", "spine_port")


def load_topology(path: "str | Path") -> TopologySpec:
    """Read and validate the topology JSON file at ``path``.

    Returns a :class:`TopologySpec`. Raises :class:`TopologyError` naming the
    file and the key path of the first problem (missing/unknown key, wrong
    type, bad address, dangling reference, duplicate port, missing link).
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TopologyError(f"{p}: cannot read topology file: {exc.strerror}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"{p}: not valid JSON: {exc}") from exc
    return parse_topology(raw, source=str(p))


def parse_topology(raw: Any, source: str = "topology") -> TopologySpec:
    """Validate an already-decoded topology document (see :func:`load_topology`)."""
    v = _Validator(source)
    v.keys(raw, "", _TOP_KEYS)

    run_id = v.string(raw["run_id"], "run_id")
    if not RUN_ID_RE.match(run_id):
        v.fail("run_id", f"{run_id!r} is not 'tb' followed by 4 lowercase hex digits")

    switches: List[SwitchSpec] = []
    for i, item in enumerate(v.seq(raw["switches"], "switches")):
        where = f"switches[{i}]"
        v.keys(item, where, _SWITCH_KEYS)
        name = v.string(item["name"], f"{where}.name")
        dpid = v.integer(item["dpid"], f"{where}.dpid", 1, MAX_DPID)
        role = v.string(item["role"], f"{where}.role")
        if role not in ("leaf", "spine"):
            v.fail(f"{where}.role", f"{role!r} is not 'leaf' or 'spine'")
        index = v.integer(item["index"], f"{where}.index", 1, 1 << 16)
        switches.append(SwitchSpec(name, dpid, role, index))
    v.unique([s.name for s in switches], "switches", "name")
    v.unique([s.dpid for s in switches], "switches", "dpid")
    v.unique([(s.role, s.index) for s in switches], "switches", "(role, index)")
    by_name = {s.name: s for s in switches}
    leaves = [s.name for s in switches if s.role == "leaf"]
    spines = [s.name for s in switches if s.role == "spine"]
    if not leaves:
        v.fail("switches", "no switch has role 'leaf'")
    if len(leaves) > 1 and not spines:
        v.fail("switches", f"{len(leaves)} leaves but no spine: the leaves could not reach each other")

    fabric = v.network(raw["fabric_prefix"], "fabric_prefix")

    subnets_raw = raw["leaf_subnets"]
    if not isinstance(subnets_raw, dict):
        v.fail("leaf_subnets", f"expected an object, got {type(subnets_raw).__name__}")
    subnets: Dict[str, ipaddress.IPv4Network] = {}
    for leaf, text in subnets_raw.items():
        where = f"leaf_subnets.{leaf}"
        if leaf not in leaves:
            v.fail(where, f"{leaf!r} is not a leaf switch")
        net = v.network(text, where)
        if not net.subnet_of(fabric):
            v.fail(where, f"{net} is not inside fabric_prefix {fabric}")
        for other, onet in subnets.items():
            if net.overlaps(onet):
                v.fail(where, f"{net} overlaps leaf_subnets.{other} ({onet})")
        subnets[leaf] = net
    for leaf in leaves:
        if leaf not in subnets:
            v.fail("leaf_subnets", f"missing subnet for leaf {leaf!r}")

    hosts: List[HostSpec] = []
    for i, item in enumerate(v.seq(raw["hosts"], "hosts")):
        where = f"hosts[{i}]"
        v.keys(item, where, _HOST_KEYS)
        name = v.string(item["name"], f"{where}.name")
        ip_text = v.string(item["ip"], f"{where}.ip")
        try:
            ip = ipaddress.IPv4Address(ip_text)
        except ValueError:
            v.fail(f"{where}.ip", f"{ip_text!r} is not an IPv4 address (no prefix length)")
        mac = v.string(item["mac"], f"{where}.mac").lower()
        if not MAC_RE.match(mac):
            v.fail(f"{where}.mac", f"{mac!r} is not a MAC address like 02:00:00:00:01:01")
        if int(mac[:2], 16) & 1:
            v.fail(f"{where}.mac", f"{mac!r} is a multicast MAC")
        leaf = v.string(item["leaf"], f"{where}.leaf")
        if leaf not in leaves:
            v.fail(f"{where}.leaf", f"{leaf!r} is not a leaf switch")
        if ip not in subnets[leaf]:
            v.fail(f"{where}.ip", f"{ip} is not inside leaf_subnets.{leaf} ({subnets[leaf]})")
        port = v.integer(item["port"], f"{where}.port", 1, MAX_OF_PORT)
        hosts.append(HostSpec(name, str(ip), mac, leaf, port))
    v.unique([h.name for h in hosts], "hosts", "name")
    v.unique([h.ip for h in hosts], "hosts", "ip")
    v.unique([h.mac for h in hosts], "hosts", "mac")
    clash = set(by_name) & {h.name for h in hosts}
    if clash:
        v.fail("hosts", f"name {sorted(clash)[0]!r} is also a switch name")

    links: List[LinkSpec] = []
    for i, item in enumerate(v.seq(raw["links"], "links")):
        where = f"links[{i}]"
        v.keys(item, where, _LINK_KEYS)
        leaf = v.string(item["leaf"], f"{where}.leaf")
        if leaf not in leaves:
            v.fail(f"{where}.leaf", f"{leaf!r} is not a leaf switch")
        spine = v.string(item["spine"], f"{where}.spine")
        if spine not in spines:
            v.fail(f"{where}.spine", f"{spine!r} is not a spine switch")
        leaf_port = v.integer(item["leaf_port"], f"{where}.leaf_port", 1, MAX_OF_PORT)
        spine_port = v.integer(item["spine_port"], f"{where}.spine_port", 1, MAX_OF_PORT)
        links.append(LinkSpec(leaf, leaf_port, spine, spine_port))

    # Port numbers are unique per switch across hosts and links.
    used: Dict[Tuple[str, int], str] = {}
    for i, h in enumerate(hosts):
        if (h.leaf, h.port) in used:
            v.fail(f"hosts[{i}].port", f"port {h.port} on {h.leaf} is already used by {used[(h.leaf, h.port)]}")
        used[(h.leaf, h.port)] = f"hosts[{i}]"
    for i, ln in enumerate(links):
        for sw, port, key in ((ln.leaf, ln.leaf_port, "leaf_port"), (ln.spine, ln.spine_port, "spine_port")):
            if (sw, port) in used:
                v.fail(f"links[{i}].{key}", f"port {port} on {sw} is already used by {used[(sw, port)]}")
            used[(sw, port)] = f"links[{i}]"
    # Full bipartite leaf-spine mesh, one link per pair: the ECMP group of a
    # leaf spreads over every spine, so every spine must reach every leaf.
    pairs = [(ln.leaf, ln.spine) for ln in links]
    v.unique(pairs, "links", "(leaf, spine) pair")
    for leaf in leaves:
        for spine in spines:
            if (leaf, spine) not in pairs:
                v.fail("links", f"no link between leaf {leaf!r} and spine {spine!r} (spine-leaf fabrics are a full mesh)")

    fields = [v.string(f, f"ecmp_hash_fields[{i}]") for i, f in enumerate(v.seq(raw["ecmp_hash_fields"], "ecmp_hash_fields"))]
    if not fields:
        v.fail("ecmp_hash_fields", "must name at least one field")
    for i, f in enumerate(fields):
        if f not in OXM_HASHABLE_FIELDS:
            v.fail(f"ecmp_hash_fields[{i}]", f"{f!r} is not one of {sorted(OXM_HASHABLE_FIELDS)}")
    v.unique(fields, "ecmp_hash_fields", "field")

    return TopologySpec(
        run_id=run_id,
        switches=tuple(switches),
        hosts=tuple(hosts),
        links=tuple(links),
        leaf_subnets={k: str(n) for k, n in subnets.items()},
        fabric_prefix=str(fabric),
        ecmp_hash_fields=tuple(fields),
    )


class _Validator:
    """Small helpers that raise TopologyError with the source and key path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, why: str) -> NoReturn:
        raise TopologyError(f"{self.source}: {where or '<top level>'}: {why}")

    def keys(self, obj: Any, where: str, expected: Sequence[str]) -> None:
        if not isinstance(obj, dict):
            self.fail(where, f"expected an object, got {type(obj).__name__}")
        prefix = f"{where}." if where else ""
        for k in expected:
            if k not in obj:
                self.fail(f"{prefix}{k}", "missing required key")
        for k in obj:
            if k not in expected:
                self.fail(f"{prefix}{k}", f"unknown key (expected only {', '.join(expected)})")

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(where, f"expected a non-empty string, got {value!r}")
        return value

    def integer(self, value: Any, where: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected an integer, got {value!r}")
        if not lo <= value <= hi:
            self.fail(where, f"{value} is outside {lo}..{hi}")
        return value

    def seq(self, value: Any, where: str) -> List[Any]:
        if not isinstance(value, list):
            self.fail(where, f"expected a list, got {type(value).__name__}")
        return value

    def network(self, value: Any, where: str) -> ipaddress.IPv4Network:
        text = self.string(value, where)
        try:
            return ipaddress.IPv4Network(text, strict=True)
        except ValueError as exc:
            self.fail(where, f"{text!r} is not an IPv4 prefix with host bits zero ({exc})")

    def unique(self, values: Sequence[Any], where: str, what: str) -> None:
        seen = set()
        for i, val in enumerate(values):
            if val in seen:
                self.fail(f"{where}[{i}]", f"duplicate {what} {val!r}")
            seen.add(val)


DEFAULT_HASH_FIELDS = ("ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst", "tcp_src", "tcp_dst")


def spine_leaf_document(run_id: str, n_spines: int, n_leaves: int, hosts_per_leaf: int) -> Dict[str, Any]:
    """Topology document (JSON-ready dict) following the testbed's conventions.

    Leaf i: name ``<run_id>l<i>``, dpid 0x1000+i, subnet 10.0.i.0/24; spine k:
    ``<run_id>s<k>``, dpid 0x2000+k. Host j on leaf i: ``<run_id>h<n>`` with
    n = (i-1)*hosts_per_leaf + j, IP 10.0.i.j, MAC 02:00:00:00:ii:jj (hex),
    leaf port j. Leaf uplink to spine k: port hosts_per_leaf+k; spine k's port
    to leaf i: i. Fabric prefix 10.0.0.0/16. Raises ValueError if a count is
    out of range (leaves and hosts per leaf 1..254, spines 0..254).
    """
    if not (1 <= n_leaves <= 254 and 1 <= hosts_per_leaf <= 254 and 0 <= n_spines <= 254):
        raise ValueError(f"counts out of range: spines={n_spines} leaves={n_leaves} hosts_per_leaf={hosts_per_leaf}")
    leaves = [f"{run_id}l{i}" for i in range(1, n_leaves + 1)]
    spines = [f"{run_id}s{k}" for k in range(1, n_spines + 1)]
    return {
        "run_id": run_id,
        "switches": [{"name": n, "dpid": 0x1000 + i, "role": "leaf", "index": i} for i, n in enumerate(leaves, 1)]
        + [{"name": n, "dpid": 0x2000 + k, "role": "spine", "index": k} for k, n in enumerate(spines, 1)],
        "hosts": [
            {"name": f"{run_id}h{(i - 1) * hosts_per_leaf + j}", "ip": f"10.0.{i}.{j}",
             "mac": f"02:00:00:00:{i:02x}:{j:02x}", "leaf": leaf, "port": j}
            for i, leaf in enumerate(leaves, 1) for j in range(1, hosts_per_leaf + 1)
        ],
        "links": [
            {"leaf": leaf, "leaf_port": hosts_per_leaf + k, "spine": spine, "spine_port": i}
            for i, leaf in enumerate(leaves, 1) for k, spine in enumerate(spines, 1)
        ],
        "leaf_subnets": {leaf: f"10.0.{i}.0/24" for i, leaf in enumerate(leaves, 1)},
        "fabric_prefix": "10.0.0.0/16",
        "ecmp_hash_fields": list(DEFAULT_HASH_FIELDS),
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


def plan_switch(topo: TopologySpec, name: str) -> SwitchPlan:
    """Return the flows and groups for switch ``name`` (KeyError if unknown)."""
    sw = topo.switch(name)
    common = [
        _drop(PRIO_TABLE_MISS, (), "table-miss-drop"),
        _drop(PRIO_LLDP_DROP, (("eth_type", ETH_TYPE_LLDP),), "lldp-drop"),
    ]
    if sw.role == "spine":
        flows = list(common)
        for ln in sorted((ln for ln in topo.links if ln.spine == name), key=lambda ln: topo.switch(ln.leaf).index):
            flows.append(FlowPlan(
                PRIO_SPINE_ROUTE,
                (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", _prefix_match(topo.leaf_subnets[ln.leaf]))),
                (("output", ln.spine_port),),
                f"route-{ln.leaf}",
            ))
        return SwitchPlan(sw.dpid, sw.name, sw.role, (), tuple(flows))

    hosts = sorted((h for h in topo.hosts if h.leaf == name), key=lambda h: h.port)
    uplinks = sorted((ln for ln in topo.links if ln.leaf == name), key=lambda ln: topo.switch(ln.spine).index)
    flows = list(common)
    for h in hosts:
        flows.append(FlowPlan(
            PRIO_ARP_TO_CONTROLLER,
            (("in_port", h.port), ("eth_type", ETH_TYPE_ARP)),
            (("controller", OFPCML_NO_BUFFER),),
            f"arp-from-{h.name}",
        ))
    for h in hosts:
        flows.append(FlowPlan(
            PRIO_HOST_ROUTE,
            (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", h.ip)),
            (("output", h.port),),
            f"host-{h.name}",
        ))
    flows.append(_drop(
        PRIO_LOCAL_SUBNET_DROP,
        (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", _prefix_match(topo.leaf_subnets[name]))),
        "local-subnet-unknown-drop",
    ))
    groups: Tuple[GroupPlan, ...] = ()
    if uplinks:
        groups = (GroupPlan(
            ECMP_GROUP_ID,
            tuple(BucketPlan(i, ln.leaf_port, DEFAULT_BUCKET_WEIGHT) for i, ln in enumerate(uplinks)),
            topo.ecmp_hash_fields,
        ),)
        flows.append(FlowPlan(
            PRIO_ECMP,
            (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", _prefix_match(topo.fabric_prefix))),
            (("group", ECMP_GROUP_ID),),
            "ecmp-uplinks",
        ))
    return SwitchPlan(sw.dpid, sw.name, sw.role, groups, tuple(flows))


def plan_fabric(topo: TopologySpec) -> Dict[int, SwitchPlan]:
    """Return {dpid: SwitchPlan} for every switch in ``topo``."""
    return {sw.dpid: plan_switch(topo, sw.name) for sw in topo.switches}


def proxy_arp_mac(topo: TopologySpec, leaf_dpid: int, in_port: int, sender_ip: str, target_ip: str) -> Optional[str]:
    """MAC to answer an ARP request with, or None to stay silent.

    Answers for any host IP of the fabric, except when the asker asks about
    its own address (gratuitous ARP, RFC 5227 probes/announcements): there
    a reply would read as an address conflict. Unknown targets get no reply.
    """
    sw = topo.switch_by_dpid(leaf_dpid)
    if sw is None or sw.role != "leaf":
        return None
    asker = next((h for h in topo.hosts if h.leaf == sw.name and h.port == in_port), None)
    if asker is None or target_ip == asker.ip or target_ip == sender_ip:
        return None
    target = next((h for h in topo.hosts if h.ip == target_ip), None)
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
