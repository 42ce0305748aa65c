"""benchmarks/udp_ring_vs_testbed.py without a fabric: its step scenarios validate, its sizes and its verdict
on a sweep (the highest faithful rate, a confirmed step) are as documented."""
import math

import pytest

from benchmarks import udp_ring_vs_testbed as bench
from benchmarks.instruments.udp_ring import udp_payload_bytes
from testbed.spec.scenario import parse_scenario


@pytest.mark.parametrize("payload, mtu, window, ack", [(1024, 1500, 64, 16), (4096, 4200, 16, 4)])
def test_step_scenarios_keep_the_base_fabric_and_window_bytes(payload, mtu, window, ack):
    base = bench.base_scenario(bench.DEFAULT_SCENARIO)
    spec = parse_scenario(bench.scenario_for(base, payload, 20e6, size_bytes=8 * payload * 4))
    f = spec.fabric
    assert (f.spines, f.leaves, f.hosts_per_leaf) == (2, 4, 2)
    assert f.host_link_bps == f.fabric_link_bps == 20e6 and f.mtu_bytes == mtu
    t = spec.transport
    assert (t.payload_bytes, t.window_pkts, t.ack_every_pkts) == (payload, window, ack)
    # side A's datagrams have the data packets' wire size: Ethernet + IPv4 + UDP + BTH + payload + ICRC
    assert udp_payload_bytes(payload) + 42 == 14 + 20 + 8 + 12 + payload + 4


def test_size_lasts_about_op_s():
    size = bench.size_for(10e6, 1024, 8, 2.0)
    assert size % (8 * 1024) == 0
    seconds = 2 * 7 / 8 * size * 8 / (10e6 * 1024 / 1082)  # ring all-reduce busbw factor 2(n-1)/n
    assert 1.8 <= seconds <= 2.0


def _step(rate_m, ok, attempt=1):
    return bench.Step("A", 1024, rate_m * 1e6, rate_m * 1e6, 50.0, ok, "" if ok else f"fail {rate_m}", attempt)


def test_highest_faithful_rate_and_limit():
    best, limit = bench.highest_faithful([_step(5, True), _step(10, True), _step(15, False)])
    assert best == 10e6 and limit.violation == "fail 15"
    # a confirmed step counts when either run was faithful
    best, limit = bench.highest_faithful([_step(5, True), _step(10, False), _step(10, True, 2), _step(15, False),
                                          _step(15, False, 2)])
    assert best == 10e6 and limit.rate_bps == 15e6 and limit.attempt == 2
    best, limit = bench.highest_faithful([_step(5, True), _step(10, True)])
    assert best == 10e6 and limit is None
    assert bench.highest_faithful([_step(5, False)])[0] == 0


def test_summary_table_ratio():
    a = [_step(5, True), _step(10, True), _step(15, False)]
    b = [_step(5, True), _step(7.5, False)]
    lines = bench.summary_lines({1024: {"A": a, "B": b}})
    assert [c.strip() for c in lines[1].split("|")] == ["1024", "10 Mbit/s", "5 Mbit/s", "0.50", ""]
    assert any("limited at 15 Mbit/s by: fail 15" in x for x in lines)
    assert math.isfinite(a[0].delivered_bps)
