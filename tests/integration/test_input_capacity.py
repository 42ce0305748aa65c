"""Doctor's faithful-capacity calibration on a real fabric, the refusal of a fabric too large for the machine,
and C15 (deep buffers) end to end."""
import os
import re
import time

import pytest

from testbed.process.exitcodes import EXIT_BAD_INPUT
from testbed.measure import capacity
from testbed.pipeline import calibrate
from testbed.results.rundir import RunDir
from tests.integration.conftest import raise_if_disturbed, run_cli


def test_calibration_judges_real_runs_by_the_verdict(datapath, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    step_summaries = []  # each step run's summary.json: a step the machine disturbed re-runs the test

    def run_step(rate_bps, payload_bytes, workdir):
        step = run_step_of_calibrate(rate_bps, payload_bytes, workdir)
        (newest,) = sorted(workdir.glob(f"res-{payload_bytes}-{rate_bps:.0f}-*"))[-1:]
        step_summaries.append(RunDir.open(next(newest.glob("*/summary.json")).parent).summary)
        return step

    run_step_of_calibrate = calibrate._run_step
    monkeypatch.setattr(calibrate, "_run_step", run_step)
    # two low rates and a confirmation keep the test short; 'testbed doctor --calibrate' searches up to the edge
    cal = calibrate.calibrate(datapath, quiet=True, payloads=(1024,), start_bps={1024: 2.5e6}, max_bps=5e6)
    rec = cal["mtus"]["1024"]
    for s in rec["steps"]:
        print(f"calibration {s['per_host_bps'] / 1e6:g} Mbit/s/link: busbw/link {s['busbw_ratio']:.3f}, "
              f"faithful {s['faithful']} {s['violation']}")
    print(f"calibrated faithful capacity {rec['hop_pps']:,.0f} packet-hops/s at {rec['per_host_bps'] / 1e6:g} "
          f"Mbit/s per link ({rec['limited_by']})")
    first = rec["steps"][0]
    # 2.5 Mbit/s x 8 hosts at path MTU 1024 is far below what this machine emulates: faithful, at the link rate
    for summary in step_summaries:  # every step is far below the edge: faithful unless the machine disturbed it
        raise_if_disturbed(summary)
    assert first["faithful"], first
    assert first["busbw_ratio"] == pytest.approx(1.0, abs=0.05)
    assert [s["per_host_bps"] for s in rec["steps"]] == [2.5e6, 5e6, 5e6]  # 5 Mbit/s confirmed by a second run
    assert rec["per_host_bps"] == 5e6 and rec["lower_bound"]
    assert rec["hop_pps"] == pytest.approx(calibrate.step_hop_pps(5e6, 1024))
    capacity.save(cal)
    assert capacity.figures(capacity.load_cached(datapath)) == {1024: rec["hop_pps"]}


BIG = """
name: big960
fabric: {spines: 2, leaves: 32, hosts_per_leaf: 30, buffer_bytes: 20KB}
workload: {sizes: {min_bytes: 64KiB, max_bytes: 4MiB}, iterations: 5}
"""


def test_960_hosts_are_refused_before_anything_is_built(tmp_path):
    """Issue 19: 960 hosts passed every check and started building 2,000 interfaces on a 2-core machine."""
    p = tmp_path / "big960.yaml"
    p.write_text(BIG)
    env = {**os.environ, "TESTBED_CACHE_DIR": str(tmp_path / "cache")}  # no calibration: the default, said so
    bridges = set(os.popen("ovs-vsctl list-br").read().split())
    t0 = time.monotonic()
    res = run_cli("run", p, "--results", tmp_path / "results", env=env, timeout=120)
    took = time.monotonic() - t0
    print(res.stderr)
    assert res.returncode == EXIT_BAD_INPUT, res.stderr
    err = res.stderr
    assert "testbed: error: fabric too large for this machine: 960 sending hosts (of 960) x 10 Mbit/s" in err
    assert "NOT calibrated: a conservative default" in err
    assert re.search(r"What fits faithfully on this machine: at most \d+ sending hosts at 10 Mbit/s, or ", err)
    assert "transport.payload_bytes: 4096" in err and "--over-capacity" in err
    assert "estimated duration" in err and "1024 links, 960 hosts" in err  # the estimate counts the fabric's build
    # nothing was built: no run started, no results directory, no new bridge
    assert "run tb" not in err and "fabric up" not in err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
    assert set(os.popen("ovs-vsctl list-br").read().split()) <= bridges
    assert took < 60


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
