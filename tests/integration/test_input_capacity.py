"""Doctor's faithful-capacity calibration on a real fabric, and C15 (deep buffers) end to end."""
import json

import pytest

from testbed import capacity
from tests.integration.conftest import run_cli


def test_calibration_measures_a_per_packet_cost(datapath, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    cal = capacity.calibrate(datapath, quiet=True)
    steps = cal["steps"]
    for s in steps:
        print(f"calibration {s['per_host_bps'] / 1e6:g} Mbit/s/host: {s['delivered_pkts']}/{s['sent_pkts']} "
              f"delivered, emulation CPU {s['busy_cores']:.2f} cores, ovs thread {s['ovs_thread_busy']:.0%}")
    print(f"calibrated faithful capacity {cal['capacity_pps']:.0f} pps = {cal['capacity_bps'] / 1e6:.0f} Mbit/s "
          f"({cal['limited_by']})")
    for s in steps:
        expected = 4 * s["per_host_bps"] / (capacity.DATAGRAM_BYTES * 8) * capacity.STEP_S
        assert s["sent_pkts"] == pytest.approx(expected, rel=0.1)  # the senders kept their pace
    # the lowest step (0.9k packets/s in all) is far below any capacity: nothing lost, cores not saturated
    assert capacity.judge_step(steps[0]) is None, steps[0]
    assert cal["capacity_pps"] >= steps[0]["delivered_pps"]
    failed = [s for s in steps if capacity.judge_step(s)]
    assert cal["lower_bound"] == (not failed)
    path = capacity.save(cal)
    assert capacity.load_cached(datapath)["capacity_pps"] == cal["capacity_pps"], path


C15 = """
name: c15-deep-buffer
fabric: {spines: 2, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 2M, buffer_bytes: 100MB}
workload: {sizes: {min_bytes: 128KiB, max_bytes: 128KiB}, iterations: 3}
"""


def test_c15_deep_buffer_completes_with_bounded_rto(tmp_path):
    p = tmp_path / "c15.yaml"
    p.write_text(C15)
    res = run_cli("run", p, "--results", tmp_path / "results", timeout=300)
    print(res.stderr[-2000:])
    summaries = list((tmp_path / "results").glob("*/summary.json"))
    assert len(summaries) == 1, f"run did not complete ({res.returncode}):\n{res.stderr}"
    assert "retransmission timeout 2000 ms (auto" in res.stderr and "capped at 2 s" in res.stderr
    manifest = json.loads((summaries[0].parent / "manifest.json").read_text())
    assert manifest["transport"]["rto_us"] == 2_000_000 and manifest["rto"]["capped"] is True
    t = json.loads(summaries[0].read_text())["transport"]
    print(f"C15: {t['delivered_bytes']} of {t['posted_bytes']} bytes delivered, {t['retx_pkts']} retransmitted, "
          f"{t['timeouts']} timeouts")
    assert t["posted_bytes"] > 0 and t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"]
