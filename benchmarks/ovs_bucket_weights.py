"""What Open vSwitch does with select-group bucket weights, and what the ``weighted`` policy delivers.

For each weight ratio 1:w (w = 1, 2, 3, 7) on a 2-spine, 2-leaf fabric (20 Mbit/s, userspace OVS, the
os-ken controller), sends ``--flows`` one-datagram flows across the leaves twice: once with the
``weighted`` policy's equal-weight buckets (1 + w buckets), once after replacing the leaf's group with
two buckets of OVS weights 1 and w. Prints the light spine's share of flows against the target 1/(1+w)
and OVS's own rule: bucket score = (hash & 0xffff) x weight, highest wins, so the light bucket of 1:w
wins with probability 1/(2w) (for w >= 1; ofproto/ofproto-dpif-xlate.c ``group_best_live_bucket``).

Needs root and a running Open vSwitch. Usage: ``python benchmarks/ovs_bucket_weights.py [--flows 2000]``
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's packages and benchmarks.instruments, whatever the venv has installed

from benchmarks.instruments.flow_shares import raw_weight_group, uplink_flow_shares
from testbed.emulation.fabric import Fabric
from testbed.host.runlock import RunLock
from topology.naming import new_run_id
from testbed.spec.scenario import parse_scenario


def measure(w: int, flows: int) -> tuple[float, float]:
    """(weighted policy's share on s1, raw OVS weights' share on s1) for weights s1:1, s2:w."""
    weights = {"s1": 1, "s2": w}
    spec = parse_scenario({"name": "bucketw", "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1,
                                                         "host_link_bps": 20e6, "fabric_link_bps": 20e6},
                           "load_balance": {"policy": "weighted", "weights": weights},
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    rid = new_run_id()
    with tempfile.TemporaryDirectory() as tmp, RunLock(rid), Fabric(spec, rid, Path(tmp), "user") as fab:
        policy = uplink_flow_shares(fab, flows)["s1"]
        leaf = fab.layout.attachment(fab.layout.hosts[0].name).node
        subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "mod-group", leaf, raw_weight_group(fab.layout, weights)],
                       check=True)
        raw = uplink_flow_shares(fab, flows)["s1"]
    return policy, raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", type=int, default=2000)
    flows = ap.parse_args().flows
    print(f"# share of {flows} flows on the light spine (s1), weights s1:1, s2:w")
    print(f"{'w':>3} {'target':>8} {'weighted policy':>16} {'raw OVS weights':>16} {'OVS rule 1/(2w)':>16}")
    for w in (1, 2, 3, 7):
        policy, raw = measure(w, flows)
        print(f"{w:>3} {1 / (1 + w):>8.3f} {policy:>16.3f} {raw:>16.3f} {1 / (2 * w):>16.3f}")


if __name__ == "__main__":
    main()
