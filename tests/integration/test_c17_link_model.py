"""C17: the link model is stated (manifest) and honoured (window-1 goodput matches its formula; where the
emulator's own latency per round trip puts 10 Mbit/s outside the band, the serialization per round measured
from two rates, 10 and 2.5 Mbit/s, must match the cut-through formula)."""
from conftest import raise_if_disturbed, run_scenario_file

from testbed.measure import link_model
from testbed.results.rundir import RunDir
from traffic.transport import ACK_FRAME_BYTES

WINDOW1 = """
name: c17
fabric: {spines: 1, leaves: 1, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M}
transport: {payload_bytes: 1024, window_pkts: 1, ack_every_pkts: 1}
workload: {sizes: {min_bytes: 256KiB, max_bytes: 256KiB}, iterations: 3, warmup_iterations: 1}
"""


def _run(tmp_path, rate="10M"):
    tmp_path.mkdir()
    text = WINDOW1.replace("10M", rate)
    res, s = run_scenario_file(tmp_path, text, timeout=180, expect_rc=None)  # judged below
    manifest = RunDir.open(s["run_dir"]).manifest
    return s, manifest, s["sizes"][0]["busbw_ratio"]


def test_window1_goodput_matches_the_stated_cut_through_model(tmp_path):
    s, manifest, ratio = _run(tmp_path / "a")
    model = manifest["link_model"]
    assert model["switching"] == "cut_through"
    assert model["propagation_delay_us"] == 0
    assert model["delay_backend"] == "none"  # no scenario here asks for link_delay_us
    expect = link_model.window1_busbw_ratio(1024, model["switching"])  # 1082 / (1082 + 62) = 0.946
    assert model["window1_busbw_ratio"] == expect
    # the software's own latency (OVS, Python) adds to every round trip; on a busy machine it grows and the
    # fidelity monitor reports the hosts as CPU-limited: the test runs again (rerun_policy.py)
    # a window of one packet builds no queue and keeps no host busy: the run is "not judged" (no rate check
    # could be made), which is honest; the model is judged on it unless a check failed
    raise_if_disturbed(s)
    print(f"window-1 busbw/link {ratio:.3f}, cut-through model {expect:.3f}, "
          f"store-and-forward {link_model.window1_busbw_ratio(1024, 'store_and_forward'):.3f}, "
          f"verdict {s['verdict']}")
    if s["verdict"] == "not_faithful":  # off the model only with the reason named: the hosts' CPU set the pace
        assert any("CPU" in v for v in s["violations"]), s["violations"]
    elif abs(ratio / expect - 1) > 0.10:
        # The emulator's own latency per round trip (OVS userspace forwarding, the agents' wake-ups: ~150 us on
        # some machines) adds to every window-1 round; it does not scale with the rate, serialization does.
        # Judge the model by the slope instead: round time T(rate) = k / rate + L, with k = (data + ACK) x 8 for
        # cut-through and twice that for store-and-forward; two rates give k whatever the latency L.
        s2, _, ratio2 = _run(tmp_path / "slow", "2500K")
        data_bits = link_model.data_frame_bytes(1024) * 8
        t10, t2 = data_bits / 10e6 / ratio, data_bits / 2.5e6 / ratio2
        k = (t2 - t10) / (1 / 2.5e6 - 1 / 10e6)
        k_model = data_bits + ACK_FRAME_BYTES * 8  # one data frame and one ACK frame (link_model.window1_busbw_ratio)
        latency_us = (t10 - k_model / 10e6) * 1e6
        print(f"two rates: busbw/link {ratio:.3f} at 10 Mbit/s, {ratio2:.3f} at 2.5 Mbit/s; serialization per "
              f"round {k:.0f} bits vs cut-through {k_model} (store-and-forward {2 * k_model}); emulator latency "
              f"per round {latency_us:.0f} us")
        assert s2["verdict"] != "not_faithful", s2["violations"]
        assert abs(k / k_model - 1) <= 0.10, f"serialization per round {k:.0f} bits vs cut-through model {k_model}"
        assert 0 <= latency_us < 0.5 * k_model / 10e6 * 1e6  # small next to a round's serialization (915 us)
    assert ratio > 1.6 * link_model.window1_busbw_ratio(1024, "store_and_forward")
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] and t["retx_pkts"] == 0
