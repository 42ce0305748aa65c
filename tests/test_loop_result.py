"""The congestion loop's result across the controller boundary (controllers.loop_result): the loop's own writer
and the testbed's reader agree, and a result with a wrong field, a missing one or a wrong type is refused with
an error naming the file, the field, the value and what was expected."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pandas as pd
import pytest
from loop_results import ECN_LOOP, PFC, PFC_LOOP, write_loop_result

from controllers import contract
from controllers.congestion.loop import CongestionLoop
from controllers.congestion.rx_pauses import RxPauses
from controllers.congestion.watchdog import PfcWatchdog
from controllers.loop_result import PFC_EVENT_NAMES, LoopResult, Percentiles, read_loop_result
from testbed.results.congestion import congestion_block, kick_frames, watchdog_drops_pkts
from testbed.results.schema import TABLES


@pytest.mark.parametrize("result", [ECN_LOOP, PFC_LOOP], ids=["ecn", "pfc"])
def test_a_result_round_trips_through_the_file(tmp_path, result):
    write_loop_result(tmp_path, result)
    assert read_loop_result(tmp_path) == result
    assert read_loop_result(tmp_path / "no_loop") is None


def _loop(tmp_path) -> CongestionLoop:
    """A loop that ran (PFC on with the watchdog, ECN off) without a fabric: its sampler, policy, gates, PFC
    senders and host-frame part replaced by what they would have counted."""
    loop = CongestionLoop.__new__(CongestionLoop)
    samples = pd.DataFrame({"time_ns": [1, 1, 2, 2], "port": ["p1", "p2", "p1", "p2"], "drops_pkts": [0, 5, 0, 7],
                            "backlog_bytes": [100, 0, 4300, 900]})
    loop.sampler = SimpleNamespace(to_frame=lambda: samples.copy(), missed_ticks=2, cpu_pct=7.04)
    loop.conf = SimpleNamespace(period_s=0.001, ecn=None)
    loop.results_dir, loop.ports, loop.marker = tmp_path, ["p1", "p2"], None
    loop.loop_ns = [400_000, 600_000, 2_000_000]
    loop.policy = SimpleNamespace(xoff_bytes=100_000, xon_bytes=70_000)
    loop.gates = {"p1": SimpleNamespace(kicks=3), "p2": SimpleNamespace(kicks=4)}
    loop.frames = {"p1": SimpleNamespace(counters=SimpleNamespace(frames=6))}
    loop.watchdog = PfcWatchdog(detect_ms=200.0, restore_ms=200.0, mitigate=True)
    loop.rx = RxPauses({}, {}, loop.watchdog)
    loop.events = [(10, "p1", 3, "pause", 120_000, "h1", "h1-eth0", 500.0, True),
                   (20, "p1", 3, "resume", 60_000, "h1", "h1-eth0", 700.0, True),
                   (30, "p2", 3, "storm", -1, "s1", "s1-eth1", 0.0, False)]
    return loop


def test_the_loops_writer_and_the_testbeds_reader_agree(tmp_path):
    result = _loop(tmp_path).write()
    assert read_loop_result(tmp_path) == result
    assert (result.ticks, result.missed_ticks, result.sampler_cpu_pct, result.loop_max_ms) == (3, 2, 7.0, 2.0)
    assert (result.lossless_drops_pkts, result.lossless_queue_max_bytes, result.ecn) == (2, 4300, None)
    pfc = result.pfc
    assert (pfc.kick_frames, pfc.host_pfc_frames, pfc.storms, pfc.restores, pfc.rx_pfc_frames) == (7, 6, 1, 0, 0)
    assert pfc.pause_actuation_us == Percentiles(p50=500.0, p99=500.0, n=1)
    assert pfc.watchdog.mitigate is True and pfc.watchdog.storms == 0  # the storm row came from the events
    events = pd.read_csv(tmp_path / contract.PFC_EVENTS_FILE)
    assert list(events.columns) == PFC_EVENT_NAMES == TABLES["pfc_events"].required()  # one definition
    block = congestion_block(tmp_path)
    assert block["pfc"] == contract.encode(pfc) and list(block["pfc"])[:3] == ["xoff_bytes", "xon_bytes",
                                                                              "kick_frames"]
    assert block["controller_loop_max_ms"] == 2.0 and block["storms"] == 1 and block["pause_frames"] == 1
    assert kick_frames(tmp_path) == 7 and watchdog_drops_pkts(tmp_path) == 0


def _sent(tmp_path, path: list, value=None, drop=False, rename=None) -> None:
    """Write PFC_LOOP with one field changed as another writer would send it."""
    doc = contract.encode(PFC_LOOP)
    at = doc
    for key in path[:-1]:
        at = at[key]
    if rename is not None:
        at[rename] = at.pop(path[-1])
    elif drop:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    write_loop_result(tmp_path, doc)


def test_a_result_with_a_wrong_field_name_is_refused_naming_it(tmp_path):
    """What the runner reads (summary.json's congestion block, the kick frames the loss check discounts)
    refuses a loop result whose field has another name, naming the file, the field and the allowed ones."""
    from testbed.pipeline.judge import discount_kick_frames

    _sent(tmp_path, ["pfc", "kick_frames"], rename="kicks")
    for read in (congestion_block, kick_frames,
                 lambda d: discount_kick_frames({"of_pipeline": 3}, d)):
        with pytest.raises(contract.ContractError) as e:
            read(tmp_path)
        msg = str(e.value)
        assert f"{contract.LOOP_RESULT_FILE}: LoopResult.pfc.kicks: unknown field of PfcResult" in msg, msg
        assert "kick_frames" in msg and "allowed:" in msg


def test_a_result_missing_a_field_is_refused_naming_it(tmp_path):
    _sent(tmp_path, ["ecn"], drop=True)
    with pytest.raises(contract.ContractError, match=r"LoopResult\.ecn: missing field of LoopResult"):
        read_loop_result(tmp_path)


@pytest.mark.parametrize("path, value, expected", [
    (["ticks"], "5000", r"LoopResult\.ticks: expected int, got str '5000'"),
    (["pfc", "watchdog", "mitigate"], 1, r"LoopResult\.pfc\.watchdog\.mitigate: expected bool, got int 1"),
    (["pfc", "pause_actuation_us", "n"], 2.5, r"pause_actuation_us\.n: expected int, got float 2\.5"),
    (["pfc"], [], r"LoopResult\.pfc: expected an object \(PfcResult\), got list"),
])
def test_a_result_with_a_wrong_type_is_refused_naming_field_value_and_type(tmp_path, path, value, expected):
    _sent(tmp_path, path, value)
    with pytest.raises(contract.ContractError, match=expected):
        congestion_block(tmp_path)


def test_a_result_file_that_is_not_json_is_named(tmp_path):
    (tmp_path / contract.LOOP_RESULT_FILE).write_text('{"period_s": 0.0')
    with pytest.raises(contract.ContractError, match=rf"{contract.LOOP_RESULT_FILE}: not JSON"):
        read_loop_result(tmp_path)


def test_none_where_not_measured_is_said_not_left_out(tmp_path):
    """Both sides say everything: a loop without samples writes its queue figures as null."""
    empty = dataclasses.replace(PFC_LOOP, lossless_drops_pkts=None, lossless_queue_p99_bytes=None,
                                lossless_queue_max_bytes=None, pfc=dataclasses.replace(PFC, watchdog=None))
    path = write_loop_result(tmp_path, empty)
    doc = json.loads(path.read_text())
    assert doc["lossless_drops_pkts"] is None and doc["pfc"]["watchdog"] is None
    assert read_loop_result(tmp_path) == empty
    assert isinstance(read_loop_result(tmp_path), LoopResult)
