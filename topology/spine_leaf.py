"""Spine-leaf (2-tier Clos) builder: deterministic names, dpids, ports and addresses.

Conventions (unchanged from the first testbed release):

- leaf i (1-based) is ``<run_id>l<i>`` with dpid 0x1000+i and subnet
  ``10.0.i.0/24``; spine k is ``<run_id>s<k>`` with dpid 0x2000+k;
- host j (1-based) on leaf i is ``<run_id>h<n>`` with n = (i-1)*hosts_per_leaf + j,
  rank n-1, IP ``10.0.i.j`` and MAC ``02:00:00:00:ii:jj`` (hex);
- on a leaf, host j is on port j and the uplink to spine k on port
  hosts_per_leaf+k; on spine k the port to leaf i is i; a host's only
  interface is eth0 (port 0).
"""
from __future__ import annotations

from typing import Any, List, Tuple

from topology.model import DEFAULT_HASH_FIELDS, Host, Layout, Link, Port, Switch

KIND = "spine_leaf"
#: fabric keys of this kind (beside the common rates, buffer, MTU, oversubscription)
PARAMS = ("spines", "leaves", "hosts_per_leaf")
FABRIC_PREFIX = "10.0.0.0/16"
#: Addressing 10.0.<leaf>.<host> leaves room for this many leaves and hosts per leaf.
MAX_PER_OCTET = 250


def build(run_id: str, spines: int, leaves: int, hosts_per_leaf: int, host_link_bps: float = 10e6,
          fabric_link_bps: float = 10e6, buffer_bytes: int = 100_000) -> Layout:
    """Layout of a spine-leaf fabric (every leaf linked once to every spine).

    Rates in bit/s, buffer in bytes (every switch port's egress queue; host
    links carry it too). Raises ValueError naming the count that is out of
    range (spines 1..250, leaves and hosts_per_leaf 1..250).
    """
    for key, value in (("spines", spines), ("leaves", leaves), ("hosts_per_leaf", hosts_per_leaf)):
        if not 1 <= value <= MAX_PER_OCTET:
            raise ValueError(f"fabric.{key} = {value} is outside 1..{MAX_PER_OCTET}")
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
        for k in range(1, spines + 1):
            fabric_links.append(Link(Port(leaf, hosts_per_leaf + k), Port(f"{run_id}s{k}", i),
                                     float(fabric_link_bps), buffer_bytes))
    return Layout(run_id, KIND, FABRIC_PREFIX, DEFAULT_HASH_FIELDS, tuple(switches), tuple(hosts),
                  tuple(host_links + fabric_links))


def check(fabric: Any) -> None:
    """ValueError naming the key when a switch needs more than ``fabric.ports_per_switch``
    ports (leaf: hosts_per_leaf + spines; spine: leaves) or the addressing runs out."""
    leaf_ports = fabric.hosts_per_leaf + fabric.spines
    if leaf_ports > fabric.ports_per_switch:
        raise ValueError(
            f"fabric.hosts_per_leaf + fabric.spines = {leaf_ports} ports per leaf, "
            f"more than fabric.ports_per_switch = {fabric.ports_per_switch}")
    if fabric.leaves > fabric.ports_per_switch:
        raise ValueError(
            f"fabric.leaves = {fabric.leaves} ports per spine, more than "
            f"fabric.ports_per_switch = {fabric.ports_per_switch}")
    if fabric.leaves > MAX_PER_OCTET or fabric.hosts_per_leaf > MAX_PER_OCTET:
        raise ValueError("addressing 10.0.<leaf>.<host> allows at most 250 leaves and 250 hosts per leaf")


def edge_ports(fabric: Any) -> Tuple[int, int]:
    """(host ports, uplinks) of a leaf: (hosts_per_leaf, spines)."""
    return fabric.hosts_per_leaf, fabric.spines


def from_spec(fabric: Any, run_id: str) -> Layout:
    """:func:`build` from a scenario's ``fabric`` section (attributes spines, leaves,
    hosts_per_leaf, host_link_bps, fabric_link_bps, buffer_bytes)."""
    return build(run_id, fabric.spines, fabric.leaves, fabric.hosts_per_leaf, fabric.host_link_bps,
                 fabric.fabric_link_bps, fabric.buffer_bytes)
