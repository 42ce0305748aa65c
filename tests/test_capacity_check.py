"""The packet-rate model, the capacity record, the calibration search and the refusal before a run.
No root, no fabric."""
import json
import math
from pathlib import Path

import pytest

from testbed.measure import capacity, capacity_check
from testbed.pipeline import calibrate
from testbed.measure.capacity_check import CapacityError, check_scenario
from testbed.measure.packet_load import packet_load
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads import load_scenario
from testbed.workloads import workload_for

REPO = Path(__file__).resolve().parents[1]
#: 960 hosts on a spine-leaf, 20 KB buffers (issue 19: passed every check before)
BIG = {"name": "big960", "fabric": {"spines": 2, "leaves": 32, "hosts_per_leaf": 30, "buffer_bytes": "20KB"},
       "workload": {"sizes": {"min_bytes": "64KiB", "max_bytes": "64KiB"}, "iterations": 1}}
#: a calibration record: 30,000 packet-hops/s at 1024, 40,000 at 4096
CAL = {"version": capacity.VERSION, "measured_utc": "2026-12-02T10:00:00Z",
       "mtus": {"1024": {"hop_pps": 30000.0, "per_host_bps": 10e6, "lower_bound": False, "limited_by": "x"},
                "4096": {"hop_pps": 40000.0, "per_host_bps": 40e6, "lower_bound": False, "limited_by": "y"}}}


def spec_of(**sections):
    sections.setdefault("workload", {"sizes": {"min_bytes": 65536, "max_bytes": 65536}})
    return parse_scenario(sections)


def peers_of(spec):
    w = workload_for(spec)
    return w.peers(w.plan().ops)


# ------------------------------------------------------------------ packet-rate model

def test_quickstart_load_worked_value():
    spec = load_scenario(REPO / "scenarios" / "quickstart.yaml")
    load = packet_load(spec, peers_of(spec))
    # ring of 8 on 4 leaves x 2 hosts: each rank's two peers are one on its leaf (2 links: host-leaf-host) and one
    # across the spines (4 links): 3 links per frame. 8 x 10 Mbit/s / (4154 B x 8) = 2407.3 frames/s;
    # x 3 links x (1 + 1/4 ACKs) = 9027.4 packet-hops/s
    assert load.frame_bytes == 4154 and load.sending_hosts == 8
    assert load.frames_pps == pytest.approx(8 * 10e6 / (4154 * 8))
    assert load.links_per_frame == pytest.approx(3.0)
    assert load.hop_pps == pytest.approx(8 * 10e6 / (4154 * 8) * 3 * 1.25)


def test_every_pair_crosses_the_mean_path_of_the_layout():
    spec = spec_of(fabric={"leaves": 4}, transport={"ack_every_pkts": 8})
    load = packet_load(spec)  # no peers: every host to every other
    # from each host: 1 peer on its leaf (2 links), 6 across (4 links): (2 + 24) / 7
    assert load.links_per_frame == pytest.approx(26 / 7)
    assert load.hop_pps == pytest.approx(8 * 10e6 / (1082 * 8) * 26 / 7 * 1.125)


def test_load_scales_with_rate_and_frames_and_idle_hosts_offer_nothing():
    base = spec_of(fabric={"leaves": 4})
    fast = spec_of(fabric={"leaves": 4, "host_link_bps": "20M", "fabric_link_bps": "20M"})
    assert packet_load(fast).hop_pps == pytest.approx(2 * packet_load(base).hop_pps)
    two = packet_load(base, {0: [1], 1: [0]})  # nccl -g 2: hosts 0 and 1 only, on one leaf
    assert two.sending_hosts == 2 and two.links_per_frame == pytest.approx(2.0)
    assert two.hop_pps == pytest.approx(2 * 10e6 / (1082 * 8) * 2 * 1.125)
    assert packet_load(base, {}).hop_pps == 0


def test_a_receiving_link_delivers_at_most_its_rate():
    spec = spec_of(fabric={"leaves": 4}, transport={"ack_every_pkts": 8})
    incast = {r: [0] for r in range(1, 8)}  # 7 senders into host 0 (which sends nothing)
    load = packet_load(spec, incast)
    # into host 0: one link's worth, 10 Mbit/s: 1155.3 frames/s; 1 sender on its leaf (2 links), 6 across (4)
    assert load.frames_pps == pytest.approx(10e6 / (1082 * 8))
    assert load.links_per_frame == pytest.approx((2 + 6 * 4) / 7)


def test_dual_plane_and_scale_up_links_each_carry_their_share():
    spec = load_scenario(REPO / "scenarios" / "dual_plane.yaml")
    load = packet_load(spec, peers_of(spec))
    # every host offers its link rate on each plane: twice the frames of a single-plane host
    f = spec.fabric
    assert load.frames_pps == pytest.approx(2 * f.n_hosts * f.host_link_bps / (load.frame_bytes * 8))
    up = spec_of(fabric={"leaves": 2, "hosts_per_leaf": 2, "scale_up": {"gpus_per_server": 2, "rate_multiple": 4}})
    pairs = packet_load(up, {0: [1], 1: [0]})  # one server: only its scale-up link, 4 x the host link, 2 links
    assert pairs.links_per_frame == pytest.approx(2.0)
    assert pairs.frames_pps == pytest.approx(2 * 4 * 10e6 / (1082 * 8))


# ------------------------------------------------------------------ capacity record and MTU interpolation

def test_capacity_between_mtus_follows_the_per_packet_cost_line():
    pts = {1024: 30000.0, 4096: 20000.0}
    assert capacity.hop_pps_at(pts, 1024) == pytest.approx(30000)
    assert capacity.hop_pps_at(pts, 4096) == pytest.approx(20000)
    # 2048: frame 2106 B between 1082 and 4154: cost 1/30000 + (1/20000 - 1/30000) x 1024/3072
    assert capacity.hop_pps_at(pts, 2048) == pytest.approx(1 / (1 / 30000 + (1 / 20000 - 1 / 30000) / 3))
    assert capacity.hop_pps_at(pts, 256) == pytest.approx(30000)  # never more credit than the smallest calibrated
    # a calibration where 4096 came out higher (noise): above 4096 its own figure, below 1024 the line
    up = {1024: 20000.0, 4096: 30000.0}
    assert capacity.hop_pps_at(up, 4096) == pytest.approx(30000)
    assert capacity.hop_pps_at(up, 512) < 20000
    assert capacity.hop_pps_at({1024: 25000.0}, 4096) == 25000
    with pytest.raises(ValueError, match="no calibrated path MTU"):
        capacity.hop_pps_at({}, 1024)


def test_cached_calibration_holds_for_this_machine_and_version_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    assert capacity.load_cached() is None
    capacity.save({**CAL, "machine": capacity.machine_facts("user")})
    assert capacity.figures(capacity.load_cached("user")) == {1024: 30000.0, 4096: 40000.0}
    assert capacity.load_cached("kernel") is None  # another datapath
    old = json.loads(capacity.cache_path().read_text())
    old["version"] = 1
    capacity.cache_path().write_text(json.dumps(old))
    assert capacity.load_cached("user") is None  # a record of the former format (1 KB host traffic only)
    assert capacity.figures(None) == capacity.DEFAULT_HOP_PPS
    assert "not calibrated" in capacity.format_capacity(None)
    assert capacity.format_capacity(CAL).startswith("path MTU 1024: 30,000 packet-hops/s")


# ------------------------------------------------------------------ calibration search

def _judge_below(edge_bps, flaky=()):
    """A fake step: faithful below ``edge_bps``; the rates in ``flaky`` fail their first confirmation."""
    runs = []

    def judge(rate):
        runs.append(rate)
        if any(math.isclose(rate, f) for f in flaky) and sum(math.isclose(r, rate) for r in runs) == 2:
            return False
        return rate < edge_bps
    return judge, runs


def test_search_brackets_refines_to_a_fine_step_and_confirms():
    judge, runs = _judge_below(14e6)
    rate, lower = calibrate.search(judge, 10e6)
    # 10 ok, 20 fails; sqrt: 14.14 fails; 11.89 ok; confirmation of 11.89 ok
    assert rate == pytest.approx(10e6 * 2 ** 0.25) and not lower
    assert [round(r / 1e6, 2) for r in runs] == [10, 20, 14.14, 11.89, 11.89]
    judge, runs = _judge_below(3e6)
    rate, _ = calibrate.search(judge, 10e6)  # 10, 5 fail; 2.5 ok; 3.54 fails; 2.97 ok
    assert rate == pytest.approx(2.5e6 * 2 ** 0.25) and runs[:3] == [10e6, 5e6, 2.5e6]


def test_search_steps_down_when_the_confirmation_fails():
    judge, runs = _judge_below(14e6, flaky=(10e6 * 2 ** 0.25,))
    rate, _ = calibrate.search(judge, 10e6)
    assert rate == pytest.approx(10e6) and len(runs) == 6  # 11.89 failed its second run: one step down, 10 confirmed


def test_search_limits():
    assert calibrate.search(lambda r: True, 10e6, max_bps=40e6) == (40e6, True)
    assert calibrate.search(lambda r: False, 10e6) == (0.0, False)


def test_two_searches_with_a_marginal_rate_agree_within_one_step():
    edge = 10e6 * 2 ** 0.25  # the rate at the edge passes once, then fails
    first, _ = calibrate.search(_judge_below(edge * 1.01, flaky=(edge,))[0], 10e6)
    second, _ = calibrate.search(_judge_below(edge * 1.01)[0], 10e6)
    assert max(first, second) / min(first, second) <= calibrate.RATE_STEP * (1 + 1e-9)


def test_step_sizes_take_the_same_time_at_every_rate():
    # 2 s x 10 Mbit/s x 1024/1082 / 8 / 1.75 = 1,352,125 B, rounded down to whole 8 x 1024 B: 1,351,680
    assert calibrate.step_size_bytes(10e6) == 1351680
    assert calibrate.step_size_bytes(2.5e6) == 335872
    assert calibrate.step_size_bytes(10e6, 4096) % (8 * 4096) == 0


def test_step_capacity_is_the_model_at_the_confirmed_rate():
    # quickstart shape, path MTU 1024 (ACK every 8): 8 x 10 Mbit/s / (1082 B x 8) x 3 links x 1.125
    assert calibrate.step_hop_pps(10e6, 1024) == pytest.approx(8 * 10e6 / (1082 * 8) * 3 * 1.125)
    assert calibrate.step_hop_pps(20e6, 4096) == pytest.approx(8 * 20e6 / (4154 * 8) * 3 * 1.25)


def test_calibrate_mtu_record():
    steps = iter([True, False, False, True, True])
    rec = calibrate.calibrate_mtu(1024, lambda r: {"per_host_bps": r, "faithful": next(steps), "busbw_ratio": 0.99,
                                                   "violation": "CPU saturated"}, start_bps=10e6)
    assert rec["per_host_bps"] == pytest.approx(10e6 * 2 ** 0.25) and rec["runs"] == 5
    assert rec["limited_by"].startswith("14.1 Mbit/s per link: CPU saturated")
    assert rec["hop_pps"] == pytest.approx(calibrate.step_hop_pps(rec["per_host_bps"], 1024))


# ------------------------------------------------------------------ refusal before a run

def test_960_hosts_are_refused_naming_what_fits():
    spec = parse_scenario(BIG)
    with pytest.raises(CapacityError) as e:
        check_scenario(spec, peers_of(spec), cached=CAL)
    msg = str(e.value)
    print(msg)
    assert "960 sending hosts (of 960) x 10 Mbit/s host links at path MTU 1024" in msg
    assert "this machine's faithful capacity of 30,000 packet-hops/s at path MTU 1024" in msg
    assert "refused above 2x (fidelity.max_capacity_ratio)" in msg
    # ring of 960 on 32 leaves x 30: 2.07 links per frame; one host: 1155.3 x 2.07 x 1.125 = 2686 packet-hops/s
    per_host = 10e6 / (1082 * 8) * (2 + 2 / 30) * 1.125
    assert f"at most {int(30000 // per_host)} sending hosts at 10 Mbit/s" in msg
    assert "these 960 hosts at most 0.11 Mbit/s per host link (fabric.host_link_bps)" in msg
    # at 4096 (ACK every 8 as set): 960 x 300.9 frames/s x 2.07 x 1.125 = 671,597 at 10 Mbit/s; 40,000 fit 0.596 Mbit/s
    assert "or these 960 hosts at most 0.59 Mbit/s per host link with transport.payload_bytes: 4096" in msg
    assert "--over-capacity" in msg


def test_when_no_rate_fits_the_message_says_so():
    spec = parse_scenario(BIG)
    tight = {**CAL, "mtus": {"1024": {"hop_pps": 5000.0}, "4096": {"hop_pps": 5000.0}}}
    with pytest.raises(CapacityError) as e:
        check_scenario(spec, peers_of(spec), cached=tight)
    msg = str(e.value)
    assert "at most 1" not in msg and "not even 2 hosts at 10 Mbit/s" in msg
    assert "these 960 hosts at no fabric.host_link_bps of path MTU 1024 (the least is 100 kbit/s)" in msg
    assert "payload_bytes: 4096" not in msg  # 960 x 100 kbit/s does not fit at 4096 either


def test_no_calibration_uses_the_conservative_default_and_says_so():
    spec = parse_scenario(BIG)
    with pytest.raises(CapacityError, match="NOT calibrated: a conservative default"):
        check_scenario(spec, peers_of(spec), cached=None)


def test_between_one_and_two_times_warns_and_overrides_allow_more():
    # 16 hosts x 10 Mbit/s ring at 1024 on 8 leaves: 16 x 1155.3 x (2+4)/2 x 1.125 = 62,385 packet-hops/s
    spec = spec_of(fabric={"leaves": 8, "hosts_per_leaf": 2})
    assert check_scenario(spec, peers_of(spec), cached={**CAL, "mtus": {"1024": {"hop_pps": 1e6}}}) is None
    warn = check_scenario(spec, peers_of(spec), cached={**CAL, "mtus": {"1024": {"hop_pps": 40000.0}}})
    assert "1.6x this machine's faithful capacity" in warn and "may saturate" in warn
    tight = {**CAL, "mtus": {"1024": {"hop_pps": 20000.0}}}
    with pytest.raises(CapacityError, match="3.1x"):
        check_scenario(spec, peers_of(spec), cached=tight)
    assert "3.1x" in check_scenario(spec, peers_of(spec), cached=tight, over_capacity=True)
    off = spec_of(fabric={"leaves": 8, "hosts_per_leaf": 2}, fidelity={"max_capacity_ratio": "off"})
    assert "3.1x" in check_scenario(off, peers_of(off), cached=tight)
    assert "max_capacity_ratio" in off.fidelity.switched_off()
    five = spec_of(fabric={"leaves": 8, "hosts_per_leaf": 2}, fidelity={"max_capacity_ratio": 5})
    assert check_scenario(five, peers_of(five), cached=tight).startswith("16 sending hosts")


def test_max_capacity_ratio_bad_values_name_the_key():
    for bad in (0, 0.5, "lots"):
        with pytest.raises(ScenarioError, match="fidelity.max_capacity_ratio"):
            spec_of(fidelity={"max_capacity_ratio": bad})


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_fits_the_default_capacity(path):
    spec = load_scenario(path)
    assert check_scenario(spec, peers_of(spec), cached=None) is None


def test_run_refuses_before_anything_is_built(tmp_path, monkeypatch, capsys):
    from testbed.pipeline import runner
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))  # no calibration: the default
    monkeypatch.setattr(runner.cleanup, "clean", lambda *a, **k: pytest.fail("cleanup ran: the kernel was touched"))
    with pytest.raises(CapacityError, match="fabric too large for this machine"):
        runner.run(parse_scenario(BIG), tmp_path / "results", quiet=True)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_over_capacity_flag_parsed():
    from testbed.cli import build_parser
    assert build_parser().parse_args(["run", "s.yaml", "--over-capacity"]).over_capacity is True
    assert build_parser().parse_args(["run", "s.yaml"]).over_capacity is False
    assert build_parser().parse_args(["nccl", "--over-capacity"]).over_capacity is True


def test_capacity_error_is_bad_input():
    from testbed.api import BAD_INPUT_ERRORS
    assert issubclass(capacity_check.CapacityError, BAD_INPUT_ERRORS)
