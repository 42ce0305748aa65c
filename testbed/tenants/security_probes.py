"""Security probes: what a host of one tenant can do to another tenant's hosts on the live fabric.

The run's own probes (testbed.tenants.probes) show the drop flows work for well-behaved senders.
These play an attacker in tenant A's first host (scapy, testbed.tenants.security_agent) against
tenant B's first host, and each must fail:

==========  ===================================================================  ==================
probe       what A's host sends                                                  must be
==========  ===================================================================  ==================
``arp``     ARP who-has B's address (broadcast)                                  0 answered
``ping``    ICMP echo to B, straight to B's MAC (learned elsewhere)              0 delivered/answered
``roce``    RoCEv2 (UDP 4791, BTH SEND_ONLY) to B's queue pair 1, at B's MAC     0 delivered/answered
``spoof``   UDP with B's source MAC and IP, to each host A may reach (own          0 delivered
            tenant, shared hosts)
==========  ===================================================================  ==================

and, within tenant A (first -> last host), the same ping and ARP must all arrive (the control: the
probe itself works, so a 0 above means the fabric stopped it).

:func:`security_probes` plans them; :func:`run_security_probes` runs them (a counter on every
destination's interface, one attacker) and returns one row per probe (:data:`FIELDS`);
:func:`table` prints them.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from testbed.tenants.probes import _json_line, _lines_until

#: packets per probe
COUNT = 5
#: the queue pair the RoCE probe targets: QP 1, the GSI queue pair every RDMA device has
ROCE_QPN = 1
#: columns of a probe row
FIELDS = ("probe", "src", "dst", "expected", "sent", "answered", "delivered", "passed")


@dataclass(frozen=True)
class SecurityProbe:
    """One probe: ``kind`` (arp | ping | roce | spoof) from host ``src`` to ``dst`` (short names);
    ``spoof_as``: the host whose MAC and IP a spoof probe forges; ``expect_through``: True for the
    within-tenant controls (every packet answered/delivered), False for the attacks (none)."""

    kind: str
    src: str
    dst: str
    expect_through: bool
    spoof_as: str = ""

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.src}-{self.dst}" + (f"-as-{self.spoof_as}" if self.spoof_as else "")


def security_probes(tmap, attacker_tenant: str, victim_tenant: str) -> list[SecurityProbe]:
    """The probes from ``attacker_tenant``'s first host against ``victim_tenant``'s first host, on
    ``tmap`` (testbed.spec.tenants.TenantMap, isolation on). ValueError naming an unknown tenant."""
    for t in (attacker_tenant, victim_tenant):
        if t not in tmap.tenants:
            raise ValueError(f"tenant {t!r}: allowed {sorted(tmap.tenants)}")
    a_hosts, victim = tmap.tenants[attacker_tenant], tmap.tenants[victim_tenant][0]
    a = a_hosts[0]
    out = [SecurityProbe(k, a, victim, False) for k in ("arp", "ping", "roce")]
    reachable = [h for h in a_hosts[1:]] + list(tmap.shared_hosts)
    out += [SecurityProbe("spoof", a, d, False, spoof_as=victim) for d in reachable]
    if len(a_hosts) >= 2:
        out += [SecurityProbe(k, a, a_hosts[-1], True) for k in ("arp", "ping")]
    return out


def run_security_probes(fab, probes: list[SecurityProbe], count: int = COUNT, timeout_s: float = 30.0
                        ) -> list[dict]:
    """Run ``probes`` (one attacker: every ``src`` the same) on the live fabric ``fab``
    (testbed.emulation.fabric.Fabric); one row per probe (:data:`FIELDS`): ``sent`` packets,
    ``answered`` (ARP replies, echo replies, anything back from the destination), ``delivered``
    (counted at the destination's interface; ``None`` for ARP, which carries no marker), ``passed``.
    ValueError for probes of several sources; RuntimeError when a probe process fails or hangs (every
    process it started is ended first)."""
    if not probes:
        return []
    if len({p.src for p in probes}) != 1:
        raise ValueError(f"security probes from several hosts {sorted({p.src for p in probes})}: allowed one")
    rid = fab.run_id
    hosts = {h.name[len(rid):]: h for h in fab.layout.hosts}
    attacker = hosts[probes[0].src]
    agent = [sys.executable, "-m", "testbed.tenants.security_agent"]
    counters, procs = {}, []
    try:
        for dst in sorted({p.dst for p in probes}):
            counters[dst] = fab.net.get(hosts[dst].name).popen(
                agent + ["count", "--ifname", hosts[dst].intf, "--max-s", str(timeout_s)], stdin=-1, stdout=-1,
                stderr=-1, text=True)
            procs.append(counters[dst])
        for proc in counters.values():
            _lines_until(proc, "ready", timeout_s)
        spec = [{"id": p.id, "kind": p.kind, "count": count, "dst_ip": hosts[p.dst].ip, "dst_mac": hosts[p.dst].mac,
                 "src_ip": hosts[p.spoof_as].ip if p.spoof_as else attacker.ip,
                 "src_mac": hosts[p.spoof_as].mac if p.spoof_as else attacker.mac, "qpn": ROCE_QPN} for p in probes]
        proc = fab.net.get(attacker.name).popen(agent + ["attack", "--ifname", attacker.intf, "--src-ip", attacker.ip,
                                                         "--probes", json.dumps(spec)], stdout=-1, stderr=-1, text=True)
        procs.append(proc)
        sent = _json_line(proc, f"attacker on {probes[0].src}", timeout_s)
        delivered: dict[str, int] = {}
        for dst, c in counters.items():
            delivered.update(_json_line(c, f"counter on {dst}", timeout_s, close_stdin=True)["delivered"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    rows = []
    for p in probes:
        n, ans = sent[p.id]["sent"], sent[p.id]["answered"]
        got = None if p.kind == "arp" else delivered.get(p.id, 0)
        if p.expect_through:
            ok = ans == n and got in (None, n)
        else:
            ok = ans == 0 and got in (None, 0)
        rows.append({"probe": p.id, "src": p.src, "dst": p.dst, "expected": "through" if p.expect_through else "fail",
                     "sent": n, "answered": ans, "delivered": got, "passed": ok})
    return rows


def table(rows: list[dict]) -> str:
    """The probe rows as an aligned text table (one line per probe, a header)."""
    cells = [FIELDS] + [tuple("-" if r[f] is None else str(r[f]) for f in FIELDS) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(FIELDS))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(FIELDS))).rstrip() for c in cells)


__all__ = ["COUNT", "FIELDS", "ROCE_QPN", "SecurityProbe", "run_security_probes", "security_probes", "table"]
