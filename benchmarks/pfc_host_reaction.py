"""How fast a host obeys PFC frames: reaction (drain) and resume latency over many pauses, real fabric.

Set-up and method: benchmarks.instruments.pfc_host_reaction (one leaf, two hosts at 10 Mbit/s streaming, tcpdump at
h1's end of its link). The leaf's port toward h1 sends ``--pauses`` PFC frames of ``--pause-ms`` of
quanta (left to expire), ``--every-ms`` apart, then as many pauses held by a PfcSender (quanta of a
quarter of the pause, refreshed) and ended by a resume frame. Prints p50/p99/max of

- drain (ms): last data packet of h1 after the frame; what h1 had already handed to its NIC;
- restart (ms): first data packet after the pause's end (expiry or resume frame);

and the transport's losses (must be 0). Run under the fabric lock, as root:
``flock /tmp/fabric.lock .venv/bin/python benchmarks/pfc_host_reaction.py [--pauses 10]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's packages and benchmarks.instruments, whatever the venv has installed

from benchmarks.instruments.pfc_host_reaction import (LINK_BPS, capture, expiry_s, read_capture, reaction, scenario,
                                                      streaming)
from testbed.emulation.agents import AgentGroup, transport_params
from testbed.emulation.fabric import Fabric
from dataplane.pfc_frames import PfcSender, send_pfc
from testbed.host.capabilities import probe
from testbed.host.runlock import RunLock
from topology.naming import new_run_id
from traffic.wire.pfc import LOSSLESS_PRIORITY, quanta_for_s


def _row(name: str, values_s: list[float]) -> str:
    ms = np.array(values_s) * 1e3
    return (f"{name:<22} n={len(ms):3d}  p50 {np.percentile(ms, 50, method='inverted_cdf'):6.2f} ms  "
            f"p99 {np.percentile(ms, 99, method='inverted_cdf'):6.2f} ms  max {ms.max():6.2f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pauses", type=int, default=10, help="pauses of each kind (expiry, resume frame)")
    ap.add_argument("--pause-ms", type=float, default=100.0)
    ap.add_argument("--every-ms", type=float, default=400.0)
    args = ap.parse_args()
    spec, rid = scenario(), new_run_id()
    pause_s, every_s = args.pause_ms / 1e3, args.every_ms / 1e3
    run_s = 2 * args.pauses * every_s + 2
    with tempfile.TemporaryDirectory() as tmp, RunLock(rid), Fabric(spec, rid, Path(tmp), probe().datapath) as fab:
        pcap = Path(tmp) / "link.pcap"
        h1 = fab.layout.hosts[0]
        port = fab.layout.attachment(h1.name).intf
        with AgentGroup(fab, transport_params(spec, rto_us=100_000), spec.seed, lambda r: [1 - r]) as agents:
            size = int(run_s * LINK_BPS / 8 * 1.1)
            with capture(fab.net.get(h1.name), h1.intf, pcap), streaming(agents, size, timeout_s=4 * run_s):
                time.sleep(0.5)
                q = quanta_for_s(pause_s, LINK_BPS)
                for _ in range(args.pauses):
                    send_pfc(port, 1 << LOSSLESS_PRIORITY, [0, 0, 0, q, 0, 0, 0, 0])
                    time.sleep(every_s)
                with PfcSender(port, LINK_BPS) as sender:
                    for _ in range(args.pauses):
                        sender.pause(LOSSLESS_PRIORITY, quanta_for_s(pause_s / 4, LINK_BPS))
                        time.sleep(pause_s)
                        sender.resume(LOSSLESS_PRIORITY)
                        time.sleep(every_s - pause_s)
            stats = agents.stats()
        pfc, data = read_capture(pcap, h1.ip)
    expiry = [(t, t + expiry_s(f)) for t, f in pfc[:args.pauses]]
    held, start = [], None  # held pauses: first frame with quanta (then refreshes) .. the quanta-0 frame
    for t, f in pfc[args.pauses:]:
        if f.c3_pause_time and start is None:
            start = t
        elif not f.c3_pause_time and start is not None:
            held.append((start, t))
            start = None
    by_expiry = [reaction(data, a, b) for a, b in expiry]
    by_resume = [reaction(data, a, b) for a, b in held]
    print(f"PFC host reaction: {args.pauses} pauses of {args.pause_ms:.0f} ms ended by expiry, {len(held)} held "
          f"(refreshed) and ended by a resume frame; host link {LINK_BPS / 1e6:.0f} Mbit/s, path MTU 4096")
    print(_row("drain (expiry)", [r["drain_s"] for r in by_expiry]))
    print(_row("restart after expiry", [r["restart_s"] for r in by_expiry]))
    print(_row("drain (held)", [r["drain_s"] for r in by_resume]))
    print(_row("restart after resume", [r["restart_s"] for r in by_resume]))
    lost = sum(q.counters.retx_pkts + q.counters.timeouts for s in stats for q in s.requesters)
    print(f"retransmissions + timeouts: {lost}; h1 pause frames received {stats[0].pfc.pause_frames}, "
          f"resumes {stats[0].pfc.resume_frames}, paused {stats[0].pfc.paused_ns / 1e9:.3f} s")
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
