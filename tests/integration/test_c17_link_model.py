"""C17: the link model is stated (manifest) and honoured (window-1 goodput matches its formula)."""
from conftest import run_scenario_file

from testbed.measure import timing
from testbed.results.rundir import RunDir

WINDOW1 = """
name: c17
fabric: {spines: 1, leaves: 1, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M}
transport: {payload_bytes: 1024, window_pkts: 1, ack_every_pkts: 1}
workload: {sizes: {min_bytes: 256KiB, max_bytes: 256KiB}, iterations: 3, warmup_iterations: 1}
"""


def _run(tmp_path):
    tmp_path.mkdir()
    res, s = run_scenario_file(tmp_path, WINDOW1, timeout=120, expect_rc=None)  # judged below
    manifest = RunDir.open(s["run_dir"]).manifest
    return s, manifest, s["sizes"][0]["busbw_ratio"]


def test_window1_goodput_matches_the_stated_cut_through_model(tmp_path):
    s, manifest, ratio = _run(tmp_path / "a")
    model = manifest["link_model"]
    assert model["switching"] == "cut_through"
    assert model["propagation_delay_us"] == 0
    assert model["delay_backend"] == "none"  # no scenario here asks for link_delay_us
    expect = timing.window1_busbw_ratio(1024, model["switching"])  # 1082 / (1082 + 62) = 0.946
    assert model["window1_busbw_ratio"] == expect
    # the software's own latency (OVS, Python) adds to every round trip; on a busy machine it grows and the
    # fidelity monitor reports the hosts as CPU-limited: rerun once, then judge the model on a faithful run
    # a window of one packet builds no queue and keeps no host busy: the run is "not judged" (no rate check
    # could be made), which is honest; the model is judged on it unless a check failed
    if s["verdict"] == "not_faithful" or abs(ratio / expect - 1) > 0.10:
        s, manifest, ratio = _run(tmp_path / "b")
    print(f"window-1 busbw/link {ratio:.3f}, cut-through model {expect:.3f}, "
          f"store-and-forward {timing.window1_busbw_ratio(1024, 'store_and_forward'):.3f}, "
          f"verdict {s['verdict']}")
    if s["verdict"] != "not_faithful":
        assert abs(ratio / expect - 1) <= 0.10, f"window-1 busbw/link {ratio:.3f} vs model {expect:.3f}"
    else:  # off the model only with the reason named: the hosts' CPU, not the emulated links, set the pace
        assert any("CPU" in v for v in s["violations"]), s["violations"]
    assert ratio > 1.6 * timing.window1_busbw_ratio(1024, "store_and_forward")
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] and t["retx_pkts"] == 0
