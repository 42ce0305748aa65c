"""What a server-crossing SSH tunnel costs: the same fabric on one server and split over two.

Builds a two-server lab on this machine (testbed.cluster.servers.LocalServers) and runs
testbed.cluster.probe ``--rounds`` times each way, alternating: all nodes on srv1 ("single"),
then placed by pod over srv1 and srv2 ("split": leaf 2 and its hosts on srv2, the leaf-spine
link is a ``ssh -w`` tunnel). The far path (host 1 -> leaf 1 -> spine -> leaf 2 -> host 3)
is the same three switches both ways, so the RTT difference is the tunnel's cost (two
crossings per round trip). Prints one JSON object: per mode the median build_s, stop_s,
far/near RTT (us), TCP bit/s (unshaped links) and the UDP flow's received bit/s and losses,
then ``tunnel_rtt_us`` (split minus single, far path, per round trip) and ``tunnel_cpu_us_per_packet``
(CPU the ``ssh -w`` client and its sshd used per UDP packet of the flow across the tunnel, both ends together:
what a crossing link costs the servers on top of the switches' own per-packet cost).

Needs root, openssh-server, sudo, Open vSwitch binaries; takes ``--lock`` around the whole run::

    .venv/bin/python benchmarks/cluster_tunnel.py --lock /tmp/fabric.lock [--rounds 3]
"""
from __future__ import annotations

import argparse
import fcntl
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.cluster.servers import LocalServers  # noqa: E402


def _probe(lab: LocalServers, servers: str, out: Path, extra) -> dict:
    env = lab.console_env()
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run(lab.console_argv([sys.executable, "-m", "testbed.cluster.probe", "--servers", servers,
                                           "--out", str(out), *extra]),
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"probe {servers} failed: {res.stderr[-2000:]}")
    return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lock", default=None)
    ap.add_argument("--pings", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    lock = open(a.lock, "w") if a.lock else None
    if lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
    runs = {"single": [], "split": []}
    extra = ["--pings", str(a.pings), "--seconds", str(a.seconds)]
    with tempfile.TemporaryDirectory() as tmp, LocalServers(2) as lab:
        for i in range(a.rounds):
            for mode, servers in (("single", "srv1"), ("split", "srv1,srv2")):
                runs[mode].append(_probe(lab, servers, Path(tmp) / f"{mode}{i}.json", extra))
    med = statistics.median
    summary = {}
    for mode, rs in runs.items():
        summary[mode] = {
            "build_s": med(r["build_s"] for r in rs), "stop_s": med(r["stop_s"] for r in rs),
            "rtt_far_us": med(r["rtt_far_us"]["avg_us"] for r in rs),
            "rtt_far_mdev_us": med(r["rtt_far_us"]["mdev_us"] for r in rs),
            "rtt_near_us": med(r["rtt_near_us"]["avg_us"] for r in rs),
            "tcp_bps": med(r["tcp_bps"] for r in rs),
            "udp_received_bps": med(r["udp"]["received_bps"] for r in rs),
            "udp_lost_packets": max(r["udp"]["lost_packets"] for r in rs),
        }
    summary["tunnel_rtt_us"] = summary["split"]["rtt_far_us"] - summary["single"]["rtt_far_us"]
    # CPU of the tunnel processes (ssh client on one server, sshd on the other) per UDP packet that crossed
    split = runs["split"]
    summary["tunnel_cpu_us_per_packet"] = med(r["udp"]["tunnel_cpu_s"] * 1e6 / max(r["udp"]["packets"] or 1, 1)
                                              for r in split)
    summary["rounds"] = a.rounds
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
