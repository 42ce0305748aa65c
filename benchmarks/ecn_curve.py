"""The ECN marker's measured curve against the RED formula, on a real fabric port.

One leaf, three hosts: h1 and h2 send into h3 at their full 10 Mbit/s, so the
leaf's port toward h3 is overloaded 2:1. For each target backlog its lossless
class buffer (tbf limit) is set to that target, the queue stays full just
below it, and the nftables marker (dataplane.ecn_marker, policy
dataplane.ecn_policy) marks ECT packets of the lossless class from the
1 ms samples of that class's backlog. Method: benchmarks.instruments.ecn_curve.

Prints one row per point: limit, mean sampled backlog, the RED formula at that
backlog, the measured CE fraction of ECT packets at the receiver, the error in
percentage points, and CE counts of Not-ECT and lossy-class ECT packets (must
be 0); then the marker's loop time (p50/p99) and PASS/FAIL against the
acceptance (every point within 5 pp, none marked below Kmin, only ECT marked).

Run under the fabric lock, as root:
``flock /tmp/fabric.lock .venv/bin/python benchmarks/ecn_curve.py [--seconds 3] [--json out.json]``
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's packages and benchmarks.instruments, whatever the venv has installed

from benchmarks.instruments.ecn_curve import EcnLoop, congested_port, fabric_spec, measure_point
from testbed.emulation.fabric import Fabric
from testbed.host.capabilities import probe
from testbed.host.runlock import RunLock
from topology.naming import new_run_id
from testbed.spec.scenario import parse_scenario

KMIN_BYTES, KMAX_BYTES, PMAX = 10_000, 50_000, 0.5
#: tbf limits: one below Kmin, five between Kmin and Kmax, one above Kmax
LIMITS_BYTES = (7_000, 16_000, 24_000, 32_000, 40_000, 48_000, 70_000)
TOLERANCE_PP = 5.0


def scenario(kmin=KMIN_BYTES, kmax=KMAX_BYTES, pmax=PMAX):
    """The benchmark's (and the integration test's) scenario: 1 leaf, 3 hosts, htb_classes, ECN on."""
    return parse_scenario({
        "name": "ecn_curve",
        "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 3, "queue_backend": "htb_classes",
                   "buffer_bytes": 100_000},
        "congestion": {"ecn": {"kmin_bytes": kmin, "kmax_bytes": kmax, "pmax": pmax}},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})


def run(limits, seconds: float) -> dict:
    spec = scenario()
    rid = new_run_id()
    with tempfile.TemporaryDirectory() as tmp, RunLock(rid), \
            Fabric(fabric_spec(spec), rid, Path(tmp), probe(rid).datapath) as fab:
        port = congested_port(fab, 2)
        loop = EcnLoop.for_run(spec, rid, fab.switch_ports, fab.queues)
        with loop:
            points = [measure_point(fab, loop, [0, 1], 2, port, b, seconds) for b in limits]
        return {"port": port, "kmin_bytes": KMIN_BYTES, "kmax_bytes": KMAX_BYTES, "pmax": PMAX,
                "backend": loop.marker.backend, "points": points, "loop_ms": loop.marker.loop_ms(),
                "nft_counts": loop.marker.counts[port], "missed_ticks": loop.sampler.missed_ticks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per point (after 0.7 s warm-up)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    res = run(LIMITS_BYTES, args.seconds)
    print(f"port {res['port']}  Kmin {KMIN_BYTES} B  Kmax {KMAX_BYTES} B  Pmax {PMAX}  marker {res['backend']}")
    print(f"{'limit_B':>8} {'backlog_B':>9} {'RED_p':>6} {'CE_frac':>7} {'err_pp':>6} {'ECT_n':>6} "
          f"{'notECT_CE':>9} {'lossyECT_CE':>11}")
    ok = True
    for p in res["points"]:
        err_pp = 100 * (p["ce_fraction"] - p["red_p"])
        below = p["backlog_mean_bytes"] < KMIN_BYTES
        ok &= abs(err_pp) <= TOLERANCE_PP and p["not_ect_ce"] == 0 and p["lossy_ect_ce"] == 0
        ok &= not below or p["ce_fraction"] == 0
        print(f"{p['limit_bytes']:>8} {p['backlog_mean_bytes']:>9.0f} {p['red_p']:>6.3f} {p['ce_fraction']:>7.3f} "
              f"{err_pp:>+6.1f} {sum(p['counts']['ect']):>6} {p['not_ect_ce']:>9} {p['lossy_ect_ce']:>11}")
    lm = res["loop_ms"]
    print(f"marker loop (sample -> actuated): p50 {lm['p50']} ms  p99 {lm['p99']} ms  over {lm['ticks']} ticks, "
          f"{res['missed_ticks']} missed; nft counters on the port (ECT seen, CE marked): {res['nft_counts']}")
    print("PASS" if ok else "FAIL", f"(every point within {TOLERANCE_PP} pp of RED, none below Kmin, only ECT marked)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
