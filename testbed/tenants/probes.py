"""Probes that prove isolation with real packets: across tenants they must be dropped, to shared hosts
and within a tenant delivered.

:func:`plan_probes` picks, for a testbed.spec.tenants.TenantMap with isolation on:

* ``cross``: for every ordered pair of tenants (A, B), A's first host -> B's first host; expected
  ``blocked`` (0 packets delivered, no ARP answer);
* ``shared``: every tenant's first host -> every shared host; expected ``delivered`` (every packet);
* ``own``: a tenant's first host -> its last (tenants of 2 hosts or more); expected ``delivered``: the
  control that shows the probe itself works, so a blocked probe's 0 means the fabric stopped it.

:func:`run_probes` runs them all at once on the live fabric (testbed.tenants.probe_agent: a UDP
counter on each destination host, raw frames from each source host, ``count`` frames per probe)
and returns one row per probe (:data:`PROBE_FIELDS`).
"""
from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from dataclasses import dataclass

#: UDP port the probe receivers listen on (inside the run's host namespaces only)
PROBE_UDP_PORT = 9999
#: frames per probe and their spacing, s; how long a sender waits for an ARP answer, s
PROBE_COUNT, PROBE_INTERVAL_S, ARP_WAIT_S = 20, 0.005, 0.5
#: columns of a probe row (summary.json ``tenants.probes``)
PROBE_FIELDS = ("id", "kind", "src", "dst", "src_tenant", "dst_tenant", "expected", "sent_pkts", "delivered_pkts",
                "arp_replied", "passed")


@dataclass(frozen=True)
class Probe:
    """One probe: ``kind`` cross | shared | own, from host ``src`` to ``dst`` (short names), and whether
    its packets must arrive (``expect_delivered``)."""

    kind: str
    src: str
    dst: str
    expect_delivered: bool

    @property
    def id(self) -> str:
        return f"{self.src}-{self.dst}"


def plan_probes(tmap) -> list[Probe]:
    """The probes for ``tmap`` (module docstring); [] when isolation is off."""
    if not tmap.isolation:
        return []
    firsts = {t: hosts[0] for t, hosts in tmap.tenants.items() if hosts}
    out = [Probe("cross", firsts[a], firsts[b], False) for a in firsts for b in firsts if a != b]
    out += [Probe("shared", firsts[a], s, True) for a in firsts for s in tmap.shared_hosts]
    out += [Probe("own", hosts[0], hosts[-1], True) for hosts in tmap.tenants.values() if len(hosts) >= 2]
    return out


def _lines_until(proc: subprocess.Popen, want: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip() == want:
                return
    raise RuntimeError(f"isolation probe receiver did not start within {timeout_s:g} s (exit {proc.poll()})")


def _json_line(proc: subprocess.Popen, what: str, timeout_s: float, close_stdin: bool = False) -> dict:
    try:  # communicate(input="") closes stdin: the receiver's cue that the senders are done
        out, err = proc.communicate(input="" if close_stdin else None, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"isolation probe {what} did not finish within {timeout_s:g} s") from None
    lines = [ln for ln in (out or "").splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"isolation probe {what} failed (exit {proc.returncode}): {(err or '').strip()[-300:]}")
    return json.loads(lines[-1])


def run_probes(fab, tmap, probes: list[Probe], count: int = PROBE_COUNT, timeout_s: float = 20.0) -> list[dict]:
    """Run ``probes`` on the live fabric ``fab`` (testbed.emulation.fabric.Fabric) for ``tmap``; one row per
    probe (:data:`PROBE_FIELDS`): ``delivered_pkts`` counted by the destination, ``passed`` when a blocked
    probe delivered 0 and got no ARP answer, and a delivered one all ``sent_pkts`` and an ARP answer. Raises RuntimeError when a probe process
    fails or hangs (every process it started is ended first)."""
    if not probes:
        return []
    rid = fab.run_id
    hosts = {h.name[len(rid):]: h for h in fab.layout.hosts}
    py = [sys.executable, "-m", "testbed.tenants.probe_agent"]
    receivers: dict[str, subprocess.Popen] = {}
    senders: list[tuple[Probe, subprocess.Popen]] = []
    try:
        for dst in sorted({p.dst for p in probes}):
            receivers[dst] = fab.net.get(hosts[dst].name).popen(
                py + ["rx", "--port", str(PROBE_UDP_PORT), "--max-s", str(timeout_s)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for proc in receivers.values():
            _lines_until(proc, "ready", timeout_s)
        for p in probes:
            src, dst = hosts[p.src], hosts[p.dst]
            senders.append((p, fab.net.get(src.name).popen(
                py + ["tx", "--ifname", src.intf, "--src-mac", src.mac, "--src-ip", src.ip, "--dst-mac", dst.mac,
                      "--dst-ip", dst.ip, "--id", p.id, "--port", str(PROBE_UDP_PORT), "--count", str(count),
                      "--interval-s", str(PROBE_INTERVAL_S), "--arp-wait-s", str(ARP_WAIT_S)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        sent = {p.id: _json_line(proc, f"sender {p.id}", timeout_s) for p, proc in senders}
        time.sleep(0.2)  # the last frames cross the fabric
        received: dict[str, int] = {}
        for dst, proc in receivers.items():
            received.update(_json_line(proc, f"receiver on {dst}", timeout_s, close_stdin=True)["received"])
    finally:
        for proc in list(receivers.values()) + [proc for _, proc in senders]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    rows = []
    for p in probes:
        n_sent, n_got = sent[p.id]["sent"], received.get(p.id, 0)
        arp = bool(sent[p.id]["arp_replied"])  # proxy ARP must answer exactly the allowed pairs
        ok = arp == p.expect_delivered and ((n_got == n_sent) if p.expect_delivered else (n_got == 0))
        rows.append({"id": p.id, "kind": p.kind, "src": p.src, "dst": p.dst, "src_tenant": tmap.label(p.src),
                     "dst_tenant": tmap.label(p.dst), "expected": "delivered" if p.expect_delivered else "blocked",
                     "sent_pkts": n_sent, "delivered_pkts": n_got, "arp_replied": arp,
                     "passed": ok})
    return rows
