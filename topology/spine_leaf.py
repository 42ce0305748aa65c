"""Spine-leaf (2-tier Clos) builder: deterministic names, dpids, ports and addresses.

Conventions (unchanged from the first testbed release):

- leaf i (1-based) is ``<run_id>l<i>`` with dpid 0x1000+i and subnet
  ``10.0.i.0/24``; spine k is ``<run_id>s<k>`` with dpid 0x2000+k;
- host j (1-based) on leaf i is ``<run_id>h<n>`` with n = (i-1)*hosts_per_leaf + j,
  rank n-1, IP ``10.0.i.j`` and MAC ``02:00:00:00:ii:jj`` (hex);
- on a leaf, host j is on port j and the uplink to spine k on port
  hosts_per_leaf+k; on spine k the port to leaf i is i; a host's only
  interface is eth0 (port 0).
- parallel links (``links_per_spine`` L > 1, e.g. P02's spines with two links
  to every leaf): link m (1-based) between leaf i and spine k is leaf port
  hosts_per_leaf + (m-1)*spines + k and spine port (m-1)*leaves + i, so
  link 1 keeps the ports above and the leaf's uplinks are numbered link by
  link (all spines' first links, then all second links), as cabling in
  stripes does. Every parallel link is its own port pair, interface and
  equal-cost next hop (topology.routing).
"""
from __future__ import annotations

from typing import Any, List, Tuple

from topology.model import DEFAULT_HASH_FIELDS, RUN_ID_CHARS, Host, Layout, Link, Port, Switch
from topology.port_count import too_many_ports

KIND = "spine_leaf"
#: fabric keys of this kind (beside the common rates, buffer, MTU, oversubscription)
PARAMS = ("spines", "leaves", "hosts_per_leaf", "links_per_spine")
FABRIC_PREFIX = "10.0.0.0/16"
#: Addressing 10.0.<leaf>.<host> leaves room for this many leaves and hosts per leaf.
MAX_PER_OCTET = 250
#: most parallel links between one leaf and one spine
MAX_LINKS_PER_SPINE = 8
#: Linux interface names are at most 15 characters (IFNAMSIZ - 1): ``tb12abl12-eth99``
MAX_IFNAME = 15


def build(run_id: str, spines: int, leaves: int, hosts_per_leaf: int, host_link_bps: float = 10e6,
          fabric_link_bps: float = 10e6, buffer_bytes: int = 100_000, links_per_spine: int = 1) -> Layout:
    """Layout of a spine-leaf fabric (every leaf linked ``links_per_spine`` times to every spine).

    Rates in bit/s, buffer in bytes (every switch port's egress queue; host
    links carry it too). Raises ValueError naming the count that is out of
    range (spines 1..250, leaves and hosts_per_leaf 1..250, links_per_spine
    1..MAX_LINKS_PER_SPINE).
    """
    for key, value in (("spines", spines), ("leaves", leaves), ("hosts_per_leaf", hosts_per_leaf)):
        if not 1 <= value <= MAX_PER_OCTET:
            raise ValueError(f"fabric.{key} = {value} is outside 1..{MAX_PER_OCTET}")
    if not 1 <= links_per_spine <= MAX_LINKS_PER_SPINE:
        raise ValueError(f"fabric.links_per_spine = {links_per_spine} is outside 1..{MAX_LINKS_PER_SPINE}")
    switches: List[Switch] = [Switch(f"{run_id}s{k}", 0x2000 + k, "spine", k) for k in range(1, spines + 1)]
    hosts: List[Host] = []
    host_links: List[Link] = []
    fabric_links: List[Link] = []
    for i in range(1, leaves + 1):
        leaf = f"{run_id}l{i}"
        switches.append(Switch(leaf, 0x1000 + i, "leaf", i, f"10.0.{i}.0/24"))
        for j in range(1, hosts_per_leaf + 1):
            n = (i - 1) * hosts_per_leaf + j
            host = Host(f"{run_id}h{n}", n - 1, f"10.0.{i}.{j}", f"02:00:00:00:{i:02x}:{j:02x}")
            hosts.append(host)
            host_links.append(Link(Port(host.name, 0), Port(leaf, j), float(host_link_bps), buffer_bytes))
        for m in range(links_per_spine):
            for k in range(1, spines + 1):
                fabric_links.append(Link(Port(leaf, hosts_per_leaf + m * spines + k),
                                         Port(f"{run_id}s{k}", m * leaves + i), float(fabric_link_bps), buffer_bytes))
    return Layout(run_id, KIND, FABRIC_PREFIX, DEFAULT_HASH_FIELDS, tuple(switches), tuple(hosts),
                  tuple(host_links + fabric_links))


def check(fabric: Any) -> None:
    """ValueError naming the key when a switch needs more than ``fabric.ports_per_switch``
    ports (leaf: hosts_per_leaf + spines x links_per_spine; spine: leaves x links_per_spine), a
    switch interface name (``<run id>l<leaf>-eth<port>``) would pass 15 characters, or the
    addressing runs out."""
    links = getattr(fabric, "links_per_spine", 1)
    leaf_ports = fabric.hosts_per_leaf + fabric.spines * links
    per = " x fabric.links_per_spine" if links > 1 else ""
    if leaf_ports > fabric.ports_per_switch:
        raise too_many_ports(f"fabric.hosts_per_leaf + fabric.spines{per}", leaf_ports, "leaf",
                             fabric.ports_per_switch, "fewer hosts per leaf (and more leaves)")
    if fabric.leaves * links > fabric.ports_per_switch:
        raise too_many_ports(f"fabric.leaves{per}", fabric.leaves * links, "spine", fabric.ports_per_switch,
                             "fewer leaves (and more hosts per leaf)")
    longest = RUN_ID_CHARS + max(len(f"l{fabric.leaves}-eth{leaf_ports}"),
                                 len(f"s{fabric.spines}-eth{fabric.leaves * links}"))
    if longest > MAX_IFNAME:
        raise ValueError(f"fabric.links_per_spine = {links} with fabric.spines = {fabric.spines}, fabric.leaves = "
                         f"{fabric.leaves} and fabric.hosts_per_leaf = {fabric.hosts_per_leaf} makes switch "
                         f"interface names of {longest} characters; Linux allows {MAX_IFNAME} (at most 99 ports "
                         f"per switch)")
    if fabric.leaves > MAX_PER_OCTET or fabric.hosts_per_leaf > MAX_PER_OCTET:
        raise ValueError("addressing 10.0.<leaf>.<host> allows at most 250 leaves and 250 hosts per leaf")


def edge_ports(fabric: Any) -> Tuple[int, int]:
    """(host ports, uplinks) of a leaf: (hosts_per_leaf, spines x links_per_spine)."""
    return fabric.hosts_per_leaf, fabric.spines * getattr(fabric, "links_per_spine", 1)


def from_spec(fabric: Any, run_id: str) -> Layout:
    """:func:`build` from a scenario's ``fabric`` section (attributes spines, leaves,
    hosts_per_leaf, host_link_bps, fabric_link_bps, buffer_bytes, links_per_spine)."""
    return build(run_id, fabric.spines, fabric.leaves, fabric.hosts_per_leaf, fabric.host_link_bps,
                 fabric.fabric_link_bps, fabric.buffer_bytes, getattr(fabric, "links_per_spine", 1))
