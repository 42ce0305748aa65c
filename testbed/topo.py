"""Spine-leaf (2-tier Clos) topology: deterministic names, ports and addresses.

Conventions (shared with controllers/topology.py, which reads the JSON this
module writes):

- leaf i (1-based) has dpid 0x1000+i, spine k has dpid 0x2000+k;
- host j (1-based) on leaf i is ``10.0.i.j/16`` with MAC ``02:00:00:00:ii:jj``;
  hosts are numbered 1..N leaf by leaf (host n = (i-1)*hosts_per_leaf + j);
- on a leaf, host j is on port j and the uplink to spine k on port
  hosts_per_leaf+k; on spine k the port to leaf i is i; a host's only
  interface is eth0.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from mininet.topo import Topo

from testbed.naming import host_name, leaf_name, spine_name
from testbed.spec import FabricSpec

FABRIC_PREFIX = "10.0.0.0/16"
ECMP_HASH_FIELDS = ("ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst", "tcp_src", "tcp_dst")


@dataclass(frozen=True)
class HostInfo:
    name: str
    rank: int  # 0-based position in the job (host n has rank n-1)
    ip: str
    mac: str
    leaf: str
    port: int  # leaf port the host is attached to

    @property
    def intf(self) -> str:
        return f"{self.name}-eth0"


@dataclass(frozen=True)
class SwitchInfo:
    name: str
    dpid: int
    role: str  # "leaf" or "spine"
    index: int


@dataclass(frozen=True)
class LinkInfo:
    leaf: str
    leaf_port: int
    spine: str
    spine_port: int


@dataclass(frozen=True)
class FabricLayout:
    """Every node, port and address of one run's spine-leaf fabric."""

    run_id: str
    hosts: tuple[HostInfo, ...]
    switches: tuple[SwitchInfo, ...]
    links: tuple[LinkInfo, ...]

    @classmethod
    def build(cls, spec: FabricSpec, run_id: str) -> "FabricLayout":
        hosts, switches, links = [], [], []
        for k in range(1, spec.spines + 1):
            switches.append(SwitchInfo(spine_name(run_id, k), 0x2000 + k, "spine", k))
        for i in range(1, spec.leaves + 1):
            leaf = leaf_name(run_id, i)
            switches.append(SwitchInfo(leaf, 0x1000 + i, "leaf", i))
            for j in range(1, spec.hosts_per_leaf + 1):
                n = (i - 1) * spec.hosts_per_leaf + j
                hosts.append(HostInfo(host_name(run_id, n), n - 1, f"10.0.{i}.{j}",
                                      f"02:00:00:00:{i:02x}:{j:02x}", leaf, j))
            for k in range(1, spec.spines + 1):
                links.append(LinkInfo(leaf, spec.hosts_per_leaf + k, spine_name(run_id, k), i))
        return cls(run_id, tuple(hosts), tuple(switches), tuple(links))

    def topology_json(self) -> dict:
        """The controller's topology file (format: controllers/topology.py)."""
        leaves = [s for s in self.switches if s.role == "leaf"]
        return {
            "run_id": self.run_id,
            "switches": [asdict(s) for s in self.switches],
            "hosts": [{"name": h.name, "ip": h.ip, "mac": h.mac, "leaf": h.leaf, "port": h.port}
                      for h in self.hosts],
            "links": [asdict(link) for link in self.links],
            "leaf_subnets": {s.name: f"10.0.{s.index}.0/24" for s in leaves},
            "fabric_prefix": FABRIC_PREFIX,
            "ecmp_hash_fields": list(ECMP_HASH_FIELDS),
        }

    def write_topology(self, path: Path) -> None:
        path.write_text(json.dumps(self.topology_json(), indent=1))


class SpineLeafTopo(Topo):
    """Mininet graph of a FabricLayout (no link shaping here: see testbed.shaping)."""

    def build(self, layout: FabricLayout) -> None:  # noqa: D102 (Mininet hook)
        for s in layout.switches:
            self.addSwitch(s.name, dpid=f"{s.dpid:016x}")
        for h in layout.hosts:
            self.addHost(h.name, ip=f"{h.ip}/16", mac=h.mac)
            self.addLink(h.name, h.leaf, port1=0, port2=h.port)
        for link in layout.links:
            self.addLink(link.leaf, link.spine, port1=link.leaf_port, port2=link.spine_port)
