"""Tenant isolation on a real fabric (issue 18 item 5): on the quickstart's fabric (2 spines, 4 leaves,
8 hosts) tenant alpha (h1-h4, leaves 1-2) runs a ring all-reduce while beta (h5-h7) and the shared host
h8 sit on leaves 3-4. Real probe packets from alpha to beta and back are dropped at the ingress leaf
(0 delivered, no ARP answer, each drop counted by its flow), probes to the shared host and within a
tenant arrive, and alpha's all-reduce keeps the busbw of the same run without tenants. A controller that
does not enforce the isolation the scenario asks for is caught: the run is NOT faithful."""
import json
import subprocess
import sys

from conftest import EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, REPO, assert_losses_accounted, run_scenario_file
from testbed.results.rundir import RunDir

FABRIC = """
name: {name}
seed: 1
fabric: {{spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M,
         buffer_bytes: 100KB, mtu_bytes: 4200}}
transport: {{payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}}
workload: {{collective: allreduce, algorithm: ring, ranks: 4, sizes: {{min_bytes: 1MiB, max_bytes: 1MiB}},
           iterations: 3, warmup_iterations: 1}}
"""
TENANTS = """
tenants:
  alpha: {hosts: [h1, h2, h3, h4]}
  beta: {hosts: [h5, h6, h7]}
shared_hosts: [h8]
"""
#: alpha's busbw/link with tenants may differ from the run without by at most this much (measured: within 0.005)
BUSBW_BAND = 0.03


def test_cross_tenant_probes_deliver_nothing_and_tenant_traffic_is_unaffected(tmp_path):
    _, s = run_scenario_file(tmp_path, FABRIC.format(name="tenants") + TENANTS, timeout=200, expect_rc=EXIT_FAITHFUL,
                             name="tenants")
    t = s["tenants"]
    print("probes:", [(p["src"], p["dst"], p["kind"], p["delivered_pkts"], p["sent_pkts"], p["arp_replied"])
                      for p in t["probes"]])
    print("drops:", t["drops"])
    assert t["isolation"] is True and t["proven"] is True and s["checks"]["isolation"]["status"] == "passed"
    probes = {(p["src"], p["dst"]): p for p in t["probes"]}
    assert set(probes) == {("h1", "h5"), ("h5", "h1"), ("h1", "h8"), ("h5", "h8"), ("h1", "h4"), ("h5", "h7")}
    for pair in (("h1", "h5"), ("h5", "h1")):  # across tenants: dropped, and the controller did not answer ARP
        p = probes[pair]
        assert p["sent_pkts"] == 20 and p["delivered_pkts"] == 0 and p["arp_replied"] is False, p
    for pair in (("h1", "h8"), ("h5", "h8"), ("h1", "h4"), ("h5", "h7")):  # shared host and own tenant: arrive
        p = probes[pair]
        assert p["delivered_pkts"] == p["sent_pkts"] == 20 and p["arp_replied"] is True, p
    # every cross-tenant packet was dropped by a counted flow at the ingress leaf: exactly the probes
    # (alpha's all-reduce stays inside alpha)
    drops = {(d["src_tenant"], d["dst_tenant"]): d for d in t["drops"]}
    assert drops[("alpha", "beta")]["dropped_pkts"] == 20 and drops[("beta", "alpha")]["dropped_pkts"] == 20
    assert drops[("alpha", "beta")]["dropped_bytes"] > 20 * 42
    # 4 alpha hosts x 3 beta hosts, both ways: 24 drop flows, all installed
    assert t["drop_flows"] == {"planned": 24, "installed": 24} and t["forbidden_pairs"] == 24
    table = RunDir.open(s["run_dir"]).table("tenant_drops")
    assert int(table["packets"].sum()) == 40 and set(table["switch"]) == {"l1", "l2", "l3", "l4"}
    assert_losses_accounted(s)
    _, base = run_scenario_file(tmp_path, FABRIC.format(name="no_tenants"), timeout=200, expect_rc=EXIT_FAITHFUL,
                                name="no_tenants")
    assert base["tenants"] is None  # summary.json has one shape: a block the run lacks is null
    with_t, without = s["sizes"][-1]["busbw_ratio"], base["sizes"][-1]["busbw_ratio"]
    print(f"alpha busbw/link {with_t:.4f} with tenants, {without:.4f} without")
    assert abs(with_t - without) <= BUSBW_BAND


#: a run whose controller is given no tenant settings (as a controller that ignores them would be): the
#: probes must catch it
LEAKY_RUN = """
import json, sys, dataclasses
from pathlib import Path
from testbed.emulation import fabric
from testbed.pipeline.runner import run
from testbed.spec.scenario import parse_scenario

real = fabric.controller_settings
fabric.controller_settings = lambda *a, **k: dataclasses.replace(real(*a, **k), tenants=None)
spec = parse_scenario({
    "name": "leaky", "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2, "mtu_bytes": 4200},
    "transport": {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4},
    "tenants": {"alpha": {"hosts": ["h1", "h2"]}, "beta": {"hosts": ["h3"]}}, "shared_hosts": ["h4"],
    "workload": {"ranks": 2, "sizes": {"min_bytes": 262144, "max_bytes": 262144}, "iterations": 2,
                 "warmup_iterations": 0}})
out = run(spec, sys.argv[1], quiet=True)
print(json.dumps({"exit_code": out.exit_code, "run_dir": str(out.run_dir)}))
"""


def test_a_controller_that_leaks_across_tenants_makes_the_run_not_faithful(tmp_path):
    res = subprocess.run([sys.executable, "-c", LEAKY_RUN, str(tmp_path / "leaky")], cwd=REPO, capture_output=True,
                         text=True, timeout=200)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    s = RunDir.open(out["run_dir"]).summary
    print(s["violations"])
    assert out["exit_code"] == EXIT_NOT_FAITHFUL and s["faithful"] is False
    assert s["checks"]["isolation"]["status"] == "failed" and s["tenants"]["proven"] is False
    assert [n for n, c in s["checks"].items() if c["status"] == "failed"] == ["isolation"], s["violations"]
    probes = {(p["src"], p["dst"]): p for p in s["tenants"]["probes"]}
    assert probes[("h1", "h3")]["delivered_pkts"] == 20 and probes[("h1", "h3")]["arp_replied"] is True
    assert any("isolation broken: probe h1 (alpha) -> h3 (beta) delivered 20 of 20 packets, ARP answered" in v
               for v in s["violations"])
