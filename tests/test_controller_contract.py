"""The testbed <-> controller contract (controllers.contract): round trips, strict refusals, the events file."""
from __future__ import annotations

import json

import pytest

from controllers import contract as C

SETTINGS = C.ControllerSettings(
    run_id="tb1a2b", topology_file="/r/topology.json", ready_file="/r/controller.ready",
    events_file="/r/controller.events.jsonl", stats_file="/r/controller.stats.jsonl", stats_period_ms=100,
    load_balance=C.LoadBalanceSettings("adaptive", {}, C.AdaptiveSettings(hot_threshold=0.8, min_dwell_ms=500)),
    failover=C.FailoverSettings(gray_detect=True, gray_loss_threshold=0.005, gray_window_ms=10_000,
                                gray_min_lost_pkts=25),
    loop_settings_file="/r/congestion_loop.conf.json")
LOOP = C.LoopSettings(
    run_id="tb1a2b", results_dir="/r", period_s=0.001, sampled_parent=0x10002, mtu_bytes=4200,
    lossless_buffer_bytes=80_000, host_queue_bytes=65536, host_pids={"h1": 101, "h2": 102},
    ecn=C.EcnSettings(kmin_bytes=8428, kmax_bytes=33712, pmax=0.2, step=0.01, dscp=26),
    pfc=C.PfcSettings(xoff_bytes=40_000, xon_bytes=20_000,
                      watchdog=C.WatchdogSettings(enabled=True, detect_ms=200.0, restore_ms=200.0)),
    clock_wander=0.0)
READY = C.ControllerReady(dpids=[4097, 8193], flows=24, groups=2, resync={"flows_added": 24},
                          errors=[C.OpenFlowError(dpid=4097, switch="tb1a2bl1", xid=7, request="group-add-1",
                                                  type=4, code=8, type_name="OFPET_BAD_MATCH",
                                                  code_name="OFPBMC_BAD_MASK(8)", data_hex="0506")])
EVENTS = [
    C.LinkDown(link=["l1", "s1"], cause="port_status", switch="l1", port=3, seq=1, lost_pkts=None, tx_pkts=None,
               loss=None, window_ms=None, time_ns=10),
    C.LinkUp(link=["l1", "s1"], cause="gray", switch="l1", port=3, seq=2, lost_pkts=12, tx_pkts=830, loss=0.0143,
             window_ms=1000.0, time_ns=20),
    C.GraySuspected(link=["l1", "s2"], cause="gray", switch="l1", port=4, lost_pkts=9, tx_pkts=100, loss=0.09,
                    window_ms=500.0, time_ns=25),
    C.Unroutable(seq=3, error="host h1 unreachable", time_ns=30),
    C.Rerouted(seq=1, switches=6, dead_links=[["l1", "s1"]], time_ns=40),
    C.AdaptiveMoved(switch="l1", group=1, moves=[C.BucketMove(bucket=5, from_port=3, to_port=4, from_node="s1",
                                                              to_node="s2", rate_bps=9_900_000)],
                    loads_bps={"3": 19_800_000, "4": 0}, seen_ns=1, decided_ns=2, sent_ns=3, barrier_ns=4,
                    reaction_ms=12.3, hot_since_ns=None, since_hot_ms=12.3, time_ns=50),
]


@pytest.mark.parametrize("record", [SETTINGS, LOOP, READY], ids=lambda r: type(r).__name__)
def test_files_round_trip(tmp_path, record):
    path = tmp_path / "f.json"
    path.write_text(C.dumps(record))
    assert C.read_json(path, type(record)) == record


def test_events_round_trip_through_the_file_in_order(tmp_path):
    (tmp_path / C.EVENTS_FILE).write_text("".join(C.event_line(e) for e in EVENTS))
    assert C.read_events(tmp_path) == EVENTS
    assert json.loads(C.event_line(EVENTS[0]))["event"] == "link_down"
    assert C.read_events(tmp_path / "nowhere") == []


def test_a_torn_last_line_is_skipped_any_other_bad_line_is_not(tmp_path):
    path = tmp_path / C.EVENTS_FILE
    path.write_text(C.event_line(EVENTS[0]) + C.event_line(EVENTS[4])[:30])
    assert C.read_events(tmp_path) == [EVENTS[0]]
    path.write_text(C.event_line(EVENTS[0])[:30] + "\n" + C.event_line(EVENTS[4]))
    with pytest.raises(C.ContractError, match=rf"{C.EVENTS_FILE}:1: not a JSON line"):
        C.read_events(tmp_path)


def test_stats_poll_round_trips():
    poll = C.StatsPoll(dpid=4097, time_ns=5, ports=[[1, 10, 20], [2, 0, 3]], forwarded={"groups": {"3": 7}})
    assert C.parse_stats(C.stats_line(poll)) == poll


def _with(record, path: list, value=None, drop=False) -> dict:
    doc = C.encode(record)
    at = doc
    for key in path[:-1]:
        at = at[key]
    if drop:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return doc


@pytest.mark.parametrize("path, value, drop, message", [
    (["load_balance", "lb_policy"], "ecmp", False, r"ControllerSettings\.load_balance\.lb_policy: unknown field "
                                                  r"of LoadBalanceSettings; allowed: adaptive, hash_basis, policy, selection_method, weights"),
    (["congestion_file"], "/r/x", False, r"ControllerSettings\.congestion_file: unknown field"),
    (["failover", "gray_detect"], None, True, r"ControllerSettings\.failover\.gray_detect: missing field"),
    (["loop_settings_file"], None, True, r"ControllerSettings\.loop_settings_file: missing field"),
    (["stats_period_ms"], "100", False, r"ControllerSettings\.stats_period_ms: expected int, got str"),
    (["load_balance", "weights", "s1"], 1.5, False, r"load_balance\.weights\['s1'\]: expected int"),
])
def test_settings_refuse_unknown_missing_and_mistyped_keys_naming_them(tmp_path, path, value, drop, message):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(_with(SETTINGS, path, value, drop)))
    with pytest.raises(C.ContractError, match=message) as info:
        C.read_json(f, C.ControllerSettings)
    assert str(f) in str(info.value)


@pytest.mark.parametrize("path, drop, message", [
    (["pfc", "watchdog"], True, r"LoopSettings\.pfc\.watchdog: missing field of PfcSettings"),
    (["pfc", "xoff"], False, r"LoopSettings\.pfc\.xoff: unknown field of PfcSettings"),
    (["host_pids", "h1"], False, r"LoopSettings\.host_pids\['h1'\]: expected int, got NoneType"),
])
def test_loop_settings_refuse_bad_keys_naming_them(path, drop, message):
    with pytest.raises(C.ContractError, match=message):
        C.decode(C.LoopSettings, _with(LOOP, path, None, drop), "LoopSettings")


def test_events_refuse_unknown_events_and_fields():
    with pytest.raises(C.ContractError, match="unknown controller event 'link_flap'; allowed: link_down"):
        C.parse_event('{"event": "link_flap", "time_ns": 1}')
    line = json.loads(C.event_line(EVENTS[4]))
    line["switches_count"] = line.pop("switches")
    with pytest.raises(C.ContractError, match=r"rerouted\.switches_count: unknown field of Rerouted"):
        C.parse_event(json.dumps(line))
    with pytest.raises(C.ContractError, match="is not a controller event"):
        C.event_line(SETTINGS)
