"""Build a small spine-leaf over servers with Mininet's cluster engine and measure it.

Run where the servers are reachable by ssh (for the one-machine lab: in its console,
:meth:`testbed.cluster.servers.LocalServers.console_argv`)::

    python -m testbed.cluster.probe --servers srv1,srv2 --out probe.json

Builds 1 spine, ``--leaves`` leaves with ``--hosts-per-leaf`` hosts (placement policy ``pod``:
leaves split over the servers, only leaf-spine links cross), then measures from the first
host to the first host of the last leaf (on the last server) and to its leaf neighbour:
ping RTT (``--pings`` at 20 ms), an iperf3 TCP flow and an iperf3 UDP flow at ``--udp-bps``,
and the bytes counted on every tunnel interface. Prints (and writes) one JSON object with
keys ``build_s``, ``stop_s``, ``placement``, ``rtt_far_us``/``rtt_near_us`` (avg, mdev, loss),
``tcp_bps``, ``udp`` (sent/received bit/s, lost packets, ``tunnel_cpu_s``: CPU seconds the tunnel processes,
both ends, used while the UDP flow ran), ``tunnel_bytes`` (per tunnel
interface: growth during the measurements). Exit 0 when the far ping answered.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Dict

from testbed.cluster.engine import ClusterFabric
from topology.placement import place
from topology import spine_leaf
from topology.naming import new_run_id

_RTT_RE = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_LOSS_RE = re.compile(r"(\d+) packets transmitted, (\d+) received")


def ping_stats(output: str) -> Dict[str, float]:
    """``{"sent", "received", "avg_us", "mdev_us"}`` from iputils ping's summary (avg/mdev
    None when nothing came back). Raises ValueError when there is no summary line."""
    m = _LOSS_RE.search(output)
    if not m:
        raise ValueError(f"no ping summary in {output[-300:]!r}")
    r = _RTT_RE.search(output)
    return {"sent": int(m.group(1)), "received": int(m.group(2)),
            "avg_us": float(r.group(2)) * 1e3 if r else None, "mdev_us": float(r.group(4)) * 1e3 if r else None}


def _iperf3(client, server, args: str) -> dict:
    server.cmd("iperf3 -s -1 -D -p 5201 >/dev/null 2>&1")
    time.sleep(0.5)
    raw = client.cmd(f"iperf3 -c {server.IP()} -p 5201 -J {args}").replace("\r", "")
    start = raw.find("{")
    return json.loads(raw[start:]) if start >= 0 else {"error": raw[-300:]}


#: on a server: "PID UTIME STIME" (clock ticks) of every process holding /dev/net/tun (both ends of an ssh -w tunnel)
_TUN_HOLDERS = ("for d in /proc/[0-9]*; do if ls -l $d/fd 2>/dev/null | grep -q 'dev/net/tun'; then "
                "set -- $(cat $d/stat 2>/dev/null); echo $1 ${14} ${15}; fi; done")


def tunnel_cpu_s(fab: ClusterFabric) -> Dict[str, float]:
    """``"server:pid"`` -> CPU seconds (user + system) used so far by each process holding a tunnel device on a
    server with a tunnel end (the ``ssh -w`` client on one side, its sshd on the other), read on that server."""
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    out: Dict[str, float] = {}
    seen = set()
    for sw, _intf, server in fab.tunnels:
        if server in seen:
            continue
        seen.add(server)
        for line in fab.net.get(sw).cmd(_TUN_HOLDERS).splitlines():
            parts = line.split()
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                out[f"{server}:{parts[0]}"] = (int(parts[1]) + int(parts[2])) * tick_s
    return out


def measure(fab: ClusterFabric, pings: int, udp_bps: float, seconds: float) -> dict:
    """The measurements of the module docstring on a started fabric."""
    hosts = fab.layout.hosts
    per_leaf = sum(1 for h in hosts if fab.layout.attachment(h.name).node == fab.layout.attachment(hosts[0].name).node)
    src, near, far = fab.host(0), fab.host(1) if per_leaf > 1 else None, fab.host(len(hosts) - per_leaf)
    src.cmd(f"ping -c 3 -i 0.2 {far.IP()}")  # learn MACs everywhere first
    before = fab.tunnel_bytes()
    out = {"far_host": far.name, "near_host": near.name if near else None}
    out["rtt_far_us"] = ping_stats(src.cmd(f"ping -q -c {pings} -i 0.02 {far.IP()}"))
    if near is not None:
        src.cmd(f"ping -c 2 -i 0.2 {near.IP()}")
        out["rtt_near_us"] = ping_stats(src.cmd(f"ping -q -c {pings} -i 0.02 {near.IP()}"))
    tcp = _iperf3(src, far, f"-t {seconds:g}")
    out["tcp_bps"] = tcp.get("end", {}).get("sum_received", {}).get("bits_per_second")
    cpu_before = tunnel_cpu_s(fab)
    udp = _iperf3(src, far, f"-u -b {int(udp_bps)} -l 1000 -t {seconds:g}")
    cpu_after = tunnel_cpu_s(fab)
    s = udp.get("end", {}).get("sum", {})
    out["udp"] = {"offered_bps": udp_bps, "received_bps": s.get("bits_per_second"),
                  "lost_packets": s.get("lost_packets"), "packets": s.get("packets")}
    # the tunnel processes' CPU while the UDP flow crossed (pids on one machine may be listed by two servers)
    by_pid = {k.split(":")[1]: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after}
    out["udp"]["tunnel_cpu_s"] = sum(by_pid.values())
    after = fab.tunnel_bytes()
    out["tunnel_bytes"] = {k: {d: after[k][d] - before[k][d] for d in ("tx_bytes", "rx_bytes")} for k in after}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", required=True, help="comma-separated server names or addresses")
    ap.add_argument("--leaves", type=int, default=2)
    ap.add_argument("--hosts-per-leaf", type=int, default=2)
    ap.add_argument("--link-bps", type=float, default=None, help="shape every link (bit/s); default unshaped")
    ap.add_argument("--pings", type=int, default=50)
    ap.add_argument("--udp-bps", type=float, default=10e6)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--ready-file", default=None, help="write the run id here once the fabric is up")
    a = ap.parse_args(argv)
    servers = [s for s in a.servers.split(",") if s]
    layout = spine_leaf.build(new_run_id(), spines=1, leaves=a.leaves, hosts_per_leaf=a.hosts_per_leaf)
    placement = place(layout, servers, "pod")
    result = {"servers": servers, "placement": placement.summary(layout)}
    fab = ClusterFabric(layout, placement, link_bps=a.link_bps)
    try:
        fab.start()
        result["build_s"] = fab.build_s
        if a.ready_file:
            with open(a.ready_file, "w") as f:
                f.write(layout.run_id + "\n")
        result["tunnels"] = [list(t) for t in fab.tunnels]
        result.update(measure(fab, a.pings, a.udp_bps, a.seconds))
    finally:
        t0 = time.monotonic()
        fab.stop()
        result["stop_s"] = time.monotonic() - t0
        text = json.dumps(result, indent=1)
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text + "\n")
    return 0 if result.get("rtt_far_us", {}).get("received") else 1


if __name__ == "__main__":
    sys.exit(main())
