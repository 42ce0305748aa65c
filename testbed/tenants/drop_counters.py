"""What tenant isolation dropped: the OpenFlow counters of the controller's isolation drop flows.

The controller installs one drop flow per (source host, forbidden destination host) on the source's
ingress switch (controllers.tenants.drop_flows: priority ``PRIO_TENANT_DROP``, match ``in_port``,
IPv4, ``ipv4_dst``). :func:`read_drop_flows` dumps every switch's table 0 with ``ovs-ofctl
-O OpenFlow15 --no-names dump-flows`` and returns one row per planned drop with its
``n_packets``/``n_bytes`` (a planned drop missing from the switch reads ``installed: False``);
:func:`per_tenant_pair` sums them per ordered (source tenant, destination tenant) pair.
"""
from __future__ import annotations

import re
import subprocess

from controllers.tenants import PRIO_TENANT_DROP, TenantFilter, drop_flows
from topology import planes

_COUNT_RE = re.compile(r"n_packets=(\d+), n_bytes=(\d+)")
_PRIO_RE = re.compile(r"priority=(\d+)")
_IN_PORT_RE = re.compile(r"in_port=(\d+)")
_NW_DST_RE = re.compile(r"nw_dst=([\d.]+)")
#: columns of a drop-flow row
DROP_FIELDS = ("switch", "in_port", "src", "dst", "src_tenant", "dst_tenant", "installed", "packets", "bytes")


def parse_dump(text: str) -> dict[tuple[int, str], tuple[int, int]]:
    """``ovs-ofctl dump-flows`` output -> (in_port, ipv4_dst) -> (packets, bytes) of the isolation drops
    (priority :data:`controllers.tenants.PRIO_TENANT_DROP`, action drop)."""
    out = {}
    for line in text.splitlines():
        prio, counts = _PRIO_RE.search(line), _COUNT_RE.search(line)
        port, dst = _IN_PORT_RE.search(line), _NW_DST_RE.search(line)
        if not (prio and counts and port and dst) or int(prio.group(1)) != PRIO_TENANT_DROP:
            continue
        if not line.rstrip().endswith("actions=drop"):
            continue
        out[(int(port.group(1)), dst.group(1))] = (int(counts.group(1)), int(counts.group(2)))
    return out


def dump_flows(bridge: str) -> str:
    """Table 0 of ``bridge`` as ``ovs-ofctl`` prints it (numbers, not port names). RuntimeError on failure."""
    res = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "--no-names", "dump-flows", bridge, "table=0"],
                         capture_output=True, text=True, timeout=10)
    if res.returncode != 0:
        raise RuntimeError(f"ovs-ofctl dump-flows {bridge}: {res.stderr.strip()[:200]}")
    return res.stdout


def read_drop_flows(layout, tmap, dump=dump_flows) -> list[dict]:
    """One row per isolation drop the controller planned for ``layout`` (topology.model.Layout) and ``tmap``
    (testbed.spec.tenants.TenantMap with isolation on), with its counters (:data:`DROP_FIELDS`; switch and
    hosts without the run id). ``dump``: bridge -> dump-flows text (the switches are read once each)."""
    rid = layout.run_id
    flt = TenantFilter(rid, dict(tmap.host_tenant), frozenset(tmap.shared_hosts))
    rows = []
    for view in planes.views(layout):
        ip_host = {h.ip: h.name[len(rid):] for h in view.hosts}
        for sw in view.switches:
            planned = drop_flows(view, sw.name, flt)
            if not planned:
                continue
            seen = parse_dump(dump(sw.name))
            for _prio, match, _purpose in planned:
                m = dict(match)
                src = next(h.name[len(rid):] for h, port in view.hosts_on(sw.name) if port == m["in_port"])
                dst = ip_host[m["ipv4_dst"]]
                got = seen.get((m["in_port"], m["ipv4_dst"]))
                rows.append({"switch": sw.name[len(rid):], "in_port": m["in_port"], "src": src, "dst": dst,
                             "src_tenant": tmap.label(src), "dst_tenant": tmap.label(dst),
                             "installed": got is not None, "packets": got[0] if got else 0,
                             "bytes": got[1] if got else 0})
    return rows


def per_tenant_pair(rows: list[dict], tenants) -> list[dict]:
    """Packets and bytes dropped per ordered (src_tenant, dst_tenant) pair: every pair of distinct
    ``tenants`` (names; zeros included), then any other label pair the rows hold (e.g. ``none``)."""
    sums: dict[tuple[str, str], list[int]] = {(a, b): [0, 0] for a in tenants for b in tenants if a != b}
    for r in rows:
        s = sums.setdefault((r["src_tenant"], r["dst_tenant"]), [0, 0])
        s[0] += r["packets"]
        s[1] += r["bytes"]
    return [{"src_tenant": a, "dst_tenant": b, "dropped_pkts": p, "dropped_bytes": n} for (a, b), (p, n) in sums.items()]
