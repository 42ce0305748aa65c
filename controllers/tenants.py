"""Tenant isolation: which host may reach which, and the ingress drop flows that enforce it.

Pure Python (no os-ken, no root; Python >= 3.9: the Ryu controller's too), shared by the
controller (controllers.ofplan, controllers.app) and the testbed (testbed.spec.tenants,
testbed.tenants).

The rule (:func:`allowed`): a packet from host ``src`` to host ``dst`` is allowed when either
of them is a shared host (a storage or service host every tenant may reach, and which may
answer any of them), or when both belong to the same tenant. A host in no tenant and not shared
reaches only the shared hosts (the scenario validation refuses such hosts while isolation is
on; a jobs placement may leave some idle).

Enforcement (:func:`drop_flows`): on each switch a host is attached to (its ingress leaf), one
flow per forbidden destination host: ``in_port=<host port>, ipv4, ipv4_dst=<dst>`` with no
actions (drop), at :data:`PRIO_TENANT_DROP`, above the host routes. Each drop is a flow of its
own, so its OpenFlow counters (n_packets, n_bytes) count what isolation dropped for that
(source host, destination host) pair: the testbed sums them per tenant pair
(testbed.tenants.drop_counters). The match is on the ingress port, not the source address, so a
host cannot escape by spoofing its source. Proxy ARP answers only allowed pairs
(controllers.ofplan.proxy_arp_mac), so a host never even learns another tenant's MAC.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Iterable, List, Mapping, Optional, Tuple

#: Priority of the isolation drops: above the host routes (controllers.ofplan.PRIO_HOST_ROUTE, 200),
#: below ARP to the controller (300) and the LLDP drop (400).
PRIO_TENANT_DROP = 250
#: The ``purpose`` label of an isolation drop: ``tenant-drop-<src>-<dst>`` (short host names).
DROP_PURPOSE_PREFIX = "tenant-drop-"


def allowed(host_tenant: Mapping[str, str], shared: Iterable[str], src: str, dst: str) -> bool:
    """True when ``src`` may send to ``dst`` (host names, both the same form, e.g. without the run id).

    ``host_tenant``: host -> tenant name; ``shared``: hosts every tenant may reach (and that may reach
    every host). A host never forms a pair with itself (False). Rule: either is shared, or both are in
    the same tenant; a host in no tenant reaches only the shared hosts."""
    if src == dst:
        return False
    shared = set(shared)
    if src in shared or dst in shared:
        return True
    t = host_tenant.get(src)
    return t is not None and t == host_tenant.get(dst)


def allowed_pairs(hosts: Iterable[str], host_tenant: Mapping[str, str], shared: Iterable[str]
                  ) -> FrozenSet[Tuple[str, str]]:
    """Every ordered (src, dst) pair of ``hosts`` (src != dst) that :func:`allowed` allows."""
    hosts, shared = list(hosts), set(shared)
    return frozenset((a, b) for a in hosts for b in hosts if allowed(host_tenant, shared, a, b))


@dataclass(frozen=True)
class TenantFilter:
    """What the controller enforces: ``host_tenant`` (host name without the run id -> tenant) and
    ``shared`` (host names without the run id), for the layout of run ``run_id``."""

    run_id: str
    host_tenant: Mapping[str, str]
    shared: FrozenSet[str]

    def short(self, name: str) -> str:
        """``tb12abh3`` -> ``h3`` (names of this run; others unchanged)."""
        return name[len(self.run_id):] if name.startswith(self.run_id) else name

    def allows(self, src: str, dst: str) -> bool:
        """:func:`allowed` on two host names (with or without the run id)."""
        return allowed(self.host_tenant, self.shared, self.short(src), self.short(dst))

    def tenant_of(self, host: str) -> Optional[str]:
        """The host's tenant; None for a shared host or one in no tenant."""
        return self.host_tenant.get(self.short(host))


def drop_flow_purpose(src: str, dst: str) -> str:
    """The ``purpose`` label of the drop from ``src`` to ``dst`` (short names)."""
    return f"{DROP_PURPOSE_PREFIX}{src}-{dst}"


def drop_flows(layout, switch: str, flt: TenantFilter) -> List[Tuple[int, Tuple[Tuple[str, object], ...], str]]:
    """The isolation drops of ``switch`` in ``layout`` (a topology.model.Layout, or one plane's view of it:
    topology.planes.views): ``[(priority, match, purpose)]``, one per (host attached to the switch,
    host of the layout it may not reach), the match ``in_port, eth_type=IPv4, ipv4_dst`` (os-ken
    OFPMatch keyword order). Empty for a switch without hosts."""
    out = []
    for host, port in layout.hosts_on(switch):
        for dst in layout.hosts:
            if dst.name != host.name and not flt.allows(host.name, dst.name):
                match = (("in_port", port), ("eth_type", 0x0800), ("ipv4_dst", dst.ip))
                out.append((PRIO_TENANT_DROP, match, drop_flow_purpose(flt.short(host.name), flt.short(dst.name))))
    return out


def tenant_pair(host_tenant: Mapping[str, str], shared: Iterable[str], host: str) -> str:
    """The label of ``host`` in tenant-pair tables: its tenant, ``shared``, or ``none``."""
    if host in set(shared):
        return "shared"
    return host_tenant.get(host, "none")


def filter_from_settings(run_id: str, settings) -> Optional[TenantFilter]:
    """The :class:`TenantFilter` of a controllers.contract.TenantSettings (None: no isolation)."""
    if settings is None:
        return None
    return TenantFilter(run_id, dict(settings.host_tenant), frozenset(settings.shared_hosts))


__all__ = ["DROP_PURPOSE_PREFIX", "PRIO_TENANT_DROP", "TenantFilter", "allowed", "allowed_pairs", "drop_flow_purpose",
           "drop_flows", "filter_from_settings", "tenant_pair"]
