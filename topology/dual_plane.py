"""Dual-plane builder: P independent spine-leaf planes; every host has one NIC in each.

Each plane is the spine-leaf of :mod:`topology.spine_leaf` (every leaf linked to every
spine) with its own switches, links and addresses; the planes share no switch and no link,
only the hosts (as in multi-plane AI fabrics where each GPU's NIC ports go to separate
planes, e.g. Alibaba HPN's dual-plane design, SIGCOMM 2024). Routing is per plane
(topology.planes); the transport puts collective channel c on plane c mod P
(traffic.transport.planes).

Conventions (planes from 0, leaves, spines and hosts from 1):

- plane p leaf i is ``<run_id><p>l<i>`` (role "leaf"), dpid 0x1000+i + p x 0x10000, subnet
  ``10.p.i.0/24``; plane p spine k is ``<run_id><p>s<k>``, dpid 0x2000+k + p x 0x10000;
- host j of leaf i is ``<run_id>h<n>``, n = (i-1)*hosts_per_leaf + j, rank n-1; its plane-p
  interface is eth<p> with IP ``10.p.i.j`` (plane 0: the host's address) and MAC
  ``02:0p:00:00:ii:jj`` (hex); the other planes' interfaces are topology.model.Nic with
  prefix ``10.p.0.0/16``;
- on a leaf, host j is on port j and spine k on port hosts_per_leaf+k; on spine k leaf i
  is on port i (as spine_leaf).

Host links run at ``host_link_bps`` (each NIC its own link), leaf-spine links at ``fabric_link_bps``.
"""
from __future__ import annotations

from typing import Any, List, Tuple

from topology import spine_leaf
from topology.model import DEFAULT_HASH_FIELDS, RUN_ID_CHARS, Layout, Link, Nic, Port, Switch
from topology.port_count import too_many_ports

KIND = "dual_plane"
#: fabric keys of this kind (beside the common rates, buffer, MTU, oversubscription)
PARAMS = ("spines", "leaves", "hosts_per_leaf", "planes")
FABRIC_PREFIX = "10.0.0.0/16"
#: Linux interface names are at most 15 characters (IFNAMSIZ - 1): ``tb12ab1l1-eth10``
MAX_IFNAME = 15


def check(fabric: Any) -> None:
    """ValueError naming the key when a switch needs more than ``fabric.ports_per_switch`` ports,
    or a switch port's interface name (``<run id><plane>l<leaf>-eth<port>``) would pass 15 characters."""
    leaf_ports = fabric.hosts_per_leaf + fabric.spines
    if leaf_ports > fabric.ports_per_switch:
        raise too_many_ports("fabric.hosts_per_leaf + fabric.spines", leaf_ports, "leaf", fabric.ports_per_switch,
                             "fewer hosts per leaf (and more leaves)")
    if fabric.leaves > fabric.ports_per_switch:
        raise too_many_ports("fabric.leaves", fabric.leaves, "spine", fabric.ports_per_switch, "fewer leaves")
    longest = RUN_ID_CHARS + max(len(f"{fabric.planes - 1}l{fabric.leaves}-eth{leaf_ports}"),
                                 len(f"{fabric.planes - 1}s{fabric.spines}-eth{fabric.leaves}"))
    if longest > MAX_IFNAME:
        raise ValueError(f"fabric.leaves = {fabric.leaves}, fabric.spines = {fabric.spines} and fabric.hosts_per_leaf = "
                         f"{fabric.hosts_per_leaf} make switch interface names of {longest} characters; Linux "
                         f"allows {MAX_IFNAME}: use at most 9 leaves and spines and 99 ports per leaf")


def build(run_id: str, spines: int, leaves: int, hosts_per_leaf: int, planes: int = 2,
          host_link_bps: float = 10e6, fabric_link_bps: float = 10e6, buffer_bytes: int = 100_000) -> Layout:
    """Layout of ``planes`` spine-leaf planes sharing the hosts (module docstring). Rates in bit/s,
    buffer in bytes. Raises ValueError naming a count out of range (planes 2..4, the others 1..9)."""
    for key, value, hi in (("planes", planes, 4), ("spines", spines, 9), ("leaves", leaves, 9),
                           ("hosts_per_leaf", hosts_per_leaf, 250)):
        if not 1 + (key == "planes") <= value <= hi:
            raise ValueError(f"fabric.{key} = {value} is outside {1 + (key == 'planes')}..{hi}")
    hosts = spine_leaf.build(run_id, 1, leaves, hosts_per_leaf).hosts  # plane 0 addresses: spine_leaf's
    switches: List[Switch] = []
    nics: List[Nic] = []
    host_links: List[Link] = []
    fabric_links: List[Link] = []
    for p in range(planes):
        spine = {k: Switch(f"{run_id}{p}s{k}", 0x2000 + k + p * 0x10000, "spine", k + p * 100)
                 for k in range(1, spines + 1)}
        switches += spine.values()
        for i in range(1, leaves + 1):
            leaf = Switch(f"{run_id}{p}l{i}", 0x1000 + i + p * 0x10000, "leaf", i + p * 100, f"10.{p}.{i}.0/24")
            switches.append(leaf)
            for j in range(1, hosts_per_leaf + 1):
                host = hosts[(i - 1) * hosts_per_leaf + j - 1]
                host_links.append(Link(Port(host.name, p), Port(leaf.name, j), float(host_link_bps), buffer_bytes, p))
                if p:
                    nics.append(Nic(host.name, p, f"10.{p}.{i}.{j}", f"02:{p:02x}:00:00:{i:02x}:{j:02x}", p,
                                    f"10.{p}.0.0/16"))
            fabric_links += [Link(Port(leaf.name, hosts_per_leaf + k), Port(spine[k].name, i), float(fabric_link_bps),
                                  buffer_bytes, p) for k in range(1, spines + 1)]
    host_links.sort(key=lambda ln: (int(ln.a.node[len(run_id) + 1:]), ln.a.number))  # each host's eth0 first
    nics.sort(key=lambda nic: (int(nic.host[len(run_id) + 1:]), nic.port))
    return Layout(run_id, KIND, FABRIC_PREFIX, DEFAULT_HASH_FIELDS, tuple(switches), hosts,
                  tuple(host_links + fabric_links), tuple(nics))


def edge_ports(fabric: Any) -> Tuple[int, int]:
    """(host ports, uplinks) of a leaf in any plane: (hosts_per_leaf, spines)."""
    return fabric.hosts_per_leaf, fabric.spines


def from_spec(fabric: Any, run_id: str) -> Layout:
    """:func:`build` from a scenario's ``fabric`` section."""
    return build(run_id, fabric.spines, fabric.leaves, fabric.hosts_per_leaf, fabric.planes, fabric.host_link_bps,
                 fabric.fabric_link_bps, fabric.buffer_bytes)
