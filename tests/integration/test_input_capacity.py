"""Doctor's faithful-capacity calibration on a real fabric, and C15 (deep buffers) end to end."""
import pytest

from testbed.measure import capacity
from testbed.results.rundir import RunDir
from tests.integration.conftest import run_cli


def test_calibration_judges_real_runs_by_the_verdict(datapath, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    # two low steps keep the test short; 'testbed doctor --calibrate' sweeps up to 40 Mbit/s
    cal = capacity.calibrate(datapath, quiet=True, rates_bps=(2.5e6, 5e6))
    for s in cal["steps"]:
        print(f"calibration {s['per_host_bps'] / 1e6:g} Mbit/s/link: busbw/link {s['busbw_ratio']:.3f}, "
              f"faithful {s['faithful']} {s['violation']}")
    print(f"calibrated faithful capacity {cal['capacity_bps'] / 1e6:g} Mbit/s ({cal['limited_by']})")
    first = cal["steps"][0]
    # 2.5 Mbit/s x 8 hosts at path MTU 1024 is far below what this machine emulates: faithful, at the link rate
    assert first["faithful"], first
    assert first["busbw_ratio"] == pytest.approx(1.0, abs=0.05)
    assert cal["capacity_bps"] >= 8 * 2.5e6
    assert cal["lower_bound"] == all(s["faithful"] for s in cal["steps"])
    capacity.save(cal)
    assert capacity.load_cached(datapath)["capacity_bps"] == cal["capacity_bps"]


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
    run = RunDir.open(summaries[0].parent)
    manifest = run.manifest
    assert manifest["transport"]["rto_us"] == 2_000_000 and manifest["rto"]["capped"] is True
    t = run.summary["transport"]
    print(f"C15: {t['delivered_bytes']} of {t['posted_bytes']} bytes delivered, {t['retx_pkts']} retransmitted, "
          f"{t['timeouts']} timeouts")
    assert t["posted_bytes"] > 0 and t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"]
