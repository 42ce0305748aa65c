"""Sites joined by long-haul links: ``sites`` spine-leaf pods, each with a border switch, the
border switches of every two sites joined by ``dci_links`` data-center-interconnect (DCI) links
with their own rate and one-way delay.

Each site is the spine-leaf of :mod:`topology.spine_leaf` (every leaf linked to every spine) plus a
border switch linked to every spine of its site, as a DCI gateway (border leaf) is: traffic between
sites goes leaf -> spine -> border -> (DCI link) -> border -> spine -> leaf, 6 switches and 7 links
host to host, and spreads over the site's spines and over the parallel DCI links (every parallel
link is its own equal-cost next hop, topology.routing). A training job split across data centers
crosses such links; their length is what the delay stands for: light in fibre takes about 5 us per
km (refractive index about 1.47), so ``dci_delay_us: 5000`` is about 1,000 km.

Conventions (sites, leaves, spines and hosts numbered from 1; every site the same size):

- leaf i of site s is ``<run_id>l<n>`` with n = (s-1)*leaves + i (role "leaf"), dpid 0x1000+n, subnet
  ``10.s.i.0/24``; spine k of site s is ``<run_id>s<n>`` with n = (s-1)*spines + k, dpid 0x2000+n; the
  border switch of site s is ``<run_id>b<s>`` (role "border"), dpid 0x4000+s;
- host j of leaf i in site s is ``<run_id>h<n>``, n = ((s-1)*leaves + (i-1))*hosts_per_leaf + j, rank
  n-1 (site-major: consecutive ranks share a leaf, then a site), IP ``10.s.i.j``, MAC
  ``02:00:00:ss:ii:jj`` (hex);
- on a leaf, host j is on port j and spine k of its site on port hosts_per_leaf+k; on a spine, leaf i
  of its site is on port i and the border switch on port leaves+1; on a border switch, spine k of its
  site is on port k and DCI link m (1-based) to the o-th other site (o from 0, in site order) on port
  spines + o*dci_links + m.

Host links run at ``host_link_bps``, leaf-spine and spine-border links at ``fabric_link_bps`` with the
fabric's default delay (``fabric.link_delay_us``); DCI links at ``dci_link_bps`` (default:
``fabric_link_bps``) with their own one-way delay ``dci_delay_us`` (topology.model.Link.delay_us).
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from topology.model import (DEFAULT_HASH_FIELDS, MAX_LINK_DELAY_US, RUN_ID_CHARS, Host, Layout, Link, Port,
                            Switch)
from topology.port_count import too_many_ports

KIND = "dci"
#: fabric keys of this kind (beside the common rates, buffer, MTU, oversubscription, link_delay_us)
PARAMS = ("sites", "spines", "leaves", "hosts_per_leaf", "dci_links", "dci_link_bps", "dci_delay_us")
FABRIC_PREFIX = "10.0.0.0/8"
#: most sites (addressing 10.<site>.<leaf>.<host>; a full mesh of border switches)
MAX_SITES = 8
#: most parallel DCI links between two sites
MAX_DCI_LINKS = 8
#: addressing 10.<site>.<leaf>.<host>
MAX_PER_OCTET = 250
#: Linux interface names are at most 15 characters (IFNAMSIZ - 1): ``tb12abl16-eth10``
MAX_IFNAME = 15


def _check_counts(sites: int, spines: int, leaves: int, hosts_per_leaf: int, dci_links: int,
                  dci_delay_us: int) -> None:
    for key, value, lo, hi in (("sites", sites, 2, MAX_SITES), ("spines", spines, 1, MAX_PER_OCTET),
                               ("leaves", leaves, 1, MAX_PER_OCTET), ("hosts_per_leaf", hosts_per_leaf, 1, MAX_PER_OCTET),
                               ("dci_links", dci_links, 1, MAX_DCI_LINKS), ("dci_delay_us", dci_delay_us, 0,
                                                                            MAX_LINK_DELAY_US)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"fabric.{key} = {value!r} is outside {lo}..{hi}")


def check(fabric: Any) -> None:
    """ValueError naming the key when a count is out of range, a switch needs more than
    ``fabric.ports_per_switch`` ports (leaf: hosts_per_leaf + spines; spine: leaves + 1; border:
    spines + (sites - 1) x dci_links), or a switch interface name would pass 15 characters."""
    f = fabric
    _check_counts(f.sites, f.spines, f.leaves, f.hosts_per_leaf, f.dci_links, f.dci_delay_us)
    border = f.spines + (f.sites - 1) * f.dci_links
    for what, ports, switch, fewer in (
            ("fabric.hosts_per_leaf + fabric.spines", f.hosts_per_leaf + f.spines, "leaf", "fewer hosts per leaf"),
            ("fabric.leaves + 1 (the border switch)", f.leaves + 1, "spine", "fewer leaves"),
            ("fabric.spines + (fabric.sites - 1) x fabric.dci_links", border, "border switch",
             "fewer spines, sites or dci_links")):
        if ports > f.ports_per_switch:
            raise too_many_ports(what, ports, switch, f.ports_per_switch, fewer)
    longest = RUN_ID_CHARS + max(len(f"l{f.sites * f.leaves}-eth{f.hosts_per_leaf + f.spines}"),
                                 len(f"s{f.sites * f.spines}-eth{f.leaves + 1}"), len(f"b{f.sites}-eth{border}"))
    if longest > MAX_IFNAME:
        raise ValueError(f"fabric.sites = {f.sites} x fabric.leaves = {f.leaves} (hosts_per_leaf {f.hosts_per_leaf}, "
                         f"spines {f.spines}, dci_links {f.dci_links}) makes switch interface names of {longest} "
                         f"characters; Linux allows {MAX_IFNAME}: use at most 99 leaves and spines in all and 99 "
                         f"ports per switch")


def build(run_id: str, sites: int, spines: int, leaves: int, hosts_per_leaf: int, dci_links: int = 1,
          host_link_bps: float = 10e6, fabric_link_bps: float = 10e6, dci_link_bps: Optional[float] = None,
          dci_delay_us: int = 0, buffer_bytes: int = 100_000) -> Layout:
    """Layout of ``sites`` spine-leaf sites joined by DCI links (module docstring). Rates in bit/s
    (``dci_link_bps`` None: ``fabric_link_bps``), delay in microseconds one way, buffer in bytes (every
    egress queue). Raises ValueError naming a count out of range (sites 2..MAX_SITES, dci_links
    1..MAX_DCI_LINKS, dci_delay_us 0..1 s, the others 1..250)."""
    _check_counts(sites, spines, leaves, hosts_per_leaf, dci_links, dci_delay_us)
    dci_bps = float(fabric_link_bps if dci_link_bps is None else dci_link_bps)
    switches: List[Switch] = []
    hosts: List[Host] = []
    host_links: List[Link] = []
    fabric_links: List[Link] = []
    borders = [Switch(f"{run_id}b{s}", 0x4000 + s, "border", s) for s in range(1, sites + 1)]
    for s in range(1, sites + 1):
        spine_names = []
        for k in range(1, spines + 1):
            n = (s - 1) * spines + k
            switches.append(Switch(f"{run_id}s{n}", 0x2000 + n, "spine", n))
            spine_names.append(switches[-1].name)
        for i in range(1, leaves + 1):
            n_leaf = (s - 1) * leaves + i
            leaf = Switch(f"{run_id}l{n_leaf}", 0x1000 + n_leaf, "leaf", n_leaf, f"10.{s}.{i}.0/24")
            switches.append(leaf)
            for j in range(1, hosts_per_leaf + 1):
                n = (n_leaf - 1) * hosts_per_leaf + j
                host = Host(f"{run_id}h{n}", n - 1, f"10.{s}.{i}.{j}", f"02:00:00:{s:02x}:{i:02x}:{j:02x}")
                hosts.append(host)
                host_links.append(Link(Port(host.name, 0), Port(leaf.name, j), float(host_link_bps), buffer_bytes))
            fabric_links += [Link(Port(leaf.name, hosts_per_leaf + k), Port(spine, i), float(fabric_link_bps),
                                  buffer_bytes) for k, spine in enumerate(spine_names, 1)]
        fabric_links += [Link(Port(spine, leaves + 1), Port(borders[s - 1].name, k), float(fabric_link_bps),
                              buffer_bytes) for k, spine in enumerate(spine_names, 1)]
    for s in range(1, sites + 1):
        for t in range(s + 1, sites + 1):  # each pair once: o = the far site's place among the others
            o_s, o_t = t - 2, s - 1
            fabric_links += [Link(Port(borders[s - 1].name, spines + o_s * dci_links + m),
                                  Port(borders[t - 1].name, spines + o_t * dci_links + m), dci_bps, buffer_bytes,
                                  delay_us=int(dci_delay_us)) for m in range(1, dci_links + 1)]
    return Layout(run_id, KIND, FABRIC_PREFIX, DEFAULT_HASH_FIELDS, tuple(switches + borders), tuple(hosts),
                  tuple(host_links + fabric_links))


def edge_ports(fabric: Any) -> Tuple[int, int]:
    """(host ports, uplinks) of a leaf: (hosts_per_leaf, spines)."""
    return fabric.hosts_per_leaf, fabric.spines


def from_spec(fabric: Any, run_id: str) -> Layout:
    """:func:`build` from a scenario's ``fabric`` section (sites, spines, leaves, hosts_per_leaf, dci_links,
    host_link_bps, fabric_link_bps, dci_link_bps, dci_delay_us, buffer_bytes)."""
    return build(run_id, fabric.sites, fabric.spines, fabric.leaves, fabric.hosts_per_leaf, fabric.dci_links,
                 fabric.host_link_bps, fabric.fabric_link_bps, fabric.dci_link_bps, fabric.dci_delay_us,
                 fabric.buffer_bytes)
