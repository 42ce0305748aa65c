"""Scale-up domain: the GPUs of each server joined by one fast switch (NVLink/NVSwitch-like).

``fabric.scale_up: {gpus_per_server: G, rate_multiple: M}`` adds, to the layout of any
``fabric.kind``, one switch per server of G consecutive ranks (rank-major: server s holds
ranks (s-1)G .. sG-1, NCCL's and SimAI's numbering) and gives each GPU a second NIC on it,
linked at M x ``host_link_bps``. The scale-up switches are not linked to the scale-out
fabric: traffic between two GPUs of one server takes the scale-up NIC (the transport picks
it, traffic.transport.planes, as NCCL prefers NVLink inside a node), every other pair the
scale-out fabric, so tensor-parallel groups inside a server never touch a leaf port.

Conventions (servers and GPUs from 1): server s's switch is ``<run_id>u<s>`` (role
"scaleup"), dpid 0x4000+s, subnet ``10.255.s.0/24``; GPU g of server s is on its port g, with
the host's next free interface (eth1 on a one-plane fabric), IP ``10.255.s.g``, MAC
``02:ff:00:00:ss:gg`` (hex), prefix ``10.255.s.0/24`` (only its own server is reached there).
:meth:`topology.model.Layout.servers` lists each server's hosts.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, List

from topology.model import SCALE_UP_PLANE, Layout, Link, Nic, Port, Switch

#: servers are numbered in the third octet of 10.255.s.g
MAX_SERVERS = 250


def check(fabric: Any, n_hosts: int) -> None:
    """ValueError naming ``fabric.scale_up.gpus_per_server`` unless it divides the ``n_hosts``
    hosts into at most 250 servers and, on ``rail_optimized``, equals ``fabric.gpus_per_server``."""
    g = fabric.scale_up.gpus_per_server
    if n_hosts % g or not 1 <= n_hosts // g <= MAX_SERVERS:
        raise ValueError(f"fabric.scale_up.gpus_per_server = {g} does not divide the fabric's {n_hosts} hosts into "
                         f"1..{MAX_SERVERS} servers of consecutive ranks")
    if fabric.kind == "rail_optimized" and g != fabric.gpus_per_server:
        raise ValueError(f"fabric.scale_up.gpus_per_server = {g} differs from fabric.gpus_per_server = "
                         f"{fabric.gpus_per_server}: the scale-up domain of a rail-optimized fabric is its server")


def add(layout: Layout, gpus_per_server: int, rate_bps: float, buffer_bytes: int) -> Layout:
    """``layout`` with one scale-up switch per ``gpus_per_server`` consecutive ranks (module docstring),
    its links at ``rate_bps`` with ``buffer_bytes`` egress buffers. Raises ValueError as :func:`check`."""
    n = len(layout.hosts)
    if gpus_per_server < 1 or n % gpus_per_server or n // gpus_per_server > MAX_SERVERS:
        raise ValueError(f"fabric.scale_up.gpus_per_server = {gpus_per_server} does not divide {n} hosts "
                         f"into 1..{MAX_SERVERS} servers")
    rid = layout.run_id
    switches: List[Switch] = []
    links: List[Link] = []
    nics: List[Nic] = []
    for s in range(1, n // gpus_per_server + 1):
        sw = Switch(f"{rid}u{s}", 0x4000 + s, "scaleup", s, f"10.255.{s}.0/24")
        switches.append(sw)
        for g in range(1, gpus_per_server + 1):
            host = layout.hosts[(s - 1) * gpus_per_server + g - 1]
            port = 1 + max((end.number for ln in layout.links_of(host.name) for end in (ln.a, ln.b)
                            if end.node == host.name), default=-1)
            links.append(Link(Port(host.name, port), Port(sw.name, g), float(rate_bps), buffer_bytes, SCALE_UP_PLANE))
            nics.append(Nic(host.name, port, f"10.255.{s}.{g}", f"02:ff:00:00:{s:02x}:{g:02x}", SCALE_UP_PLANE,
                            sw.subnet))
    order = {h.name: h.rank for h in layout.hosts}
    return replace(layout, switches=layout.switches + tuple(switches), links=layout.links + tuple(links),
                   nics=tuple(sorted(layout.nics + tuple(nics), key=lambda nic: (order[nic.host], nic.port))))
