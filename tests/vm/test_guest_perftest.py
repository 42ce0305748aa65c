"""Guest tier: Soft-RoCE verbs traffic (perftest over rdma_rxe) through the emulated fabric, in a scripts/vm guest.

Run by scripts/vm-tier (``-m vm``); skipped elsewhere (this machine's kernel has no rdma_rxe). The test
writes its wall time into ``$TESTBED_VM_RESULTS/vm-tier-times.json`` and its figures into
``perftest-figures.json``.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

# the guest tier's gate (skipped unless -m vm inside a scripts/vm guest) and its time record
from test_guest_tier import RESULTS, _only_in_guest, _record_time  # noqa: F401

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.vm

LINK_BPS = 10e6
LAT_ITERATIONS, BW_ITERATIONS, BW_SIZE_BYTES = 200, 100, 4096
SCENARIO = f"""
name: vm_rxe_perftest
seed: 1
fabric: {{spines: 1, leaves: 1, hosts_per_leaf: 2, host_link_bps: {LINK_BPS:g}, fabric_link_bps: {LINK_BPS:g},
         datapath: kernel}}
workload:
  perftest:
    - {{test: ib_send_lat, src: h1, dst: h2, size_bytes: 64, iterations: {LAT_ITERATIONS}}}
    - {{test: ib_write_bw, src: h1, dst: h2, size_bytes: {BW_SIZE_BYTES}, iterations: {BW_ITERATIONS}}}
"""


def test_perftest_over_rxe_counted_by_the_switch(tmp_path):
    """``workload.perftest``: ``ib_send_lat`` (64 B x 200) and ``ib_write_bw`` (4 KiB x 100) from h1 to h2 on
    the tiny kernel-datapath fabric at 10 Mbit/s. Both report; the write bandwidth is above 0 and below
    the host link's rate (the shaper is on the path); the switch port facing h2 sent at least the
    packets the messages need (ceil(size / path MTU) each; both ways for the ping-pong), by its kernel
    counter (perftest.csv) and by the queue counters the run samples (ports.csv); afterwards no rxe
    device, bridge interface, Open vSwitch bridge or namespace is left."""
    scenario = tmp_path / "perftest.yaml"
    scenario.write_text(SCENARIO)
    results = Path(RESULTS) / "perftest-run"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-X", "faulthandler", "-m", "testbed.cli", "run", str(scenario),
                          "--results", str(results)], capture_output=True, text=True, timeout=1500, cwd=REPO)
    _record_time("perftest_run_s", time.monotonic() - t0)
    (Path(RESULTS) / "perftest-run.out").write_text(res.stdout + res.stderr)
    assert res.returncode in (0, 3, 6), f"testbed run exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    (run_dir,) = [p.parent for p in results.glob("*/summary.json")]
    summary = json.loads((run_dir / "summary.json").read_text())
    runs = pd.read_csv(run_dir / "perftest.csv")
    print(runs.to_string())
    assert list(runs["status"]) == ["done", "done"], runs[["name", "status", "error"]]
    assert summary["perftest"]["failed"] == 0
    lat, bw = runs.iloc[0], runs.iloc[1]
    assert 0 < lat["t_min_us"] <= lat["t_typical_us"] <= lat["t_p99_us"] <= lat["t_max_us"]
    assert 0 < bw["bw_avg_bps"] < LINK_BPS, bw  # message payload cannot pass a 10 Mbit/s shaper faster
    for r in (lat, bw):
        assert r["switch_tx_pkts_to_dst"] >= r["roce_pkts_min"] / (2 if r["test"].endswith("_lat") else 1), r
    assert lat["switch_tx_pkts_to_src"] >= lat["roce_pkts_min"] / 2  # the pong of every ping
    assert lat["roce_pkts_min"] == 2 * LAT_ITERATIONS
    assert bw["roce_pkts_min"] == BW_ITERATIONS * -(-BW_SIZE_BYTES // int(bw["mtu_bytes"]))

    # the run's own queue counters (ports.csv) on the leaf port facing h2 agree
    from testbed.emulation.perftest import switch_port_facing
    from testbed.spec.scenario import parse_scenario
    from testbed.spec.yaml_loader import load_yaml
    from topology import build as build_layout

    spec = parse_scenario(load_yaml(SCENARIO))
    layout = build_layout(spec.fabric.kind, spec.fabric, summary["run_id"])
    port_h2 = switch_port_facing(layout, layout.hosts[1].name)
    ports = pd.read_csv(run_dir / "ports.csv")
    to_h2 = ports[ports["port"] == port_h2]["tx_pkts"]
    counted = int(to_h2.max() - to_h2.min())
    need = LAT_ITERATIONS + int(bw["roce_pkts_min"])
    print(f"ports.csv {port_h2}: {counted} packets sent toward h2; perftest needs at least {need}")
    (Path(RESULTS) / "perftest-figures.json").write_text(json.dumps({
        "t_typical_us": lat["t_typical_us"], "t_p99_us": lat["t_p99_us"], "t_avg_us": lat["t_avg_us"],
        "bw_avg_mib_s": bw["bw_avg_mib_s"], "bw_avg_bps": bw["bw_avg_bps"], "mtu_bytes": int(bw["mtu_bytes"]),
        "switch_tx_pkts_to_dst": [int(lat["switch_tx_pkts_to_dst"]), int(bw["switch_tx_pkts_to_dst"])],
        "switch_tx_pkts_to_src": [int(lat["switch_tx_pkts_to_src"]), int(bw["switch_tx_pkts_to_src"])],
        "roce_pkts_min": [int(lat["roce_pkts_min"]), int(bw["roce_pkts_min"])],
        "ports_csv_tx_pkts_to_h2": counted}, indent=1))
    assert counted >= need

    from testbed.host import cleanup
    report = cleanup.clean()
    assert report.empty, f"the run left objects behind: {report}"
    links = subprocess.run(["rdma", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert summary["run_id"] not in links, links
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith(summary["run_id"])]
    bridges = subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True, check=True)
    assert bridges.stdout.split() == []
