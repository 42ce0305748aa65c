"""Clock wander (testbed.emulation.clock_wander) and silent tail drop (testbed.emulation.switch_tail_drop):
their pure parts; the fabric tests show them on real queues."""
import struct

import pytest

from dataplane.skb_marks import SECOND_PASS_MARK
from testbed.emulation.clock_wander import LEVELS, ClockWander, band_bps, htb_class_change_msg, step_s
from testbed.emulation.switch_tail_drop import CHAIN_PRIORITY, ruleset, table_name
from testbed.spec.scenario import ScenarioError, parse_scenario


def test_bands_keep_every_host_below_every_switch_port():
    lo, hi = band_bps(10e6, 0.005, switch_port=False)
    assert (lo, hi) == (pytest.approx(9.95e6), 10e6)
    lo, hi = band_bps(10e6, 0.005, switch_port=True)
    assert (lo, hi) == (10e6, pytest.approx(10.05e6))


def test_step_moves_the_phase_by_half_a_frame():
    # 4154-byte frames at 10 Mbit/s: 3.32 ms; at 0.5 % a step of 0.33 s drifts 1.66 ms = half a frame
    assert step_s(0.005, 4154, 10e6) == pytest.approx(4154 * 8 / 10e6 / 0.01)
    assert step_s(0.02, 64, 10e9) == 0.02      # clamped: no faster than 50 changes/s per interface
    assert step_s(0.0001, 9014, 1e6) == 2.0    # clamped: mixes within a run


def test_htb_change_message_layout():
    msg = htb_class_change_msg(7, 0x10001, 0x10000, 1_250_000, 12_462, 4154)
    length, mtype, flags = struct.unpack_from("=IHH", msg)
    assert length == len(msg) and mtype == 40 and flags == 0x5  # RTM_NEWTCLASS, request | ack
    family, _, _, ifindex, handle, parent = struct.unpack_from("=BBHiII", msg, 16)
    assert (ifindex, handle, parent) == (7, 0x10001, 0x10000)
    assert b"htb\0" in msg
    i = msg.index(struct.pack("=HH", 4 + 12 + 12 + 20, 1))  # TCA_HTB_PARMS
    rate = struct.unpack_from("=I", msg, i + 4 + 8)[0]
    ceil = struct.unpack_from("=I", msg, i + 4 + 12 + 8)[0]
    buf, cbuf, quantum = struct.unpack_from("=III", msg, i + 4 + 24)
    assert rate == ceil == 1_250_000 and quantum == 4154
    assert buf == cbuf == (12_462 * 10**9 // 1_250_000) >> 6
    big = htb_class_change_msg(7, 0x10001, 0x10000, 5 * 2**32, 100_000, 9014)
    assert struct.pack("=Q", 5 * 2**32) in big  # TCA_HTB_RATE64 / CEIL64 above 34 Gbit/s
    with pytest.raises(ValueError):
        htb_class_change_msg(7, 0x10001, 0x10000, 0, 1, 1)


def test_wander_fraction_is_bounded():
    with pytest.raises(ValueError, match="0 < fraction <= 0.02"):
        ClockWander([], 0.05, 1514, 1)
    assert LEVELS >= 2


def test_scenario_key():
    base = {"name": "x", "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}
    assert parse_scenario(base).fabric.clock_wander == 0.005
    assert parse_scenario({**base, "fabric": {"clock_wander": "off"}}).fabric.clock_wander is None
    assert parse_scenario({**base, "fabric": {"clock_wander": 0.01}}).fabric.clock_wander == 0.01
    for bad in (0, 0.5, "fast"):
        with pytest.raises(ScenarioError, match="clock_wander"):
            parse_scenario({**base, "fabric": {"clock_wander": bad}})


def test_tail_drop_ruleset():
    text = ruleset("tb12ab", ["tb12abl1-eth1", "tb12abs1-eth2"])
    assert text.splitlines()[0] == f"add table netdev {table_name('tb12ab')}" == "add table netdev tb12abtail"
    assert text.count("hook egress device") == 2 and f"priority {CHAIN_PRIORITY};" in text
    assert f'meta mark != {SECOND_PASS_MARK:#x} meta mark set {SECOND_PASS_MARK:#x} fwd to "tb12abs1-eth2"' in text
    with pytest.raises(ValueError, match="not an interface name"):
        ruleset("tb12ab", ['a"; flush ruleset'])
