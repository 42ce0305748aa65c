"""One topology model for the testbed and the controller: nodes, ports, links.

Pure data (no Mininet, no os-ken, no third-party imports; Python >= 3.9). The
run builds a :class:`Layout` with a builder (:mod:`topology.spine_leaf`),
writes it with :func:`save` and the controller reads it back with
:func:`load`: the same code on both sides, one validator.

File format (JSON object; every key required, unknown keys rejected)::

    {"run_id": "tb12ab", "kind": "spine_leaf",
     "fabric_prefix": "10.0.0.0/16",
     "ecmp_hash_fields": ["ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst", "tcp_src", "tcp_dst"],
     "switches": [{"name": "tb12abl1", "dpid": 4097, "role": "leaf", "index": 1, "subnet": "10.0.1.0/24"},
                  {"name": "tb12abs1", "dpid": 8193, "role": "spine", "index": 1, "subnet": null}],
     "hosts": [{"name": "tb12abh1", "rank": 0, "ip": "10.0.1.1", "mac": "02:00:00:00:01:01"}],
     "links": [{"a": "tb12abh1", "a_port": 0, "b": "tb12abl1", "b_port": 1,
                "rate_bps": 10000000.0, "buffer_bytes": 100000, "plane": 0}],   # optional "delay_us": 20000
     "nics": [{"host": "tb12abh1", "port": 1, "ip": "10.1.1.1", "mac": "02:01:00:00:01:01",
               "plane": 1, "prefix": "10.1.0.0/16"}]}          # optional: host interfaces beyond eth0

Ports are OpenFlow port numbers on switches (1..0xffffff00) and interface
indexes on hosts (``<host>-eth<port>``). A switch ``subnet`` says every host
attached to that switch has its address inside it (routes can then be
aggregated per subnet); ``null`` means no host subnet. Links are full duplex;
``rate_bps`` and ``buffer_bytes`` apply to each direction's egress queue;
``plane`` numbers independent network planes (0 when there is one). A link's optional
``delay_us`` is its own one-way propagation delay in microseconds (each direction; e.g. a
long-haul link between sites, topology.dci); without it the link has the fabric's default
(``fabric.link_delay_us``, :meth:`Link.delay_or`).
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from topology.validator import TopologyError, Validator  # noqa: F401  (TopologyError: model's error)

RUN_ID_RE = re.compile(r"^tb[0-9a-f]{4}$")
#: characters of a run id (the prefix of every node name of a run)
RUN_ID_CHARS = 6
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
MAX_DPID = (1 << 64) - 1
#: OpenFlow 1.5 physical ports are 1..0xffffff00 (OFPP_MAX).
MAX_OF_PORT = 0xFFFFFF00
#: Packet header fields a load balancer may hash on (OpenFlow 1.5 OXM names).
HASH_FIELD_NAMES = ("eth_dst", "eth_src", "eth_type", "ip_proto", "ipv4_src", "ipv4_dst", "tcp_src",
                    "tcp_dst", "udp_src", "udp_dst", "sctp_src", "sctp_dst", "ipv6_src", "ipv6_dst")
#: The 5-tuple incl. UDP ports (the RoCEv2 entropy field) and TCP ports.
DEFAULT_HASH_FIELDS = ("ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst", "tcp_src", "tcp_dst")


@dataclass(frozen=True)
class Switch:
    """An OpenFlow switch: 64-bit datapath id, role label, 1-based index in its role."""

    name: str
    dpid: int
    role: str
    index: int
    subnet: Optional[str] = None  # IPv4 prefix holding every attached host's address, or None


@dataclass(frozen=True)
class Host:
    """An emulated host: job rank (0-based), IPv4 address (no prefix length), MAC."""

    name: str
    rank: int
    ip: str
    mac: str

    @property
    def intf(self) -> str:
        """Name of the host's first interface (``<name>-eth0``)."""
        return f"{self.name}-eth0"


Node = Union[Switch, Host]


@dataclass(frozen=True)
class Port:
    """One end of a link: node name and port number on that node."""

    node: str
    number: int

    @property
    def intf(self) -> str:
        """Interface name as Mininet makes it: ``<node>-eth<number>``."""
        return f"{self.node}-eth{self.number}"


@dataclass(frozen=True)
class Link:
    """A full-duplex link between ports ``a`` and ``b``; rate, buffer and delay per direction.

    ``delay_us``: the link's own one-way propagation delay in microseconds, or None for the
    fabric's default (``fabric.link_delay_us``; :meth:`delay_or`)."""

    a: Port
    b: Port
    rate_bps: float
    buffer_bytes: int
    plane: int = 0
    delay_us: Optional[int] = None

    def delay_or(self, default_us: int) -> int:
        """One-way propagation delay of this link in microseconds: its own ``delay_us``, else
        ``default_us`` (the fabric's ``link_delay_us``)."""
        return default_us if self.delay_us is None else self.delay_us

    def peer(self, node: str) -> Port:
        """The far end as seen from ``node``; ValueError if ``node`` is not on this link."""
        if self.a.node == node:
            return self.b
        if self.b.node == node:
            return self.a
        raise ValueError(f"{node!r} is not an end of link {self.a.intf} <-> {self.b.intf}")


@dataclass(frozen=True)
class Nic:
    """A host interface beyond eth0 (``<host>-eth<port>``): its address ``ip`` inside ``prefix`` (the
    addresses reachable on that interface, an IPv4 CIDR), MAC and plane (topology.planes: one per
    scale-out plane of a dual-plane fabric, SCALE_UP_PLANE for a server's scale-up domain)."""

    host: str
    port: int
    ip: str
    mac: str
    plane: int
    prefix: str

    @property
    def intf(self) -> str:
        """Interface name as Mininet makes it: ``<host>-eth<port>``."""
        return f"{self.host}-eth{self.port}"


#: plane number of the links of a server's scale-up domain (NVLink-like switch; topology.scale_up)
SCALE_UP_PLANE = 255


@dataclass(frozen=True)
class Layout:
    """Validated, immutable topology of one run (see the module docstring)."""

    run_id: str
    kind: str
    fabric_prefix: str
    ecmp_hash_fields: Tuple[str, ...]
    switches: Tuple[Switch, ...]
    hosts: Tuple[Host, ...]  # in rank order: hosts[r].rank == r
    links: Tuple[Link, ...]
    #: host interfaces beyond eth0 (planes 1.., scale-up), by host then port
    nics: Tuple[Nic, ...] = ()
    _nodes: Dict[str, Node] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        nodes: Dict[str, Node] = {s.name: s for s in self.switches}
        nodes.update((h.name, h) for h in self.hosts)
        object.__setattr__(self, "_nodes", nodes)

    def node(self, name: str) -> Node:
        """The switch or host called ``name``; KeyError if there is none."""
        return self._nodes[name]

    def switch(self, name: str) -> Switch:
        """The switch called ``name``; KeyError if there is none (or it is a host)."""
        node = self._nodes[name]
        if not isinstance(node, Switch):
            raise KeyError(name)
        return node

    def switch_by_dpid(self, dpid: int) -> Optional[Switch]:
        """The switch with datapath id ``dpid``, or None."""
        return next((s for s in self.switches if s.dpid == dpid), None)

    def host_by_ip(self, ip: str) -> Optional[Host]:
        """The host with IPv4 address ``ip``, or None."""
        return next((h for h in self.hosts if h.ip == ip), None)

    def links_of(self, node: str) -> Tuple[Link, ...]:
        """Every link with an end on ``node``, in file order."""
        return tuple(ln for ln in self.links if node in (ln.a.node, ln.b.node))

    def attachment(self, host: str) -> Port:
        """The switch port facing ``host``'s first link (validated to exist)."""
        return self.links_of(host)[0].peer(host)

    def hosts_on(self, switch: str) -> Tuple[Tuple[Host, int], ...]:
        """(host, switch port) for every host link on ``switch``, by port number."""
        found = []
        for ln in self.links_of(switch):
            far = ln.peer(switch)
            node = self._nodes[far.node]
            if isinstance(node, Host):
                found.append((node, ln.peer(far.node).number))
        return tuple(sorted(found, key=lambda hp: hp[1]))

    def nics_of(self, host: str) -> Tuple[Nic, ...]:
        """The interfaces of ``host`` beyond eth0, by port."""
        return tuple(n for n in self.nics if n.host == host)

    def plane_ips(self, host: str) -> Tuple[str, ...]:
        """``host``'s address in each scale-out plane, plane 0 (eth0) first."""
        extra = sorted((n.plane, n.ip) for n in self.nics_of(host) if n.plane != SCALE_UP_PLANE)
        return (self.node(host).ip,) + tuple(ip for _, ip in extra)

    def scale_up_nic(self, host: str) -> Optional[Nic]:
        """``host``'s interface in its server's scale-up domain, or None."""
        return next((n for n in self.nics_of(host) if n.plane == SCALE_UP_PLANE), None)

    def servers(self) -> Tuple[Tuple[Host, ...], ...]:
        """The hosts (GPUs) of each server, in rank order: one tuple per scale-up switch (role
        "scaleup"; topology.scale_up), or one host per server when the layout has no scale-up domain."""
        ups = [s for s in self.switches if s.role == "scaleup"]
        if not ups:
            return tuple((h,) for h in self.hosts)
        return tuple(tuple(sorted((h for h, _ in self.hosts_on(s.name)), key=lambda h: h.rank)) for s in ups)

    @property
    def dpids(self) -> Tuple[int, ...]:
        """Datapath ids of all switches, ascending."""
        return tuple(sorted(s.dpid for s in self.switches))


# --------------------------------------------------------------------------- JSON


def to_dict(layout: Layout) -> Dict[str, Any]:
    """The JSON-ready document of ``layout`` (format: module docstring)."""
    return {
        "run_id": layout.run_id,
        "kind": layout.kind,
        "fabric_prefix": layout.fabric_prefix,
        "ecmp_hash_fields": list(layout.ecmp_hash_fields),
        "switches": [{"name": s.name, "dpid": s.dpid, "role": s.role, "index": s.index, "subnet": s.subnet}
                     for s in layout.switches],
        "hosts": [{"name": h.name, "rank": h.rank, "ip": h.ip, "mac": h.mac} for h in layout.hosts],
        "links": [{"a": ln.a.node, "a_port": ln.a.number, "b": ln.b.node, "b_port": ln.b.number,
                   "rate_bps": ln.rate_bps, "buffer_bytes": ln.buffer_bytes, "plane": ln.plane,
                   **({} if ln.delay_us is None else {"delay_us": ln.delay_us})}
                  for ln in layout.links],
        **({"nics": [{"host": n.host, "port": n.port, "ip": n.ip, "mac": n.mac, "plane": n.plane,
                      "prefix": n.prefix} for n in layout.nics]} if layout.nics else {}),
    }


def to_json(layout: Layout) -> str:
    """``layout`` as JSON text (see :func:`to_dict`)."""
    return json.dumps(to_dict(layout), indent=1)


def from_json(text: str, source: str = "topology") -> Layout:
    """Parse and validate JSON text; TopologyError naming ``source`` and the key path."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"{source}: not valid JSON: {exc}") from exc
    return from_dict(raw, source)


def save(layout: Layout, path: Union[str, Path]) -> None:
    """Write ``layout`` to ``path`` as JSON."""
    Path(path).write_text(to_json(layout))


def load(path: Union[str, Path]) -> Layout:
    """Read and validate the topology file at ``path``; TopologyError on any problem."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TopologyError(f"{p}: cannot read topology file: {exc.strerror}") from exc
    return from_json(text, str(p))


_TOP_KEYS = ("run_id", "kind", "fabric_prefix", "ecmp_hash_fields", "switches", "hosts", "links")
_SWITCH_KEYS = ("name", "dpid", "role", "index", "subnet")
_HOST_KEYS = ("name", "rank", "ip", "mac")
_LINK_KEYS = ("a", "a_port", "b", "b_port", "rate_bps", "buffer_bytes", "plane")
#: most one-way delay a link may carry, us: 1 s (netem's delay; larger delays need larger buffers than we allow)
MAX_LINK_DELAY_US = 1_000_000
_NIC_KEYS = ("host", "port", "ip", "mac", "plane", "prefix")


def from_dict(raw: Any, source: str = "topology") -> Layout:
    """Validate a decoded topology document into a :class:`Layout`.

    Raises TopologyError with ``source`` and the key path of the first problem:
    missing or unknown key, wrong type, bad address, duplicate name, dpid,
    address or port, a link to an unknown node, a host with no link, or a
    host address outside its switch's subnet.
    """
    v = Validator(source)
    v.keys(raw, "", _TOP_KEYS + (("nics",) if isinstance(raw, dict) and "nics" in raw else ()))
    run_id = v.string(raw["run_id"], "run_id")
    if not RUN_ID_RE.match(run_id):
        v.fail("run_id", f"{run_id!r} is not 'tb' followed by 4 lowercase hex digits")
    kind = v.string(raw["kind"], "kind")
    fabric = v.network(raw["fabric_prefix"], "fabric_prefix")
    fields = tuple(v.string(f, f"ecmp_hash_fields[{i}]")
                   for i, f in enumerate(v.seq(raw["ecmp_hash_fields"], "ecmp_hash_fields")))
    if not fields:
        v.fail("ecmp_hash_fields", "must name at least one field")
    for i, f in enumerate(fields):
        if f not in HASH_FIELD_NAMES:
            v.fail(f"ecmp_hash_fields[{i}]", f"{f!r} is not one of {sorted(HASH_FIELD_NAMES)}")
    v.unique(fields, "ecmp_hash_fields", "field")

    nic_prefixes = []
    for i, item in enumerate(v.seq(raw.get("nics", []), "nics")):
        v.keys(item, f"nics[{i}]", _NIC_KEYS)
        nic_prefixes.append(v.network(item["prefix"], f"nics[{i}].prefix"))
    switches: List[Switch] = []
    subnets: Dict[str, ipaddress.IPv4Network] = {}
    for i, item in enumerate(v.seq(raw["switches"], "switches")):
        where = f"switches[{i}]"
        v.keys(item, where, _SWITCH_KEYS)
        sw = Switch(v.string(item["name"], f"{where}.name"), v.integer(item["dpid"], f"{where}.dpid", 1, MAX_DPID),
                    v.string(item["role"], f"{where}.role"), v.integer(item["index"], f"{where}.index", 1, 1 << 16),
                    None if item["subnet"] is None else item["subnet"])
        if sw.subnet is not None:
            net = v.network(sw.subnet, f"{where}.subnet")
            if not any(net.subnet_of(p) for p in [fabric] + nic_prefixes):
                v.fail(f"{where}.subnet", f"{net} is not inside fabric_prefix {fabric} nor a nic prefix")
            for other, onet in subnets.items():
                if net.overlaps(onet):
                    v.fail(f"{where}.subnet", f"{net} overlaps the subnet of {other!r} ({onet})")
            subnets[sw.name] = net
        switches.append(sw)
    if not switches:
        v.fail("switches", "no switch")
    v.unique([s.name for s in switches], "switches", "name")
    v.unique([s.dpid for s in switches], "switches", "dpid")
    v.unique([(s.role, s.index) for s in switches], "switches", "(role, index)")

    hosts: List[Host] = []
    for i, item in enumerate(v.seq(raw["hosts"], "hosts")):
        where = f"hosts[{i}]"
        v.keys(item, where, _HOST_KEYS)
        name = v.string(item["name"], f"{where}.name")
        rank = v.integer(item["rank"], f"{where}.rank", 0, 1 << 20)
        ip_text = v.string(item["ip"], f"{where}.ip")
        try:
            ip = ipaddress.IPv4Address(ip_text)
        except ValueError:
            v.fail(f"{where}.ip", f"{ip_text!r} is not an IPv4 address (no prefix length)")
        if ip not in fabric:
            v.fail(f"{where}.ip", f"{ip} is not inside fabric_prefix {fabric}")
        mac = v.string(item["mac"], f"{where}.mac").lower()
        if not MAC_RE.match(mac):
            v.fail(f"{where}.mac", f"{mac!r} is not a MAC address like 02:00:00:00:01:01")
        if int(mac[:2], 16) & 1:
            v.fail(f"{where}.mac", f"{mac!r} is a multicast MAC")
        hosts.append(Host(name, rank, str(ip), mac))
    for i, h in enumerate(hosts):
        if h.rank != i:
            v.fail(f"hosts[{i}].rank", f"{h.rank} is not {i} (hosts are listed in rank order)")
    for key in ("name", "ip", "mac"):
        v.unique([getattr(h, key) for h in hosts], "hosts", key)
    by_name: Dict[str, Node] = {s.name: s for s in switches}
    for i, h in enumerate(hosts):
        if h.name in by_name:
            v.fail(f"hosts[{i}].name", f"{h.name!r} is also a switch name")
        by_name[h.name] = h

    links: List[Link] = []
    used: Dict[Tuple[str, int], str] = {}
    for i, item in enumerate(v.seq(raw["links"], "links")):
        where = f"links[{i}]"
        v.keys(item, where, _LINK_KEYS + (("delay_us",) if isinstance(item, dict) and "delay_us" in item else ()))
        ends = []
        for end in ("a", "b"):
            name = v.string(item[end], f"{where}.{end}")
            if name not in by_name:
                v.fail(f"{where}.{end}", f"unknown node {name!r}")
            lo = 0 if isinstance(by_name[name], Host) else 1
            number = v.integer(item[f"{end}_port"], f"{where}.{end}_port", lo, MAX_OF_PORT)
            if (name, number) in used:
                v.fail(f"{where}.{end}_port", f"port {number} on {name} is already used by {used[(name, number)]}")
            used[(name, number)] = where
            ends.append(Port(name, number))
        if ends[0].node == ends[1].node:
            v.fail(f"{where}.b", f"link from {ends[0].node!r} to itself")
        if all(isinstance(by_name[p.node], Host) for p in ends):
            v.fail(f"{where}.b", "a link between two hosts (hosts connect to switches)")
        rate = item["rate_bps"]
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
            v.fail(f"{where}.rate_bps", f"expected a positive number, got {rate!r}")
        delay_us = item.get("delay_us")
        links.append(Link(ends[0], ends[1], float(rate),
                          v.integer(item["buffer_bytes"], f"{where}.buffer_bytes", 1, (1 << 32) - 1),
                          v.integer(item["plane"], f"{where}.plane", 0, 255),
                          None if delay_us is None else v.integer(delay_us, f"{where}.delay_us", 0,
                                                                  MAX_LINK_DELAY_US)))

    nics = _nics(v, raw.get("nics", []), by_name, links, [h.ip for h in hosts] + [h.mac for h in hosts])
    nic_ports = {(n.host, n.port): n for n in nics}
    for i, h in enumerate(hosts):
        attached = [(ln.peer(h.name).node, (ln.a if ln.a.node == h.name else ln.b).number)
                    for ln in links if h.name in (ln.a.node, ln.b.node)]
        if not attached:
            v.fail(f"hosts[{i}]", f"host {h.name!r} has no link")
        for sw, port in attached:
            ip = nic_ports[(h.name, port)].ip if (h.name, port) in nic_ports else h.ip
            if sw in subnets and ipaddress.IPv4Address(ip) not in subnets[sw]:
                v.fail(f"hosts[{i}].ip", f"{ip} is not inside the subnet of {sw!r} ({subnets[sw]})")
    return Layout(run_id, kind, str(fabric), fields, tuple(switches), tuple(hosts), tuple(links), nics)


def _nics(v: "Validator", items: List[Any], by_name: Dict[str, Node], links: List[Link],
          taken: List[str]) -> Tuple[Nic, ...]:
    """Validate the ``nics`` list: each on a host port > 0 that has a link of the NIC's plane,
    its address inside its prefix, addresses and MACs unique among all hosts and NICs."""
    plane_of = {(end.node, end.number): ln.plane for ln in links for end in (ln.a, ln.b)}
    nics: List[Nic] = []
    for i, item in enumerate(items):
        where = f"nics[{i}]"
        host = v.string(item["host"], f"{where}.host")
        if not isinstance(by_name.get(host), Host):
            v.fail(f"{where}.host", f"unknown host {host!r}")
        port = v.integer(item["port"], f"{where}.port", 1, 255)
        plane = v.integer(item["plane"], f"{where}.plane", 0, 255)
        if plane_of.get((host, port)) != plane:
            v.fail(f"{where}.port", f"{host} port {port} has no link of plane {plane}")
        ip, mac = v.string(item["ip"], f"{where}.ip"), v.string(item["mac"], f"{where}.mac").lower()
        prefix = v.network(item["prefix"], f"{where}.prefix")
        try:
            inside = ipaddress.IPv4Address(ip) in prefix
        except ValueError:
            v.fail(f"{where}.ip", f"{ip!r} is not an IPv4 address (no prefix length)")
        if not inside:
            v.fail(f"{where}.ip", f"{ip} is not inside its prefix {prefix}")
        if not MAC_RE.match(mac) or int(mac[:2], 16) & 1:
            v.fail(f"{where}.mac", f"{mac!r} is not a unicast MAC like 02:00:00:00:01:01")
        nics.append(Nic(host, port, ip, mac, plane, str(prefix)))
    v.unique(taken + [n.ip for n in nics] + [n.mac for n in nics], "nics", "address or MAC")
    v.unique([(n.host, n.port) for n in nics], "nics", "(host, port)")
    return tuple(nics)
