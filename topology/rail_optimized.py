"""Rail-optimized builder: servers of G GPUs, GPU i of every server on rail leaf i,
rails joined by spines (NVIDIA DGX SuperPOD reference architecture: "rail-optimized"
compute fabric; Wang et al., "Rail-only", HotI 2023, Figure 1).

Every GPU is a host with one NIC. Rail leaf i connects GPU i of every server
and has one uplink to each spine; traffic between GPUs of the same index
stays on one rail leaf, every other pair crosses a spine (there is no
scale-up domain inside a server here).

Conventions (servers, GPUs, rails and spines numbered from 1):

- rail leaf i is ``<run_id>r<i>`` (role "rail"), dpid 0x1000+i, subnet
  ``10.0.i.0/24``; spine k is ``<run_id>s<k>``, dpid 0x2000+k;
- GPU i of server s is ``<run_id>h<n>``, n = (s-1)*G + i, rank n-1 (server-major,
  as NCCL numbers ranks: consecutive ranks are GPUs of one server, on
  different rails), IP ``10.0.i.s``, MAC ``02:00:00:00:ii:ss`` (hex);
- rail leaf i: server s on port s, spine k on port servers+k; spine k: rail i
  on port i; a host's interface is eth0.

Host links run at ``host_link_bps``, rail-spine links at ``fabric_link_bps``
(the spec derives it from ``fabric.oversubscription``: a rail leaf has
``servers`` host ports and ``spines`` uplinks).
"""
from __future__ import annotations

from typing import Any, List, Tuple

from topology.model import DEFAULT_HASH_FIELDS, Host, Layout, Link, Port, Switch
from topology.port_count import too_many_ports

KIND = "rail_optimized"
#: fabric keys of this kind (beside the common rates, buffer, MTU, oversubscription)
PARAMS = ("servers", "gpus_per_server", "spines")
FABRIC_PREFIX = "10.0.0.0/16"
#: addressing 10.0.<rail>.<server>
MAX_PER_OCTET = 250


def _check_counts(servers: int, gpus_per_server: int, spines: int) -> None:
    for key, value in (("servers", servers), ("gpus_per_server", gpus_per_server), ("spines", spines)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PER_OCTET:
            raise ValueError(f"fabric.{key} = {value!r} is outside 1..{MAX_PER_OCTET}")


def check(fabric: Any) -> None:
    """ValueError naming the key when a count is out of range or a switch needs more
    than ``fabric.ports_per_switch`` ports (rail leaf: servers + spines; spine: one per rail)."""
    _check_counts(fabric.servers, fabric.gpus_per_server, fabric.spines)
    if fabric.servers + fabric.spines > fabric.ports_per_switch:
        raise too_many_ports("fabric.servers + fabric.spines", fabric.servers + fabric.spines, "rail leaf",
                             fabric.ports_per_switch, "fewer servers or spines")
    if fabric.gpus_per_server > fabric.ports_per_switch:
        raise too_many_ports("fabric.gpus_per_server (a rail leaf each)", fabric.gpus_per_server, "spine",
                             fabric.ports_per_switch, "fewer GPUs per server")


def build(run_id: str, servers: int, gpus_per_server: int, spines: int, host_link_bps: float = 10e6,
          fabric_link_bps: float = 10e6, buffer_bytes: int = 100_000) -> Layout:
    """Layout of a rail-optimized fabric (module docstring). Rates in bit/s, buffer in
    bytes (every egress queue). Raises ValueError naming a count outside 1..250."""
    _check_counts(servers, gpus_per_server, spines)
    switches: List[Switch] = [Switch(f"{run_id}s{k}", 0x2000 + k, "spine", k) for k in range(1, spines + 1)]
    switches += [Switch(f"{run_id}r{i}", 0x1000 + i, "rail", i, f"10.0.{i}.0/24")
                 for i in range(1, gpus_per_server + 1)]
    hosts: List[Host] = []
    host_links: List[Link] = []
    for s in range(1, servers + 1):
        for i in range(1, gpus_per_server + 1):
            n = (s - 1) * gpus_per_server + i
            host = Host(f"{run_id}h{n}", n - 1, f"10.0.{i}.{s}", f"02:00:00:00:{i:02x}:{s:02x}")
            hosts.append(host)
            host_links.append(Link(Port(host.name, 0), Port(f"{run_id}r{i}", s), float(host_link_bps),
                                   buffer_bytes))
    fabric_links = [Link(Port(f"{run_id}r{i}", servers + k), Port(f"{run_id}s{k}", i), float(fabric_link_bps),
                         buffer_bytes)
                    for i in range(1, gpus_per_server + 1) for k in range(1, spines + 1)]
    return Layout(run_id, KIND, FABRIC_PREFIX, DEFAULT_HASH_FIELDS, tuple(switches), tuple(hosts),
                  tuple(host_links + fabric_links))


def edge_ports(fabric: Any) -> Tuple[int, int]:
    """(host ports, uplinks) of a rail leaf: (servers, spines)."""
    return fabric.servers, fabric.spines


def from_spec(fabric: Any, run_id: str) -> Layout:
    """:func:`build` from a scenario's ``fabric`` section (servers, gpus_per_server, spines,
    host_link_bps, fabric_link_bps, buffer_bytes)."""
    return build(run_id, fabric.servers, fabric.gpus_per_server, fabric.spines, fabric.host_link_bps,
                 fabric.fabric_link_bps, fabric.buffer_bytes)
