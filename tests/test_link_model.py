"""Link model, path MTU validation and the packet-timing verdict (no root, no fabric)."""
import numpy as np
import pandas as pd
import pytest

from dataplane.queues import htb_bfifo
from testbed.measure import link_model, packet_timing
from testbed.spec.scenario import ScenarioError, parse_scenario
from traffic.transport import ACK_FRAME_BYTES

WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def _spec(fabric=None, transport=None):
    return parse_scenario({"fabric": fabric or {}, "transport": transport or {}, "workload": WORKLOAD})


# -- path MTU (C12) -------------------------------------------------------------
def test_payload_2048_with_default_mtu_is_rejected_naming_keys_and_limit():
    with pytest.raises(ScenarioError) as e:
        _spec(transport={"payload_bytes": 2048})
    msg = str(e.value)
    assert "transport.payload_bytes: 2048 does not fit" in msg, msg
    for words in ("fabric.mtu_bytes = 1500", "2092", "<= 1024"):
        assert words in msg, msg


@pytest.mark.parametrize("payload,mtu", [(1024, 1500), (2048, 2092), (2048, 4200), (4096, 4140), (4096, 9000)])
def test_roce_path_mtus_fit_a_matching_link_mtu(payload, mtu):
    spec = _spec(fabric={"mtu_bytes": mtu, "buffer_bytes": 100_000}, transport={"payload_bytes": payload})
    assert spec.fabric.mtu_bytes == mtu and spec.transport.payload_bytes == payload


def test_payload_4096_one_byte_short_is_rejected():
    with pytest.raises(ScenarioError, match="needs payload \\+ 44 .* = 4140"):
        _spec(fabric={"mtu_bytes": 4139}, transport={"payload_bytes": 4096})


@pytest.mark.parametrize("mtu", [1499, 9001])
def test_link_mtu_out_of_range_is_rejected(mtu):
    with pytest.raises(ScenarioError, match="fabric.mtu_bytes"):
        _spec(fabric={"mtu_bytes": mtu})


def test_buffer_must_hold_one_frame_of_the_link_mtu():
    with pytest.raises(ScenarioError, match=r"fabric.buffer_bytes = 5000 .* fabric.mtu_bytes = 9000.*>= 9014"):
        _spec(fabric={"mtu_bytes": 9000, "buffer_bytes": 5000})


def test_shaping_sizes_quantum_and_burst_from_the_mtu():
    assert htb_bfifo.frame_bytes(4200) == 4214
    assert htb_bfifo.burst_bytes_for(10e6, 4200) == 3 * 4214
    assert htb_bfifo.burst_bytes_for(10e6, 1500) == 3 * 1514
    assert htb_bfifo.burst_bytes_for(400e6, 1500) == 50_000  # 1 ms at 400 Mbit/s


# -- propagation delay ---------------------------------------------------------------
def test_link_delay_refused_without_netem_before_anything_is_built():
    spec = _spec(fabric={"link_delay_us": 500})
    with pytest.raises(ScenarioError, match="fabric.link_delay_us = 500: this kernel has no sch_netem"):
        link_model.check_delay_backend(spec, "none")
    link_model.check_delay_backend(_spec(), "none")  # 0 is always fine


# -- link model (C17) ----------------------------------------------------------------
def test_window1_formula_worked_values():
    # data frame 14+20+8+12+1024+4 = 1082 bytes, ACK frame 14+20+8+12+4+4 = 62 bytes
    assert link_model.data_frame_bytes(1024) == 1082 and ACK_FRAME_BYTES == 62
    assert link_model.window1_busbw_ratio(1024) == pytest.approx(1082 / 1144)   # 0.9458
    assert link_model.window1_busbw_ratio(1024, "store_and_forward") == pytest.approx(1082 / 2288)
    assert link_model.window1_busbw_ratio(4096) == pytest.approx(4154 / 4216)
    with pytest.raises(ValueError, match="allowed cut_through, store_and_forward"):
        link_model.window1_busbw_ratio(1024, "wormhole")


def test_manifest_link_model_states_switching_and_delay():
    m = link_model.link_model(_spec(), "none")
    assert m["switching"] == "cut_through"
    assert m["propagation_delay_us"] == 0 and m["delay_backend"] == "none"
    assert m["burst_bytes"]["host"] == 4542 and m["mtu_bytes"] == 1500


def test_busbw_error_bound_worked_value():
    # 64 KiB all-reduce on 8 ranks: each rank sends 2*7/8*64 KiB = 114688 B in 112 full frames of 1082 B
    wire = 112 * 1082
    assert link_model.busbw_ratio_error_bound(wire, 10e6, 1500) == pytest.approx(4 * 1514 / wire)
    assert 0.049 < link_model.busbw_ratio_error_bound(wire, 10e6, 1500) < 0.050


# -- the verdict on synthetic departures ---------------------------------------------
RATE = 10e6
SER_NS = 1082 * 8 / RATE * 1e9  # 865.6 us


def _samples(port, t0, t1, backlog, period_ns=10_000_000):
    t = np.arange(t0, t1 + period_ns, period_ns)
    return pd.DataFrame({"time_ns": t, "port": port, "backlog_pkts": backlog})


def _departures(port, t0, gaps_ns, frame=1082):
    t = t0 + np.concatenate([[0], np.cumsum(gaps_ns)]).astype(np.int64)
    return pd.DataFrame({"port": port, "window": 0, "time_ns": t, "frame_bytes": frame})


def test_paced_departures_pass_and_bunched_ones_fail():
    rng = np.random.default_rng(1)
    t0 = 1_000_000_000
    good = SER_NS * (1 + rng.uniform(-0.05, 0.05, 400))
    bad = good.copy()
    bad[::10] = 1000.0  # every 10th frame leaves back to back: 90 % within
    dep = pd.concat([_departures("p1", t0, good), _departures("p2", t0, bad)], ignore_index=True)
    samples = pd.concat([_samples("p1", t0 - 5_000_000, t0 + 400_000_000, 5),
                         _samples("p2", t0 - 5_000_000, t0 + 400_000_000, 5)], ignore_index=True)
    violations = []
    fig = packet_timing.check_departures(dep, samples, {"p1": RATE, "p2": RATE}, violations)
    assert fig["ports"]["p1"]["status"] == "passed" and fig["ports"]["p1"]["within_fraction"] == 1.0
    p2 = fig["ports"]["p2"]
    assert p2["status"] == "failed" and p2["within_fraction"] == pytest.approx(0.9, abs=0.01)
    assert fig["status"] == "failed"
    assert len(violations) == 1 and "packet timing on p2" in violations[0] and "90." in violations[0]


def test_a_gap_after_an_idle_gap_is_not_judged():
    t0 = 1_000_000_000
    gaps = np.full(400, SER_NS)
    gaps[100::100] = 10 * SER_NS  # the port waited for frames: idle, not backlogged
    gaps[101::100] = 100.0         # the next frame leaves on the bucket's tokens
    dep = _departures("p1", t0, gaps)
    samples = _samples("p1", t0 - 5_000_000, t0 + 500_000_000, 5)
    p = packet_timing.check_departures(dep, samples, {"p1": RATE}, [])["ports"]["p1"]
    # the idle gap itself is judged (the sampler said backlogged: a late departure as far as it can tell);
    # the early frame after it and the next one, sent while the bucket still held tokens, are not, nor the
    # first gap (the bucket is unknown until a paced gap shows it empty)
    assert p["gaps_judged"] == 393 and p["within_fraction"] == pytest.approx(390 / 393)


def test_htb_bucket_replay():
    ser = np.full(8, 1000.0)
    gaps = np.array([1000.0, 1000, 4000, 10, 10, 1000, 1000, 1000])  # paced, paced, idle, burst, burst, paced...
    assert packet_timing.paced_gaps(gaps, ser, burst_ns=3000.0, tolerance=0.1).tolist() == \
        [False, True, True, False, False, False, True, True]  # unknown first; tokens after the idle gap


def test_too_few_gaps_are_not_judged():
    t0 = 1_000_000_000
    dep = _departures("p1", t0, np.full(150, 100.0))  # all bunched, but only 150 gaps
    samples = _samples("p1", t0 - 5_000_000, t0 + 10_000_000, 5)
    violations = []
    fig = packet_timing.check_departures(dep, samples, {"p1": RATE}, violations)
    assert fig["ports"]["p1"]["status"] == "not_judged" and fig["status"] == "not_judged" and not violations


def test_gaps_outside_backlogged_intervals_are_not_judged():
    t0 = 1_000_000_000
    dep = _departures("p1", t0, np.full(300, 3 * SER_NS))  # a link at a third of its rate: never backlogged
    samples = _samples("p1", t0 - 5_000_000, t0 + 900_000_000, 0)
    violations = []
    fig = packet_timing.check_departures(dep, samples, {"p1": RATE}, violations)
    assert fig["status"] == "not_judged" and fig["ports"]["p1"]["gaps_judged"] == 0 and not violations
    assert packet_timing.check_departures(None, samples, {"p1": RATE}, [])["status"] == "not_judged"


def test_gaps_after_small_frames_are_reported_not_judged():
    t0 = 1_000_000_000
    ack_ser_ns = 62 * 8 / RATE * 1e9
    gaps = np.where(np.arange(600) % 2 == 0, SER_NS, 0.5 * ack_ser_ns)  # data, ACK 25 us early, data, ...
    dep = _departures("p1", t0, gaps)
    dep.loc[dep.index % 2 == 1, "frame_bytes"] = 62
    samples = _samples("p1", t0 - 5_000_000, t0 + 600_000_000, 5)
    fig = packet_timing.check_departures(dep, samples, {"p1": RATE}, [])
    p = fig["ports"]["p1"]
    assert p["gaps_judged"] == 299 and p["small_frame_gaps"] == 300  # the first: the bucket is not known yet
    assert p["within_fraction"] == 1.0 and p["small_frame_within_fraction"] == 0.0
    assert p["status"] == "passed"


def test_acks_between_data_frames_fold_into_the_data_frame_before_them():
    """ecn_marking (htb_classes, fresh-user review 2026-12-01): the control class's ACK left 1.3 ms into a
    6.6 ms data frame time; judged alone the two gaps were off by -81% and +5300%, together exact."""
    import pandas as pd
    from testbed.measure.packet_timing import check_departures, fold_small_frames
    rate, data, ack = 5e6, 4154, 62
    ser = data * 8e9 / rate
    t, rows = 0.0, []
    for i in range(240):
        rows.append((0, int(t), data))
        if i % 3 == 2:
            rows.append((0, int(t + 0.2 * ser), ack))
            t += ack * 8e9 / rate
        t += ser
    d = pd.DataFrame(rows, columns=["window", "time_ns", "frame_bytes"]).assign(port="p")
    folded = fold_small_frames(d, 512)
    assert len(folded) == 240 and folded["frame_bytes"].tolist()[:3] == [data, data, data + ack]
    samples = pd.DataFrame({"time_ns": [int(x) for x in range(-10**7, int(t) + 10**8, 10**7)]}).assign(
        port="p", backlog_pkts=5)
    violations = []
    fig = check_departures(d, samples, {"p": rate}, violations)
    assert violations == [] and fig["ports"]["p"]["within_fraction"] == 1.0
