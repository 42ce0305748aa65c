"""PFC: ingress attribution on the routes, Xoff/Xon hysteresis, headroom, the spec's refusals, the pause
telemetry tables and the kick frame (no fabric; controllers/congestion/pfc.py, testbed/results/congestion.py)."""
import dataclasses

import pandas as pd
import pytest
from loop_results import PFC, PFC_LOOP, write_loop_result

from dataplane.pfc_gate import kick_frame
from controllers.congestion.pfc import PfcPolicy, feeds, headroom_bytes, upstreams, worst_case_bytes
from testbed.results.congestion import congestion_block, pfc_ports
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import build

WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def spec(fabric=None, congestion=None, controller=None):
    return parse_scenario({"name": "t", "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2,
                                                    "queue_backend": "htb_classes", **(fabric or {})},
                           "congestion": congestion or {}, "controller": controller or {}, "workload": WORKLOAD})


def layout(**fabric):
    s = spec(fabric)
    return build(s.fabric.kind, s.fabric, "tb0001")


def test_feeds_follow_the_routes():
    f = feeds(layout())
    # a host port feeds the other host port and both uplinks of its leaf, never itself
    assert f["tb0001l1-eth1"] == ("tb0001l1-eth2", "tb0001l1-eth3", "tb0001l1-eth4")
    # an uplink feeds only the leaf's host ports (no valley: a spine never sends l2's traffic up again)
    assert f["tb0001l1-eth3"] == ("tb0001l1-eth1", "tb0001l1-eth2")
    # a spine port from l1 feeds only the port toward l2
    assert f["tb0001s1-eth1"] == ("tb0001s1-eth2",)
    up = upstreams(layout())
    assert up["tb0001l1-eth1"].is_host and up["tb0001l1-eth1"].ifname == "tb0001h1-eth0"
    assert not up["tb0001s1-eth1"].is_host and up["tb0001s1-eth1"].ifname == "tb0001l1-eth3"


def test_policy_pauses_at_xoff_resumes_at_xon_and_charges_every_feeder():
    ports = ["a", "b", "c"]
    p = PfcPolicy(100, 70, ports, {"in1": ["a"], "in2": ["a", "b"], "idle": []})
    assert "idle" not in p.paused  # feeds nothing: never pauses
    assert p.decide([99, 0, -1]) == []
    assert p.decide([60, 40, -1]) == [("in2", "pause", 100)]  # the sum of what it feeds
    assert p.decide([100, 0, 0]) == [("in1", "pause", 100)]  # in2 stays paused at 100 > Xon
    assert p.decide([71, 0, 0]) == []  # between Xon and Xoff: no change (hysteresis)
    assert p.decide([70, 0, 0]) == [("in1", "resume", 70), ("in2", "resume", 70)]
    p.decide([200, 0, 0])
    assert sorted(p.release_all()) == ["in1", "in2"] and not any(p.paused.values())
    with pytest.raises(ValueError, match="xon_bytes < xoff_bytes"):
        PfcPolicy(70, 70, ports, {})


def test_headroom_formula_and_worst_case():
    # 10 Mbit/s, 3 ms response, 1514-byte frames: 3750 + 2 x 1514 + 64
    assert headroom_bytes(10e6, 0.003, 1514) == 3750 + 3028 + 64
    assert headroom_bytes(10e6, 0.003, 1514, propagation_s=0.001) == 3750 + 2500 + 3028 + 64
    with pytest.raises(ValueError):
        headroom_bytes(-1, 0, 0)
    total, egress, n = worst_case_bytes(layout(), 100_000, 0.001, 1514)
    # a leaf's host port is fed by the other host port and both uplinks
    assert n == 3 and total == 100_000 + 3 * headroom_bytes(10e6, 0.003, 1514), (total, egress)


def test_spec_pfc_thresholds_and_refusals():
    s = spec(congestion={"buffers": {"lossless_bytes": 150_000}, "pfc": {"xoff_pkts": 50, "xon_bytes": 30_000}})
    assert s.congestion.pfc.thresholds_bytes(1514) == (30_000, 75_700) and s.congestion.pfc_on
    assert not spec(congestion={"pfc": {"xoff_bytes": 9000, "xon_bytes": 1, "enabled": False}}).congestion.pfc_on
    bad = [({"pfc": {"xoff_bytes": 9000}}, "exactly one of xon_bytes, xon_pkts"),
           ({"pfc": {"xoff_bytes": 9000, "xon_bytes": 9000}}, "Xon < Xoff"),
           ({"buffers": {"lossless_bytes": 50_000}, "pfc": {"xoff_bytes": 60_000, "xon_bytes": 1}}, "buffer 50000"),
           ({"pfc": {"xoff_bytes": 9000, "xon_bytes": 1, "bogus": 1}}, "bogus")]
    for congestion, words in bad:
        with pytest.raises(ScenarioError, match=words):
            spec(congestion=congestion)
    with pytest.raises(ScenarioError, match="queue_backend"):
        spec(fabric={"queue_backend": "htb_bfifo"}, congestion={"pfc": {"xoff_bytes": 9000, "xon_bytes": 1}})
    with pytest.raises(ScenarioError, match="allowed with congestion.ecn/pfc: os_ken"):
        spec(congestion={"pfc": {"xoff_bytes": 9000, "xon_bytes": 1}}, controller={"framework": "ryu"})


def test_pause_telemetry_tables(tmp_path):
    rows = [(1_000, "p1", 3, "pause", 100, "h1", "h1-eth0", 500.0, False),
            (3_000, "p1", 3, "resume", 70, "h1", "h1-eth0", 600.0, False),
            (4_000, "p1", 3, "pause", 100, "h1", "h1-eth0", 500.0, False),
            (2_000, "p2", 3, "pause", 100, "s1", "s1-eth1", 500.0, False),
            (10_000, "p1", 3, "resume", 70, "h1", "h1-eth0", 600.0, False)]
    cols = ["time_ns", "port", "class", "event", "charged_bytes", "upstream", "upstream_port", "actuation_us",
            "pfc_frame"]
    ports = pfc_ports(pd.DataFrame(rows, columns=cols)).set_index("port")
    assert ports.loc["p1", "pauses_sent"] == 2 and ports.loc["p1", "paused_time_s"] == 8e-6
    assert ports.loc["p2", "paused_time_s"] == 8e-6  # still paused: runs to the last event
    pd.DataFrame(rows, columns=cols).to_csv(tmp_path / "pfc_events.csv", index=False)
    write_loop_result(tmp_path, dataclasses.replace(PFC_LOOP, loop_p99_ms=0.4))
    block = congestion_block(tmp_path)
    assert block["pause_frames"] == 3 and block["paused_time_s"] == 1.6e-5
    assert block["controller_loop_p99_ms"] == 0.4 and block["lossless_drops_pkts"] == 0
    assert block["storms"] == 1 and block["pfc"]["xoff_bytes"] == 100 and block["pfc"]["watchdog"]["mitigate"]
    assert (tmp_path / "pfc_ports.csv").exists() and congestion_block(tmp_path / "nothing") is None


def test_kick_frame_is_60_bytes_of_the_local_experimental_ethertype():
    f = kick_frame(bytes.fromhex("020000000001"))
    assert len(f) == 60 and f[12:14] == b"\x88\xb5" and f[:6] == b"\xff" * 6 and f[6:12] == bytes.fromhex("020000000001")


def test_headroom_warning_at_start_up():
    from testbed.emulation.congestion_conf import headroom_warning

    fits = spec({"buffer_bytes": 150_000}, {"pfc": {"xoff_bytes": 100_000, "xon_bytes": 70_000}})
    assert headroom_warning(fits) is None
    tight = spec({"buffer_bytes": 150_000}, {"pfc": {"xoff_bytes": 140_000, "xon_bytes": 70_000}})
    w = headroom_warning(tight)
    assert "exceeds the lossless buffer 150000 bytes" in w and "3 ingresses" in w, w
    assert headroom_warning(spec()) is None


def test_kick_frames_are_taken_out_of_the_pipeline_drops(tmp_path):
    from testbed.measure.drops import PIPELINE_DROP_COUNTER
    from testbed.pipeline.judge import discount_kick_frames

    drops = {PIPELINE_DROP_COUNTER: 30, "softnet": 2}
    assert discount_kick_frames(drops, tmp_path) == drops  # no loop ran
    write_loop_result(tmp_path, dataclasses.replace(PFC_LOOP, pfc=dataclasses.replace(PFC, kick_frames=18)))
    assert discount_kick_frames(drops, tmp_path) == {PIPELINE_DROP_COUNTER: 5, "softnet": 2}  # 18 + 7 rx frames
    write_loop_result(tmp_path, PFC_LOOP)  # 25 kicks + 7 PFC frames from hosts: more than the 30 drops
    assert discount_kick_frames(drops, tmp_path)[PIPELINE_DROP_COUNTER] == 0


def test_watchdog_block_rides_in_the_pfc_block():
    s = spec(congestion={"pfc": {"xoff_bytes": 9000, "xon_bytes": 1, "watchdog": {"detect_ms": 50}}})
    assert s.congestion.pfc.watchdog.detect_ms == 50 and s.congestion.pfc.watchdog.enabled
    with pytest.raises(ScenarioError, match="watchdog"):
        spec(congestion={"pfc": {"xoff_bytes": 9000, "xon_bytes": 1, "watchdog": {"detect_ms": 0}}})
